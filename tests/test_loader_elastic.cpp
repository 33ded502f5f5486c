// Elastic resume: an epoch started by Loaders of one world size continues, from the global
// cursor (Loader::epoch_position / resume), on Loaders of another world size, batch size and
// worker count, serving exactly the samples not yet taken, in the uninterrupted order.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/sampler.h"
#include "loader_fixtures.h"
#include "test_util.h"

using namespace dscache::test;
using dscache::EpochPosition;

namespace {

// One stage of the run: `world` Loaders (rank r each) of `batch` samples take `batches` batches
// each (all of the rest when SIZE_MAX), after resuming at `at` (or starting the epoch).
struct Stage {
  uint32_t world;
  uint32_t batch;
  uint32_t workers;
  size_t batches;
};

// Global position -> sample index served there, filled from each rank's batches: rank r's local
// position k (its batch j, entry t: k = j x batch + t) is global position r + k x world.
using Served = std::map<uint64_t, std::vector<uint64_t>>;

// Runs one stage; returns the global cursor every rank reports afterwards (checked equal).
uint64_t run_stage(const Built& built, const Stage& s, const dscache::SamplerOptions& sampler,
                   const EpochPosition* at, Served* served) {
  std::vector<uint64_t> after;
  for (uint32_t r = 0; r < s.world; ++r) {
    CAPTURE(r);
    LoaderOptions o = small_options(s.batch);
    o.workers = s.workers;
    o.sampler = sampler;
    o.sampler.rank = r;
    o.sampler.world_size = s.world;
    Loader loader(built.cache, o);
    if (at != nullptr) {
      loader.resume(*at);
      CHECK(loader.epoch_position().sample == at->sample);
    } else {
      loader.start_epoch(5, 2);
    }
    for (const Taken& t : drain(loader, s.batches)) {
      for (size_t e = 0; e < t.indices.size(); ++e) {
        const uint64_t k = t.index * s.batch + e;
        (*served)[dscache::rank_position(o.sampler, k)].push_back(t.indices[e]);
      }
    }
    const EpochPosition p = loader.epoch_position();
    CHECK(p.seed == 5);
    CHECK(p.epoch == 2);
    after.push_back(p.sample);
  }
  for (uint64_t g : after) CHECK(g == after.front());
  return after.front();
}

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("elastic: 4 -> 2 -> 1 -> 3 ranks serve each sample of the epoch once, in order") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});  // 53 samples
    const uint64_t n = built.cache->size();
    REQUIRE(n == 53);
    // The windowed shuffle too, its geometry given explicitly (as a resume elsewhere must).
    for (Shuffle shuffle : {Shuffle::kGlobal, Shuffle::kWindowed})
      for (RankTail tail : {RankTail::kPad, RankTail::kDrop}) {
        CAPTURE(static_cast<int>(shuffle));
        CAPTURE(static_cast<int>(tail));
        dscache::SamplerOptions sampler;
        sampler.shuffle = shuffle;
        sampler.block = 5;
        sampler.window_blocks = 2;
        sampler.tail = tail;
        const std::vector<uint64_t> order = dscache::epoch_order(n, sampler, 5, 2);  // W = 1's
        // The global batch stays 12 samples: 4 x 3, 2 x 6, 1 x 12, 3 x 4.
        const std::vector<Stage> stages = {
            {4, 3, 2, 2}, {2, 6, 0, 1}, {1, 12, 3, 1}, {3, 4, 1, SIZE_MAX}};
        const std::vector<uint64_t> cursors = {24, 36, 48, n};
        Served served;
        EpochPosition at;
        for (size_t i = 0; i < stages.size(); ++i) {
          CAPTURE(i);
          Served part;
          const uint64_t g = run_stage(built, stages[i], sampler, i == 0 ? nullptr : &at, &part);
          CHECK(g == cursors[i]);
          // The stage served global positions [previous cursor, cursor) (the last: the rest).
          const uint64_t from = i == 0 ? 0 : cursors[i - 1];
          for (const auto& [pos, samples] : part) {
            CHECK(pos >= from);
            if (i + 1 < stages.size()) CHECK(pos < g);
            CHECK(served.count(pos) == 0);
            served[pos] = samples;
          }
          at = EpochPosition{5, 2, g, {}};
        }
        // Positions below E: the uninterrupted order, each once. kPad's tail (W = 3: one more
        // position) repeats the order's start; kDrop's (53 mod 3 = 2 positions) is not served.
        const uint64_t last_world = stages.back().world;
        const uint64_t end = tail == RankTail::kPad ? (n + last_world - 1) / last_world * last_world
                                                    : n / last_world * last_world;
        CHECK(served.size() == end);
        for (uint64_t p = 0; p < end; ++p) {
          CAPTURE(p);
          REQUIRE(served.count(p) == 1);
          REQUIRE(served[p].size() == 1);
          CHECK(served[p][0] == order[dscache::padded_position(n, p)]);
        }
      }
  }

  TEST_CASE("elastic: resume refuses a cursor inside a global batch, past the epoch") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    LoaderOptions o = small_options(2);
    o.sampler.world_size = 5;
    o.sampler.rank = 4;
    Loader loader(built.cache, o);
    CHECK(invalid_argument_message([&] {
            loader.resume(EpochPosition{5, 2, 24, {}});
          }) ==
          "position.sample 24 is not a multiple of batch_size 2 x "
          "world_size 5 = 10: it falls inside a global batch of this geometry; resume from a "
          "state taken at a global-batch boundary, or with batch_size x world_size dividing 24");
    CHECK(invalid_argument_message([&] {
            loader.resume(EpochPosition{5, 2, 54, {}});
          }) == "position.sample 54 > the epoch's 53 samples");
    // G == E: the epoch is finished; the position says so again.
    loader.resume(EpochPosition{5, 2, 53, {}});
    CHECK(loader.next() == nullptr);
    CHECK(loader.epoch_position().sample == 53);
    CHECK(loader.epoch_length() == 53);
    // A strided Loader (one of two DataLoader workers) starts at its first batch at or after G.
    o.batch_stride = 2;
    o.batch_offset = 1;
    Loader strided(built.cache, o);
    strided.resume(EpochPosition{5, 2, 20, {}});  // rank batch 2: the stride serves 3, 5, ...
    const Batch* b = strided.next();
    REQUIRE(b != nullptr);
    CHECK(b->index == 3);
    CHECK(strided.epoch_sample(2) == 20);
    CHECK(strided.epoch_sample(6) == 53);  // ceil(11 / 2) = 6 rank batches: finished
  }
}
