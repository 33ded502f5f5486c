// Loader with the windowed shuffle: windows and blocks sized in stored bytes, resume inside
// a window, pread vs mapped caches, read-ahead advice per window, and one copy_samples call
// per run of adjacent indices.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/sampler.h"
#include "dscache/shard.h"
#include "dscache/transform.h"
#include "loader_fixtures.h"
#include "test_util.h"

// The library's names the tests use unqualified come with loader_fixtures.h.
using namespace dscache::test;

TEST_SUITE("loader") {
  TEST_CASE("windowed shuffle with block 0 sizes its block and window in stored bytes") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});  // shards of 20, 20, 13; 90-byte samples
    const uint64_t n = built.samples.size();
    LoaderOptions o = small_options(10);
    o.sampler.shuffle = Shuffle::kWindowed;
    o.sampler.block_bytes = 20 * 90;
    o.sampler.window_bytes = 20 * 90 + 89;  // one block and a bit: rounded down to one block
    Loader loader(built.cache, o);
    const dscache::SamplerOptions& in_force = loader.sampler_options();
    CHECK(in_force.block == 20);
    CHECK(in_force.window_blocks == 1);
    CHECK(in_force.window_bytes == 20 * 90);
    loader.start_epoch(2, 7);
    const auto order = all_indices(drain(loader));
    CHECK(order == dscache::epoch_order(n, in_force, 2, 7));
    // One block per window: each block's samples come out together.
    size_t pos = 0;
    while (pos < order.size()) {
      const uint64_t block = order[pos] / 20;
      const size_t len = block == 2 ? 13 : 20;
      for (size_t k = pos; k < pos + len; ++k) CHECK(order[k] / 20 == block);
      pos += len;
    }
    // Defaults: 4 MiB blocks hold the whole (tiny) cache; an explicit block is kept as given.
    o.sampler.block_bytes = 0;
    o.sampler.window_bytes = 0;
    CHECK(Loader(built.cache, o).sampler_options().block == n);
    o.sampler.block = 7;
    o.sampler.window_blocks = 3;
    const Loader explicit_block(built.cache, o);
    CHECK(explicit_block.sampler_options().block == 7);
    CHECK(explicit_block.sampler_options().window_blocks == 3);
  }

  TEST_CASE(
      "byte-sized windows: restore() resumes exactly, in pread mode too, from the saved "
      "options") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    dscache::CacheOptions po;
    po.memory = dscache::MemoryMode::kPread;
    const auto pread = Cache::open(dir.path(), po);
    for (uint32_t rank : {0u, 1u}) {
      CAPTURE(rank);
      LoaderOptions o = small_options(6);
      o.sampler.shuffle = Shuffle::kWindowed;
      o.sampler.block_bytes = 5 * 90;
      o.sampler.window_bytes = 2 * 5 * 90;
      o.sampler.rank = rank;
      o.sampler.world_size = 2;
      o.transform.flip = true;
      Loader full(built.cache, o);
      full.start_epoch(8, 3);
      const auto all = drain(full);
      REQUIRE(all.size() == 9);  // ceil(97 / 2) = 49 samples, batches of 6
      for (size_t k : {size_t{0}, size_t{1}, size_t{4}, size_t{8}, size_t{9}}) {
        CAPTURE(k);
        Loader first(built.cache, o);
        first.start_epoch(8, 3);
        const auto head = drain(first, k);
        const LoaderPosition pos = first.position();
        // A resumed job passes the saved, resolved options (explicit block and window).
        LoaderOptions other = o;
        other.sampler = first.sampler_options();
        other.sampler.block_bytes = 1;  // ignored: the block is explicit now
        other.sampler.window_bytes = 1;
        other.workers = 3;
        other.prefetch = 1;
        for (const auto& source : {built.cache, pread}) {
          Loader second(source, other);
          second.restore(pos);
          const auto tail = drain(second);
          REQUIRE(tail.size() == all.size() - k);
          for (size_t j = 0; j < tail.size(); ++j) CHECK(tail[j] == all[k + j]);
        }
        for (size_t j = 0; j < head.size(); ++j) CHECK(head[j] == all[j]);
      }
    }
  }

  TEST_CASE("a cache open in pread mode yields the same windowed batches as a mapped one") {
    for (const Storage storage : storages()) {
      TempDir dir;
      Built built;
      const auto pread = pread_cache(dir.path(), storage, &built);
      for (uint32_t window_blocks : {1u, 3u}) {
        LoaderOptions o = small_options(10);
        o.sampler.shuffle = Shuffle::kWindowed;
        o.sampler.block_bytes = 8 * 90;
        o.sampler.window_bytes = window_blocks * 8 * 90;
        o.transform.flip = true;
        Loader mapped(built.cache, o), read(pread, o);
        CHECK(read.sampler_options().window_blocks == window_blocks);
        for (uint64_t epoch : {0, 1}) {
          mapped.start_epoch(5, epoch);
          read.start_epoch(5, epoch);
          const auto want = drain(mapped);
          CHECK(want.size() == 10);
          CHECK(drain(read) == want);
        }
      }
    }
  }

  TEST_CASE("the windowed Loader advises whole windows: ahead before reading, behind after") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    const uint64_t n = built.samples.size();
    for (uint32_t world : {1u, 2u}) {
      CAPTURE(world);
      auto source = std::make_shared<CountingSource>(built.cache);
      LoaderOptions o = small_options(4);
      o.sampler.shuffle = Shuffle::kWindowed;
      o.sampler.block_bytes = 5 * 90;
      o.sampler.window_bytes = 2 * 5 * 90;  // windows of 10 samples: several batches each
      o.sampler.world_size = world;
      o.sampler.tail = RankTail::kDrop;
      Loader loader(source, o);
      loader.start_epoch(3, 1);
      // calls_at[c]: advice calls made before batch c was returned.
      std::vector<size_t> calls_at;
      std::vector<Taken> batches;
      while (true) {
        calls_at.push_back(source->advice().size());
        const Batch* b = loader.next();
        if (b == nullptr) break;
        batches.push_back(copy_of(*b));
      }
      const auto log = source->advice();
      std::vector<int> will(n, -1), dont(n, -1);  // call index of each sample's hint
      for (size_t c = 0; c < log.size(); ++c) {
        const CountingSource::Call& call = log[c];
        REQUIRE(call.count > 0);
        REQUIRE(call.first + call.count <= n);
        for (uint64_t i = call.first; i < call.first + call.count; ++i) {
          int& slot = call.advice == dscache::Advice::kWillNeed ? will[i] : dont[i];
          CHECK(slot == -1);  // each sample once per epoch
          slot = static_cast<int>(c);
        }
      }
      // Every sample this rank served was read ahead before its batch was returned, and
      // dropped only after it: never before a batch that holds it.
      for (size_t k = 0; k < batches.size(); ++k) {
        for (uint64_t i : batches[k].indices) {
          CAPTURE(i);
          REQUIRE(will[i] >= 0);
          CHECK(static_cast<size_t>(will[i]) < calls_at[k]);
          REQUIRE(dont[i] >= 0);
          CHECK(static_cast<size_t>(dont[i]) >= calls_at[k]);
          CHECK(will[i] < dont[i]);
        }
      }
      // Ahead means at most the windows in the workers' hands and one more, never everything at
      // once: after batch c, batches c..c+3 (prefetch 2 + 1 slots, and c) hold 16 of this
      // rank's positions = 16*world global ones, touching at most 16*world/10 + 2 windows of 10.
      size_t pending_max = 0;
      for (size_t k = 0; k + 1 < calls_at.size(); ++k) {
        std::set<uint64_t> pending;
        for (size_t c = 0; c < calls_at[k + 1]; ++c) {
          const CountingSource::Call& call = log[c];
          for (uint64_t i = call.first; i < call.first + call.count; ++i) {
            if (call.advice == dscache::Advice::kWillNeed) {
              pending.insert(i);
            } else {
              pending.erase(i);
            }
          }
        }
        pending_max = std::max(pending_max, pending.size());
      }
      CHECK(pending_max > 0);
      CHECK(pending_max <= (16 * world / 10 + 3) * 10);
      CHECK(pending_max < n);
      // The epoch's batches are still right.
      for (const Taken& t : batches) {
        for (uint32_t j = 0; j < t.size; ++j) {
          CHECK(std::memcmp(t.images.data() + j * 90, built.samples[t.indices[j]].data(), 90) == 0);
        }
      }
    }
    // Other shuffles give no hints.
    auto source = std::make_shared<CountingSource>(built.cache);
    LoaderOptions o = small_options(4);
    Loader loader(source, o);
    loader.start_epoch(3, 1);
    drain(loader);
    CHECK(source->advice().empty());
  }

  TEST_CASE("adjacent indices in a batch are copied with one copy_samples call") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    auto source = std::make_shared<CountingSource>(built.cache);
    LoaderOptions o = small_options(10);
    o.sampler.shuffle = Shuffle::kNone;
    Loader loader(source, o);
    loader.start_epoch(0, 0);
    const auto batches = drain(loader);
    REQUIRE(batches.size() == 10);
    // Storage order: each batch is one run (shard boundaries are the source's business).
    CHECK(source->runs() == std::vector<uint64_t>{10, 10, 10, 10, 10, 10, 10, 10, 10, 7});
    for (const Taken& t : batches) {
      for (uint32_t j = 0; j < t.size; ++j) {
        CHECK(std::memcmp(t.images.data() + j * 90, built.samples[t.indices[j]].data(), 90) == 0);
      }
    }
  }

}  // TEST_SUITE
