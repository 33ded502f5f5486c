// dscache-train over a mixture of caches (suite cli, meson test trainer_mix): each epoch's
// samples per source equal the largest-remainder split written here, labels unified by class
// name, several --val each reported, the refusals of what cannot mix (exit 2), and a resume
// under other shares refused or, with --allow-mix-change, continued. No LibTorch here.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli_fixtures.h"
#include "fixtures.h"
#include "mix_fixtures.h"
#include "train_runs.h"

namespace {

using trainer_test::cat;
using trainer_test::code_of;
using trainer_test::read_file;
using trainer_test::TempDir;
using trainer_test::train_exe;

// Cache a: 50 samples of 4 classes; b: 34 samples of 3 classes, two of them a's too.
const std::vector<std::string> kClassesA = {"cat", "dog", "fox", "owl"};
const std::vector<std::string> kClassesB = {"dog", "eel", "cat"};

struct Caches {
  std::string a, b;
};

Caches two_caches(const TempDir& tmp) {
  Caches c{tmp.path() + "/a", tmp.path() + "/b"};
  trainer_test::write_named_cache(c.a, 50, kClassesA, 11);
  trainer_test::write_named_cache(c.b, 34, kClassesB, 12);
  return c;
}

std::vector<std::string> mix_args(const Caches& c, const std::string& out,
                                  const std::vector<std::string>& extra) {
  return cat({train_exe(), "--train", c.a, "--train", c.b, "--output", out},
             cat({"--batch", "8", "--threads", "1", "--workers", "1", "--seed", "5", "--log-every",
                  "1", "--no-progress"},
                 extra));
}

// The epoch lines of OUT/metrics.jsonl.
std::vector<nlohmann::json> epoch_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  for (const auto& l : trainer_test::read_metrics(out + "/metrics.jsonl")) {
    if (l["kind"] == "epoch") lines.push_back(l);
  }
  return lines;
}

