// Hostile input to the mixture code: tampered or foreign saved positions (Loader::resume with a
// MixState that is not what epoch_position() wrote), absurd epoch sizes, and Mixture::make with
// odd sources and class lists. Each is a named Error(kInvalidArgument), never a crash, a failed
// allocation or a silently different order.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/loader.h"
#include "mix_fixtures.h"
#include "test_util.h"

using namespace dscache::test;
using dscache::MixState;

namespace {

LoaderOptions opts(uint32_t batch = 5) {
  LoaderOptions o = small_options(batch);
  o.workers = 1;
  return o;
}

// A source that only describes itself: n samples of 2x2x1, every label 0.
class TinySource : public SampleSource {
 public:
  explicit TinySource(uint64_t n) : n_(n) {}
  uint64_t size() const override { return n_; }
  Layout layout() const override { return Layout::kFixed; }
  SampleShape shape() const override { return SampleShape{2, 2, 1}; }
  int64_t label(uint64_t) const override { return 0; }
  uint64_t locality_block() const override { return 1; }
  void copy_sample(uint64_t i, uint8_t* out) const override {
    std::memset(out, static_cast<int>(i), 4);
  }
  ImageView view(uint64_t) const override { throw Error(ErrorKind::kUnsupported, "", "no"); }

 private:
  uint64_t n_;
};

MixSource tiny(uint64_t n, const std::string& name, double weight,
               std::vector<std::string> classes) {
  MixSource s;
  s.source = std::make_shared<TinySource>(n);
  s.name = name;
  s.weight = weight;
  s.classes = std::move(classes);
  return s;
}

// The reason of the Error(kInvalidArgument) f throws ("" and a failed CHECK for anything else,
// a std::bad_alloc included).
std::string reason_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    return e.reason();
  } catch (const std::exception& e) {
    FAIL_CHECK("not a dscache::Error: " << e.what());
  }
  return "";
}

// Tampered copies of a position saved at sample 15 of epoch 3 of mix_of(pair, 0.7, 0.3), and
// what the refusal must name.
struct Case {
  const char* what;
  std::function<void(EpochPosition&)> tamper;
  WeightChange change;
  Parts parts;
};

std::vector<Case> hostile_cases() {
  const uint64_t huge = UINT64_MAX - 3;
  return {
      {"drawn of 3 sources",
       [](EpochPosition& e) { e.mix.drawn.push_back(0); },
       WeightChange::kRefuse,
       {"position.mix.drawn has 3 sources, the mixture 2"}},
      {"segment_drawn of 1",
       [](EpochPosition& e) { e.mix.segment_drawn.pop_back(); },
       WeightChange::kRefuse,
       {"position.mix.segment_drawn has 1 sources"}},
      {"taken empty",
       [](EpochPosition& e) { e.mix.taken.clear(); },
       WeightChange::kContinue,
       {"position.mix.taken has 0 sources"}},
      {"segment 0 starting mid-epoch",
       [](EpochPosition& e) { e.mix.segment_start = 5; },
       WeightChange::kRefuse,
       {"position.mix.segment_start 5", "segment 0"}},
      {"segment after the sample",
       [](EpochPosition& e) {
         e.mix.segment = 1;
         e.mix.segment_start = 20;
       },
       WeightChange::kRefuse,
       {"position.mix.segment_start 20 > position.sample 15"}},
      {"sample past the epoch",
       [](EpochPosition& e) { e.sample = 75; },
       WeightChange::kRefuse,
       {"position.sample 75 > the epoch's 70 samples"}},
      {"segment_drawn near 2^64",
       [=](EpochPosition& e) { e.mix.segment_drawn[0] = huge; },
       WeightChange::kRefuse,
       {"position.mix.segment_drawn[0] (a)", "past 2^32-1"}},
      {"drawn near 2^64",
       [=](EpochPosition& e) {
         e.mix.drawn[1] = huge;
         e.mix.segment_drawn[1] = huge;
       },
       WeightChange::kContinue,
       {"position.mix.drawn[1] (b)", "past 2^32-1"}},
      {"a draw past pass 2^32-1",
       [](EpochPosition& e) {
         const uint64_t at = (uint64_t{1} << 32) * 53;  // a's pass 2^32
         e.mix.segment_drawn[0] = e.mix.drawn[0] = at;
       },
       WeightChange::kContinue,
       {"position.mix.drawn[0] (a)", "pass 4294967296"}},
      {"drawn behind segment_drawn",
       [](EpochPosition& e) { e.mix.drawn[0] = 0; },
       WeightChange::kRefuse,
       {"position.mix.drawn[0] (a) 0 < segment_drawn"}},
      {"more drawn than taken",
       [](EpochPosition& e) { e.mix.drawn[0] += 1; },
       WeightChange::kRefuse,
       {"position.mix.taken[0] (a)", "draws"}},
      {"taken not summing to the sample",
       [](EpochPosition& e) { e.mix.taken[0] += 1; },
       WeightChange::kRefuse,
       {"position.mix.taken sums to 16", "position.sample 15"}},
      {"taken near 2^64",
       [](EpochPosition& e) {
         e.mix.taken[0] = UINT64_MAX;
         e.mix.taken[1] = e.sample + 1;
       },
       WeightChange::kContinue,
       {"position.mix.taken[0] (a) 18446744073709551615"}},
      {"draws moved between sources, sums kept",
       [](EpochPosition& e) {
         e.mix.drawn[0] += 1;
         e.mix.taken[0] += 1;
         e.mix.drawn[1] -= 1;
         e.mix.taken[1] -= 1;
       },
       WeightChange::kRefuse,
       {"position.mix.drawn", "the segment's order"}},
      {"no more segments",
       [](EpochPosition& e) {
         e.mix.fingerprint ^= 1;
         e.mix.segment = UINT32_MAX;
       },
       WeightChange::kContinue,
       {"position.mix.segment 4294967295"}},
      {"another mixture's fingerprint",
       [](EpochPosition& e) { e.mix.fingerprint ^= 1; },
       WeightChange::kRefuse,
       {"saved under other mixture shares", "a 0.7, b 0.3"}},
      {"a single source's position",
       [](EpochPosition& e) { e.mix = MixState{}; },
       WeightChange::kRefuse,
       {"position.mix is empty", "single source"}},
      {"a single source's position, continued",
       [](EpochPosition& e) { e.mix = MixState{}; },
       WeightChange::kContinue,
       {"position.mix is empty", "single source"}},
  };
}

}  // namespace

