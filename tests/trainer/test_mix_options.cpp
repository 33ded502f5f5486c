// dscache-train's mixture options (--train repeated, --mix, --mix-repeat, --mix-samples,
// --mix-batching, --allow-mix-change, several --val): what they parse to and what
// resolve_and_validate refuses, naming the option. options.cpp alone (no LibTorch).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "options.h"

namespace {

using namespace dscache::train;

TrainOptions resolved(const std::vector<std::string>& args) {
  bool help = false;
  TrainOptions o = parse_options(args, &help, nullptr);
  resolve_and_validate(&o);
  return o;
}

// The UsageError's message of parsing and resolving `args`; fails when they are accepted.
std::string refusal(const std::vector<std::string>& args) {
  try {
    resolved(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  FAIL("accepted");
  return "";
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("mixture options: --train repeated with --mix parses to a mixture, in order") {
    const TrainOptions o =
        resolved({"--train", "a", "--train", "b", "--mix", "0.7,0.3", "--mix-samples", "100",
                  "--mix-batching", "stratified", "--val", "va", "--val", "vb"});
    CHECK(o.trains == std::vector<std::string>{"a", "b"});
    CHECK(o.train == "a");  // the first, for what names one cache
    CHECK(o.vals == std::vector<std::string>{"va", "vb"});
    CHECK(o.val == "va");
    CHECK(o.mix_weights == std::vector<double>{0.7, 0.3});
    CHECK(o.mix_repeats.empty());
    CHECK(o.mix_samples == 100);
    CHECK(o.mix_stratified);
    CHECK(o.mixing());
    const TrainOptions r = resolved({"--train", "a", "--train", "b", "--mix-repeat", "1,3"});
    CHECK(r.mix_repeats == std::vector<double>{1, 3});
    CHECK_FALSE(r.mix_stratified);
    CHECK(r.mixing());
    // One --train without --mix: the single-cache run.
    const TrainOptions one = resolved({"--train", "a", "--val", "va"});
    CHECK_FALSE(one.mixing());
    CHECK(one.trains == std::vector<std::string>{"a"});
    CHECK(one.vals == std::vector<std::string>{"va"});
  }

  TEST_CASE("mixture options: counts, combinations and what cannot mix are refused by name") {
    struct Row {
      std::vector<std::string> args;
      std::string message;
    };
    const std::vector<Row> rows = {
        {{"--train", "a", "--train", "b", "--mix", "1,2,3"},
         "--mix: 3 values for 2 --train caches: give one per --train, in order"},
        {{"--train", "a", "--mix-repeat", "1,2"}, "--mix-repeat: 2 values for 1 --train cache"},
        {{"--train", "a", "--train", "b", "--mix", "1,1", "--mix-repeat", "1,1"},
         "--mix and --mix-repeat: give one"},
        {{"--train", "a", "--train", "b", "--mix", "0.5,-1"}, "--mix: '-1' in '0.5,-1'"},
        {{"--train", "a", "--train", "b", "--mix", "0.5,"}, "--mix: '' in '0.5,'"},
        {{"--train", "a", "--train", "b", "--mix", "nan,1"}, "--mix: 'nan' in 'nan,1'"},
        {{"--train", "a", "--train", "b", "--mix-repeat", "1,1", "--mix-samples", "9"},
         "--mix-samples: applies to --mix"},
        {{"--train", "a", "--mix-samples", "9"}, "--mix-samples: applies to a mixture"},
        {{"--train", "a", "--train", "b", "--lazy-cache", "f", "--image-size", "8"},
         "--lazy-cache: decodes one image folder; a mixture (2 --train)"},
        {{"--train", "a", "--train", "b", "--shuffle", "windowed"},
         "--shuffle windowed: a mixture of caches is shuffled globally"},
        {{"--train", "a", "--train", "b", "--task", "regress", "--targets", "r"},
         "--task regress: a mixture of caches trains --task classify"},
        {{"--train", "a", "--val", "v", "--val", "w", "--val-lazy-cache", "f", "--image-size", "8"},
         "--val-lazy-cache: decodes one --val; 2 --val"},
        {{"--train", "a", "--train", "b", "--allow-mix-change"},
         "--allow-mix-change: needs --resume"},
        {{"--train", "a", "--allow-mix-change", "--resume", "--output", "o"},
         "--allow-mix-change: applies to a mixture"},
        {{"--train", "a", "--train", "b", "--mix-batching", "sorted"}, "--mix-batching"},
    };
    for (const Row& r : rows) {
      CAPTURE(r.message);
      CHECK(refusal(r.args).find(r.message) != std::string::npos);
    }
  }
}