int run(const std::vector<std::string>& args, const std::string& log,
        const std::vector<std::string>& env = {}) {
  std::filesystem::remove(log);
  return code_of(trainer_test::run_process(args, env, log));
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("mixture: each epoch's samples_per_source equal the largest-remainder counts") {
    TempDir tmp;
    const Caches c = two_caches(tmp);
    struct Case {
      std::vector<std::string> flags;
      std::vector<double> weights;
      uint64_t epoch_samples;
    };
    const std::vector<Case> cases = {
        {{"--mix", "0.7,0.3"}, {0.7, 0.3}, 84},  // random; 84 = 50 + 34: 58.8, 25.2
        {{"--mix", "0.65,0.35", "--mix-samples", "61", "--mix-batching", "stratified",
          "--accum-steps", "2"},
         {0.65, 0.35},
         61},  // 39.65, 21.35; strata of 16 samples
    };
    for (const Case& k : cases) {
      CAPTURE(k.epoch_samples);
      const std::string out = tmp.path() + "/run" + std::to_string(k.epoch_samples);
      const std::string log = out + ".log";
      const int code = run(mix_args(c, out, cat(k.flags, {"--epochs", "2"})), log);
      INFO(read_file(log));
      REQUIRE(code == 0);
      const std::vector<uint64_t> want =
          trainer_test::largest_remainder_ref(k.epoch_samples, k.weights);
      const auto lines = epoch_lines(out);
      REQUIRE(lines.size() == 2);
      for (const auto& l : lines) {
        CAPTURE(l.dump());
        REQUIRE(l.contains("samples_per_source"));
        CHECK(l["samples_per_source"].size() == 2);
        CHECK(l["samples_per_source"]["a"].get<uint64_t>() == want[0]);
        CHECK(l["samples_per_source"]["b"].get<uint64_t>() == want[1]);
      }
      // One output per class name: a's in order, then b's new one.
      const auto card = nlohmann::json::parse(read_file(out + "/model.json"));
      CHECK(card["classes"] == std::vector<std::string>{"cat", "dog", "fox", "owl", "eel"});
    }
  }

  TEST_CASE("mixture: several --val are each validated with the training classes") {
    TempDir tmp;
    const Caches c = two_caches(tmp);
    const std::string va = tmp.path() + "/va", vb = tmp.path() + "/vb";
    trainer_test::write_named_cache(va, 20, kClassesA, 21);
    trainer_test::write_named_cache(vb, 12, {"eel", "dog"}, 22);  // a subset, in its own order
    const std::string out = tmp.path() + "/run", log = tmp.path() + "/log.txt";
    REQUIRE(run(mix_args(c, out, {"--mix", "0.5,0.5", "--val", va, "--val", vb}), log) == 0);
    const auto lines = epoch_lines(out);
    REQUIRE(lines.size() == 1);
    const nlohmann::json& l = lines[0];
    CAPTURE(l.dump());
    REQUIRE(l.contains("val"));
    CHECK(l["val"].size() == 2);
    for (const std::string& v : {va, vb}) {
      CAPTURE(v);
      REQUIRE(l["val"].contains(v));
      CHECK(l["val"][v]["loss"].is_number());
      CHECK(l["val"][v]["acc"].get<double>() >= 0.0);
      CHECK(l["val"][v]["acc"].get<double>() <= 1.0);
    }
    // The first --val also fills today's keys.
    CHECK(l["val_loss"] == l["val"][va]["loss"]);
    CHECK(l["val_acc"] == l["val"][va]["acc"]);
    // A --val class the model has no output for is refused by name.
    const std::string vbad = tmp.path() + "/vbad";
    trainer_test::write_named_cache(vbad, 8, {"dog", "yak"}, 23);
    const int code = run(mix_args(c, tmp.path() + "/bad", {"--val", va, "--val", vbad}), log);
    const std::string text = read_file(log);
    INFO(text);
    CHECK(code == 2);
    CHECK(text.find("--val " + vbad + ": class 'yak' is not among the training classes") !=
          std::string::npos);
  }

  TEST_CASE("mixture: several --val with one --train, one relabelled to its class list") {
    TempDir tmp;
    const Caches c = two_caches(tmp);
    const std::string va = tmp.path() + "/va", vb = tmp.path() + "/vb";
    trainer_test::write_named_cache(va, 20, kClassesA, 21);
    trainer_test::write_named_cache(vb, 12, {"owl", "cat"}, 22);  // a's classes, other order
    const std::string out = tmp.path() + "/run", log = tmp.path() + "/log.txt";
    const std::vector<std::string> args =
        cat({train_exe(), "--train", c.a, "--val", va, "--val", vb, "--output", out},
            {"--batch", "8", "--threads", "1", "--seed", "5", "--no-progress"});
    const int code = run(args, log);
    INFO(read_file(log));
    REQUIRE(code == 0);
    const auto lines = epoch_lines(out);
    REQUIRE(lines.size() == 1);
    const nlohmann::json& l = lines[0];
    CAPTURE(l.dump());
    CHECK_FALSE(l.contains("samples_per_source"));  // one cache
    REQUIRE(l.contains("val"));
    CHECK(l["val"].size() == 2);
    CHECK(l["val_loss"] == l["val"][va]["loss"]);
    CHECK(l["val_acc"] == l["val"][va]["acc"]);
    CHECK(l["val"][vb]["loss"].is_number());
  }

  TEST_CASE("mixture: options that cannot mix are refused with exit 2 naming them") {
    TempDir tmp;
    const Caches c = two_caches(tmp);
    const std::string log = tmp.path() + "/log.txt";
    struct Refusal {
      std::vector<std::string> flags;
      std::string message;
    };
    const std::vector<Refusal> refusals = {
        {{"--mix", "0.5"}, "--mix: 1 value for 2 --train caches: give one per --train"},
        {{"--mix-repeat", "1,2,3"}, "--mix-repeat: 3 values for 2 --train caches"},
        {{"--mix", "0.5,0.5", "--mix-repeat", "1,1"}, "--mix and --mix-repeat: give one"},
        {{"--mix", "0.5,x"}, "--mix: 'x' in '0.5,x' is not a number >= 0"},
        {{"--lazy-cache", tmp.path() + "/lazy.bin", "--image-size", "8"},
         "--lazy-cache: decodes one image folder; a mixture (2 --train)"},
        {{"--mix-batching", "sorted"}, "--mix-batching"},
    };
    for (const Refusal& r : refusals) {
      CAPTURE(r.message);
      const int code = run(mix_args(c, tmp.path() + "/out", r.flags), log);
      const std::string text = read_file(log);
      INFO(text);
      CHECK(code == 2);
      CHECK(text.find(r.message) != std::string::npos);
    }
    // Caches that disagree: the library's differences, as a usage error.
    const std::string rgb = tmp.path() + "/rgb";
    trainer_test::write_cache(rgb, trainer_test::synthetic(10, 8, 8, 3, 2, 13));
    const int mixed = run(cat({train_exe(), "--train", c.a, "--train", rgb}, {}), log);
    const std::string differ = read_file(log);
    INFO(differ);
    CHECK(mixed == 2);
    CHECK(differ.find("dscache-train: --train " + c.a + ", " + rgb + ": ") != std::string::npos);
    CHECK(differ.find("channel") != std::string::npos);
    // One --train with --mix-batching: nothing to mix.
    const int code =
        run(cat({train_exe(), "--train", c.a, "--mix-batching", "stratified"}, {}), log);
    CHECK(code == 2);
    CHECK(read_file(log).find("--mix-batching: applies to a mixture") != std::string::npos);
  }

  TEST_CASE(
      "mixture: a resume under other shares is refused, or continued with "
      "--allow-mix-change") {
    TempDir tmp;
    const Caches c = two_caches(tmp);
    const std::string out = tmp.path() + "/run", log = tmp.path() + "/log.txt";
    const std::string samples = tmp.path() + "/samples.txt";
    // 84 samples, batch 8: 11 steps; killed after step 3 (24 samples taken).
    const std::vector<std::string> base = {"--checkpoint-every", "1"};
    REQUIRE(run(mix_args(c, out, cat(base, {"--mix", "0.7,0.3"})), log,
                {"DSCACHE_TEST_KILL_AFTER_STEPS=3", "DSCACHE_TEST_SAMPLE_LOG=" + samples}) ==
            128 + SIGKILL);
    const std::string before = read_file(out + "/checkpoint.pt");
    const int refused = run(mix_args(c, out, cat(base, {"--mix", "0.5,0.5", "--resume"})), log);
    std::string text = read_file(log);
    INFO(text);
    CHECK(refused == 2);
    CHECK(text.find("was made under other mixture shares") != std::string::npos);
    CHECK(text.find("0.7") != std::string::npos);
    CHECK(text.find("0.5") != std::string::npos);
    CHECK(text.find("--allow-mix-change") != std::string::npos);
    CHECK(read_file(out + "/checkpoint.pt") == before);  // nothing written
    const int resumed = run(
        mix_args(c, out, cat(base, {"--mix", "0.5,0.5", "--resume", "--allow-mix-change"})), log);
    text = read_file(log);
    INFO(text);
    CHECK(resumed == 0);
    CHECK(text.find("dscache-train: --allow-mix-change: the samples taken stand") !=
          std::string::npos);
    // The epoch: the 24 samples taken under 0.7/0.3 (as logged), the other 60 split 30/30.
    const auto steps = trainer_test::mix_steps_of(read_file(samples));
    REQUIRE(steps.size() == 3);
    uint64_t taken[2] = {0, 0};
    for (const auto& [step, s] : steps) {
      for (const auto& [source, index] : s.samples) ++taken[source];
    }
    REQUIRE(taken[0] + taken[1] == 24);
    const std::vector<uint64_t> rest = trainer_test::largest_remainder_ref(60, {0.5, 0.5});
    const auto lines = epoch_lines(out);
    REQUIRE(lines.size() == 1);
    CAPTURE(lines[0].dump());
    CHECK(lines[0]["samples_per_source"]["a"].get<uint64_t>() == taken[0] + rest[0]);
    CHECK(lines[0]["samples_per_source"]["b"].get<uint64_t>() == taken[1] + rest[1]);
  }

  TEST_CASE(
      "mixture: after --allow-mix-change, a run restarted at an epoch's end draws the next "
      "epoch as the uninterrupted run does") {
    TempDir tmp;
    const Caches c = two_caches(tmp);
    const std::string log = tmp.path() + "/log.txt";
    const std::vector<std::string> base = {"--checkpoint-every", "1"};
    const std::vector<std::string> change = {"--mix", "0.5,0.5", "--resume", "--allow-mix-change"};
    // Both runs: 0.7/0.3 killed after step 3, then 0.5/0.5 from there.
    std::map<std::string, std::string> samples;
    for (const std::string name : {"whole", "restarted"}) {
      const std::string out = tmp.path() + "/" + name;
      samples[name] = out + ".samples";
      REQUIRE(run(mix_args(c, out, cat(base, {"--mix", "0.7,0.3", "--epochs", "2"})), log,
                  {"DSCACHE_TEST_KILL_AFTER_STEPS=3"}) == 128 + SIGKILL);
      const std::vector<std::string> env = {"DSCACHE_TEST_SAMPLE_LOG=" + samples[name]};
      if (name == "whole") {
        REQUIRE(run(mix_args(c, out, cat(base, cat(change, {"--epochs", "2"}))), log, env) == 0);
        continue;
      }
      // Epoch 0 to its end (a checkpoint that closes it), then epoch 1 by a new process.
      REQUIRE(run(mix_args(c, out, cat(base, cat(change, {"--epochs", "1"}))), log, env) == 0);
      const int code = run(mix_args(c, out, cat(base, cat(change, {"--epochs", "2"}))), log, env);
      INFO(read_file(log));
      REQUIRE(code == 0);
    }
    const auto whole = trainer_test::mix_steps_of(read_file(samples["whole"]));
    const auto restarted = trainer_test::mix_steps_of(read_file(samples["restarted"]));
    REQUIRE(whole.size() == 19);  // steps 4..22: 84 samples in 11 steps of 8 per epoch
    REQUIRE(restarted.size() == whole.size());
    for (const auto& [step, w] : whole) {
      CAPTURE(step);
      REQUIRE(restarted.count(step) == 1);
      CHECK(restarted.at(step).epoch == w.epoch);
      CHECK(restarted.at(step).samples == w.samples);
    }
  }
}