TEST_SUITE("mixture") {
  TEST_CASE("resume refuses a tampered or foreign mixture position by name; then resumes") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto m = mix_of(p, 0.7, 0.3);  // 49 + 21 = 70 samples an epoch
    Loader saver(m, opts());
    saver.start_epoch(6, 3);
    drain_mix(saver, 3);
    const EpochPosition good = saver.epoch_position();
    REQUIRE(good.sample == 15);
    const std::vector<MixTaken> rest = drain_mix(saver);

    const std::vector<Case> cases = hostile_cases();
    Loader loader(m, opts());
    for (const Case& c : cases) {
      const std::string what = c.what;
      CAPTURE(what);
      EpochPosition bad = good;
      c.tamper(bad);
      const std::string r = reason_of([&] { loader.resume(bad, c.change); });
      CAPTURE(r);
      for (const std::string& part : c.parts.all) CHECK(r.find(part) != std::string::npos);
      CHECK(!r.empty());
    }
    // None of it stuck: the good position resumes to the uninterrupted run's batches.
    loader.resume(good);
    CHECK(drain_mix(loader) == rest);
  }

  TEST_CASE("an epoch whose streams would wrap past 2^64 after a resume is refused") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    MixSource a;
    a.source = p.a.cache;
    a.name = "a";
    auto m = Mixture::make({a});  // one source, 53 samples an epoch
    Loader saver(m, opts());
    saver.start_epoch(6, 0);
    drain_mix(saver, 3);
    Loader loader(m, opts());
    loader.resume(saver.epoch_position(), WeightChange::kContinue);  // later epochs from 53
    // Epoch 1 + t draws from t x 53 + 53 > 2^64 - 1: wrapped, a small stream position.
    const uint64_t t = UINT64_MAX / 53;
    const std::string r = reason_of([&] { loader.start_epoch(6, 1 + t); });
    CHECK(r.find("source a's stream position overflows 64 bits") != std::string::npos);
  }

  TEST_CASE("a refused resume puts back where later epochs' streams continue") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto old_shares = mix_of(p, 0.7, 0.3), now = mix_of(p, 0.5, 0.5);
    Loader saver(old_shares, opts());
    saver.start_epoch(6, 0);
    drain_mix(saver, 3);
    const EpochPosition at15 = saver.epoch_position();
    Loader other(now, opts(2));  // a position of `now` at sample 4: not a multiple of 5
    other.start_epoch(6, 5);
    drain_mix(other, 2);
    const EpochPosition at4 = other.epoch_position();
    REQUIRE(at4.sample == 4);

    Loader plain(now, opts()), refused(now, opts());
    for (Loader* l : {&plain, &refused}) l->resume(at15, WeightChange::kContinue);
    // resume() takes at4's segment (epoch 5, streams after it), then cursor_at refuses it.
    CHECK(reason_of([&] { refused.resume(at4); }).find("not a multiple of batch_size 5") !=
          std::string::npos);
    plain.start_epoch(6, 2);  // later epochs continue from the new segment's end
    refused.start_epoch(6, 2);
    CHECK(drain_mix(refused) == drain_mix(plain));
  }

  TEST_CASE("a single source's Loader refuses a mixture's position by name") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    Loader saver(mix_of(p, 0.7, 0.3), opts());
    saver.start_epoch(6, 3);
    drain_mix(saver, 2);
    EpochPosition pos = saver.epoch_position();
    Loader single(p.a.cache, opts());
    const std::string r = reason_of([&] { single.resume(pos); });
    CHECK(r.find("position.mix") != std::string::npos);
    CHECK(r.find("a single source") != std::string::npos);
    pos.mix = MixState{};
    CHECK_NOTHROW(single.resume(pos));  // the same position without the mixture's part
  }

  TEST_CASE("an epoch whose order cannot fit in memory is refused when the Loader is made") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    MixtureOptions o;
    o.epoch_samples = 1000000000000000ull;  // 10^15 positions: 24 PB of order
    auto m = mix_of(p, 0.7, 0.3, false, o);
    CHECK(m->epoch_samples() == o.epoch_samples);  // the mixture itself is O(sources)
    const std::string r = reason_of([&] { Loader loader(m, opts()); });
    CHECK(r.find("epoch_samples 1000000000000000") != std::string::npos);
    CHECK(r.find("more than this machine's memory") != std::string::npos);
    // 2^64-1 samples: the byte count itself overflows, refused the same way.
    o.epoch_samples = UINT64_MAX;
    auto top = mix_of(p, 0.7, 0.3, false, o);
    CHECK(reason_of([&] { Loader loader(top, opts()); }).find("epoch_samples") !=
          std::string::npos);
  }

  TEST_CASE("make: an empty source with weight 0 only adds class names; duplicates refused") {
    auto m = Mixture::make({tiny(0, "none", 0, {"z", "y"}), tiny(5, "five", 1, {"y", "x"})});
    CHECK(m->counts() == std::vector<uint64_t>{0, 5});
    CHECK(m->classes() == std::vector<std::string>{"z", "y", "x"});
    CHECK(m->remap(1) == std::vector<int64_t>{1, 2});
    CHECK(m->locate(0) == std::pair<uint32_t, uint64_t>{1, 0});  // the empty source holds none
    Loader loader(m, opts(2));
    loader.start_epoch(1, 0);
    uint64_t served = 0;
    while (const Batch* b = loader.next()) {
      for (uint32_t i = 0; i < b->size; ++i) CHECK(b->sources[i] == 1);
      served += b->size;
    }
    CHECK(served == 5);
    // A class list naming one class twice would merge two labels (or leave one unused).
    const std::string own = reason_of([] {
      Mixture::make({tiny(3, "a", 1, {"p", "q", "p"}), tiny(3, "b", 1, {"q"})});
    });
    CHECK(own.find("a's classes name \"p\" twice") != std::string::npos);
    MixtureOptions given;
    given.classes = {"q", "p", "q"};
    const std::string listed = reason_of([&] {
      Mixture::make({tiny(3, "a", 1, {"p"}), tiny(3, "b", 1, {"q"})}, given);
    });
    CHECK(listed.find("the given classes name \"q\" twice") != std::string::npos);
  }

  TEST_CASE("make over 70000 sources stays linear (names and classes checked by lookup)") {
    std::vector<MixSource> sources;
    for (uint32_t k = 0; k < 70000; ++k) {
      sources.push_back(tiny(1, "s" + std::to_string(k), 1, {"c" + std::to_string(k)}));
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto m = Mixture::make(sources);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(m->sources() == 70000);
    CHECK(m->classes().size() == 70000);
    CHECK(m->remap(69999) == std::vector<int64_t>{69999});
    CHECK(m->locate(69999) == std::pair<uint32_t, uint64_t>{69999, 0});
    CHECK(s < 5.0);  // quadratic checks took minutes here
    sources.back().name = "s17";
    CHECK(reason_of([&] { Mixture::make(sources); }).find("two sources are named s17") !=
          std::string::npos);
  }
}
