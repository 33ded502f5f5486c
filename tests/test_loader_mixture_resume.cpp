// A Loader over a Mixture resumed from its EpochPosition: bit-exact at the same world size,
// elastic over 4 -> 2 -> 1 -> 3 ranks, and under new weights (refused unless kContinue, which
// keeps [0, G) and serves the rest of the epoch under the new shares from the saved streams).
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "mix_fixtures.h"
#include "test_util.h"

using namespace dscache::test;
using dscache::MixSegment;

namespace {

LoaderOptions opts(uint32_t batch, uint32_t rank, uint32_t world, uint32_t workers = 2) {
  LoaderOptions o = small_options(batch);
  o.workers = workers;
  o.sampler.rank = rank;
  o.sampler.world_size = world;
  o.transform.crop = CropMode::kRandomResized;
  o.transform.height = 4;
  o.transform.width = 4;
  o.transform.flip = true;
  return o;
}

struct Stage {
  uint32_t world, batch, workers;
  size_t batches;  // per rank; SIZE_MAX: the rest
};

// One stage over every rank: served by global position; returns the EpochPosition all ranks
// report afterwards (checked equal).
EpochPosition run_stage(std::shared_ptr<const Mixture> m, const Stage& s, const EpochPosition* at,
                        std::map<uint64_t, std::vector<Served>>* served) {
  std::vector<EpochPosition> after;
  for (uint32_t r = 0; r < s.world; ++r) {
    Loader loader(m, opts(s.batch, r, s.world, s.workers));
    if (at != nullptr) {
      loader.resume(*at);
    } else {
      loader.start_epoch(6, 3);
    }
    std::map<uint64_t, Served> mine;
    collect(drain_mix(loader, s.batches), s.batch, r, s.world, &mine);
    for (auto& [q, v] : mine) (*served)[q].push_back(v);
    after.push_back(loader.epoch_position());
  }
  for (const EpochPosition& p : after) {
    CHECK(p.sample == after[0].sample);
    CHECK(p.mix.drawn == after[0].mix.drawn);
    CHECK(p.mix.taken == after[0].mix.taken);
  }
  return after[0];
}

bool same(const Served& x, const Served& y) {
  return x.source == y.source && x.local == y.local && x.label == y.label && x.image == y.image;
}

// Per source, how many of the entries [from, to) it has.
std::vector<uint64_t> count(const std::vector<MixEntry>& v, uint64_t from, uint64_t to) {
  std::vector<uint64_t> c(2, 0);
  for (uint64_t q = from; q < to; ++q) ++c[v[q].source];
  return c;
}

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("mixture resume: the same world size continues bit-exact; its state counts exactly") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto m = mix_of(p, 0.7, 0.3);
    for (uint32_t r = 0; r < 2; ++r) {
      CAPTURE(r);
      Loader whole(m, opts(5, r, 2));
      whole.start_epoch(6, 3);
      const std::vector<MixTaken> all = drain_mix(whole);
      whole.start_epoch(6, 4);
      const std::vector<MixTaken> next_epoch = drain_mix(whole);

      Loader first(m, opts(5, r, 2));
      first.start_epoch(6, 3);
      drain_mix(first, 3);
      const EpochPosition pos = first.epoch_position();
      CHECK(pos.sample == 30);
      // The state, from the order itself: epoch 3 draws from stream positions 3 x counts.
      const std::vector<MixEntry> ref = reference_order(*m, true, 10, 6, 3);
      const std::vector<uint64_t> taken = count(ref, 0, 30);
      CHECK(pos.mix.fingerprint == m->fingerprint(10));
      CHECK(pos.mix.segment == 0);
      CHECK(pos.mix.segment_start == 0);
      CHECK(pos.mix.segment_drawn == std::vector<uint64_t>{3 * 49, 3 * 21});
      CHECK(pos.mix.taken == taken);
      CHECK(pos.mix.drawn == std::vector<uint64_t>{3 * 49 + taken[0], 3 * 21 + taken[1]});

      // The state after every batch, and again after going back (restore to batch 1).
      Loader stepping(m, opts(5, r, 2));
      stepping.start_epoch(6, 3);
      for (int round = 0; round < 2; ++round) {
        while (stepping.next() != nullptr) {
          const EpochPosition at = stepping.epoch_position();
          CHECK(at.mix.taken == count(ref, 0, at.sample));
        }
        stepping.restore(dscache::LoaderPosition{6, 3, 1});
        CHECK(stepping.epoch_position().mix.taken == count(ref, 0, 10));
      }

      Loader resumed(m, opts(5, r, 2, 1));
      resumed.resume(pos);
      const std::vector<MixTaken> rest = drain_mix(resumed);
      REQUIRE(rest.size() == all.size() - 3);
      for (size_t i = 0; i < rest.size(); ++i) CHECK(rest[i] == all[i + 3]);
      const EpochPosition end = resumed.epoch_position();
      CHECK(end.sample == 70);
      CHECK(end.mix.taken == m->counts());
      resumed.start_epoch(6, 4);
      CHECK(drain_mix(resumed) == next_epoch);
    }
  }

  TEST_CASE("mixture resume: 4 -> 2 -> 1 -> 3 ranks serve every remaining sample once") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    for (MixBatching batching : {MixBatching::kRandom, MixBatching::kStratified}) {
      CAPTURE(static_cast<int>(batching));
      MixtureOptions mo;
      mo.batching = batching;
      mo.stratum = 12;  // the global batch every stage keeps
      auto m = mix_of(p, 0.6, 0.4, false, mo);
      std::map<uint64_t, std::vector<Served>> whole;
      run_stage(m, Stage{4, 3, 2, SIZE_MAX}, nullptr, &whole);
      std::map<uint64_t, std::vector<Served>> served;
      const std::vector<Stage> stages = {
          {4, 3, 2, 2}, {2, 6, 0, 1}, {1, 12, 4, 2}, {3, 4, 1, SIZE_MAX}};
      const std::vector<uint64_t> cursors = {24, 36, 60, 70};
      EpochPosition at;
      for (size_t i = 0; i < stages.size(); ++i) {
        CAPTURE(i);
        at = run_stage(m, stages[i], i == 0 ? nullptr : &at, &served);
        CHECK(at.sample == cursors[i]);
      }
      for (uint64_t q = 0; q < 70; ++q) {
        CAPTURE(q);
        REQUIRE(served[q].size() == 1);  // each sample of the epoch exactly once
        REQUIRE(whole[q].size() == 1);
        CHECK(same(served[q][0], whole[q][0]));
      }
      CHECK(at.mix.taken == m->counts());
    }
  }

  TEST_CASE("mixture resume: new weights are refused by name, or continue the epoch's streams") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto old_mix = mix_of(p, 0.7, 0.3);
    auto new_mix = mix_of(p, 0.5, 0.5);
    Loader whole(old_mix, opts(10, 0, 1));
    whole.start_epoch(6, 3);
    const std::vector<MixTaken> old_all = drain_mix(whole);
    Loader first(old_mix, opts(10, 0, 1));
    first.start_epoch(6, 3);
    const std::vector<MixTaken> head = drain_mix(first, 3);
    for (size_t i = 0; i < 3; ++i) CHECK(head[i] == old_all[i]);  // [0, G) as before
    const EpochPosition pos = first.epoch_position();
    REQUIRE(pos.sample == 30);

    Loader refused(new_mix, opts(10, 0, 1));
    const std::string msg = invalid_argument_message([&] { refused.resume(pos); });
    CAPTURE(msg);
    CHECK(msg.find("other mixture shares") != std::string::npos);
    CHECK(msg.find("a 0.5, b 0.5") != std::string::npos);
    CHECK(msg.find("WeightChange::kContinue") != std::string::npos);

    Loader next(new_mix, opts(10, 0, 1));
    next.resume(pos, WeightChange::kContinue);
    // The rest: a segment of 40 samples from position 30, 20 of each source, drawn from the
    // streams where [0, 30) left them.
    const std::vector<uint64_t> counts = new_mix->counts_for(40);
    REQUIRE(counts == std::vector<uint64_t>{20, 20});
    const MixSegment seg{3, 1, 30, counts, pos.mix.drawn};
    const std::vector<MixEntry> rest = dscache::mix_segment_order(new_mix->plan(true, 10), seg, 6);
    REQUIRE(rest.size() == 40);
    const std::vector<MixTaken> got = drain_mix(next, 1);
    std::vector<MixTaken> tail = drain_mix(next);
    tail.insert(tail.begin(), got.begin(), got.end());
    REQUIRE(tail.size() == 4);
    uint64_t q = 0;
    for (const MixTaken& t : tail) {
      for (size_t e = 0; e < t.size; ++e, ++q) {
        CHECK(t.sources[e] == rest[q].source);
        CHECK(t.indices[e] == rest[q].local);
      }
    }
    // Three ranks from G = 30: the pad (positions 70, 71) repeats the segment's first two
    // positions (30, 31), never the old shares' [0, 30).
    std::map<uint64_t, Served> three;
    for (uint32_t r = 0; r < 3; ++r) {
      Loader l(new_mix, opts(5, r, 3));
      l.resume(pos, WeightChange::kContinue);
      collect(drain_mix(l), 5, r, 3, &three);
    }
    REQUIRE(three.size() == 42);
    for (uint64_t g = 30; g < 72; ++g) {
      CAPTURE(g);
      const MixEntry& e = rest[g < 70 ? g - 30 : g - 70];
      CHECK(three.at(g).source == e.source);
      CHECK(three.at(g).local == e.local);
    }
    // No sample repeats within a pass across the change.
    const std::vector<MixEntry> old_ref = reference_order(*old_mix, true, 10, 6, 3);
    std::set<std::pair<uint32_t, uint64_t>> seen[2];
    for (uint64_t i = 0; i < 30; ++i)
      seen[old_ref[i].source].insert({old_ref[i].pass, old_ref[i].local});
    for (const MixEntry& e : rest) CHECK(seen[e.source].insert({e.pass, e.local}).second);
    const EpochPosition end = next.epoch_position();
    CHECK(end.sample == 70);
    CHECK(end.mix.segment == 1);
    CHECK(end.mix.segment_start == 30);
    CHECK(end.mix.taken == std::vector<uint64_t>{pos.mix.taken[0] + 20, pos.mix.taken[1] + 20});
    // The next epoch: pure under the new weights, from where the segment ended.
    next.start_epoch(6, 4);
    const std::vector<uint64_t> from{pos.mix.drawn[0] + 20, pos.mix.drawn[1] + 20};
    const std::vector<MixEntry> e4 = dscache::mix_segment_order(
        new_mix->plan(true, 10), MixSegment{4, 0, 0, new_mix->counts(), from}, 6);
    q = 0;
    for (const MixTaken& t : drain_mix(next)) {
      for (size_t e = 0; e < t.size; ++e, ++q) CHECK(t.sources[e] == e4[q].source);
    }
    CHECK(q == 70);
    CHECK(invalid_argument_message([&] { next.start_epoch(6, 2); }).find("before epoch 4") !=
          std::string::npos);
  }

  TEST_CASE("mixture resume: a segmented epoch resumes again elsewhere; a shorter one ends") {
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto old_mix = mix_of(p, 0.7, 0.3);
    auto new_mix = mix_of(p, 0.5, 0.5);
    Loader first(old_mix, opts(10, 0, 1));
    first.start_epoch(6, 3);
    drain_mix(first, 3);
    const EpochPosition pos = first.epoch_position();
    Loader b(new_mix, opts(10, 0, 1));
    b.resume(pos, WeightChange::kContinue);
    drain_mix(b, 1);
    const EpochPosition pos2 = b.epoch_position();  // G = 40, segment 1
    REQUIRE(pos2.sample == 40);
    std::map<uint64_t, Served> b_rest;
    collect(drain_mix(b), 10, 0, 1, &b_rest);
    const EpochPosition b_end = b.epoch_position();
    std::map<uint64_t, Served> c_rest;
    EpochPosition c_end;
    for (uint32_t r = 0; r < 2; ++r) {
      Loader c(new_mix, opts(5, r, 2, 1));
      c.resume(pos2);  // the same shares: no kContinue needed
      collect(drain_mix(c), 5, r, 2, &c_rest);
      c_end = c.epoch_position();
    }
    REQUIRE(b_rest.size() == 30);
    REQUIRE(c_rest.size() == 30);
    for (const auto& [q, s] : b_rest) CHECK(same(s, c_rest.at(q)));
    CHECK(c_end.mix.taken == b_end.mix.taken);
    CHECK(c_end.mix.drawn == b_end.mix.drawn);

    // New shares whose epoch is shorter than G: the epoch is over; the next starts from the
    // saved streams.
    MixtureOptions shorter;
    shorter.epoch_samples = 20;
    auto short_mix = mix_of(p, 0.5, 0.5, false, shorter);
    Loader s(short_mix, opts(10, 0, 1));
    s.resume(pos, WeightChange::kContinue);
    CHECK(s.next() == nullptr);
    CHECK(s.epoch_position().sample == 20);
    CHECK(s.epoch_position().mix.drawn == pos.mix.drawn);
    s.start_epoch(6, 4);
    const std::vector<MixEntry> e4 = dscache::mix_segment_order(
        short_mix->plan(true, 10), MixSegment{4, 0, 0, {10, 10}, pos.mix.drawn}, 6);
    uint64_t q = 0;
    for (const MixTaken& t : drain_mix(s)) {
      for (size_t e = 0; e < t.size; ++e, ++q) {
        CHECK(t.sources[e] == e4[q].source);
        CHECK(t.indices[e] == e4[q].local);
      }
    }
    CHECK(q == 20);
  }

  TEST_CASE("mixture resume: after a finished epoch, longer new shares start the next epoch") {
    // The next epoch's start (next_epoch_start) is what resumes: resuming the finished epoch
    // itself under an epoch of 90 would make [70, 90) a segment never served, its draws lost.
    TempDir dir;
    const Pair p = build_pair(dir.path());
    auto old_mix = mix_of(p, 0.7, 0.3);
    MixtureOptions longer;
    longer.epoch_samples = 90;
    auto new_mix = mix_of(p, 0.5, 0.5, false, longer);
    Loader first(old_mix, opts(10, 0, 1));
    first.start_epoch(6, 3);
    const std::vector<MixTaken> e3 = drain_mix(first);
    const EpochPosition end = first.epoch_position();
    REQUIRE(end.sample == 70);
    const EpochPosition next = dscache::next_epoch_start(end);
    CHECK(next.epoch == 4);
    CHECK(next.sample == 0);
    CHECK(next.mix.segment_drawn == end.mix.drawn);
    CHECK(next.mix.taken == std::vector<uint64_t>{0, 0});
    Loader l(new_mix, opts(10, 0, 1));
    l.resume(next, WeightChange::kContinue);
    l.start_epoch(6, 4);
    const std::vector<uint64_t> counts = new_mix->counts_for(90);
    const std::vector<MixEntry> ref = dscache::mix_segment_order(
        new_mix->plan(true, 10), MixSegment{4, 1, 0, counts, end.mix.drawn}, 6);
    std::vector<uint64_t> used(2, 0);
    uint64_t q = 0;
    for (const MixTaken& t : drain_mix(l)) {
      for (size_t e = 0; e < t.size; ++e, ++q) {
        CHECK(t.sources[e] == ref[q].source);
        CHECK(t.indices[e] == ref[q].local);
        ++used[t.sources[e]];
      }
    }
    CHECK(q == 90);
    CHECK(used == counts);
    // Every source's stream goes on with no gap: epoch 4's draws are [drawn, drawn + count).
    const EpochPosition after = l.epoch_position();
    CHECK(after.mix.drawn ==
          std::vector<uint64_t>{end.mix.drawn[0] + counts[0], end.mix.drawn[1] + counts[1]});
    // The same shares: the next epoch's start resumes without kContinue, the pure epoch 4.
    Loader same(old_mix, opts(10, 0, 1));
    same.resume(next);
    same.start_epoch(6, 4);
    Loader pure(old_mix, opts(10, 0, 1));
    pure.start_epoch(6, 4);
    CHECK(drain_mix(same) == drain_mix(pure));
    CHECK(e3.size() == 7);
  }
}
