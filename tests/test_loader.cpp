// Loader: batches from real caches (npy/HDF5, fixed/ragged) — contents, order, determinism
// across workers/prefetch, rank sharding, drop_last, crops. Batch buffers and their allocators
// are in test_loader_buffers.cpp; the windowed shuffle in test_loader_windowed.cpp; resume,
// restarts, errors, shutdown and option checks in test_loader_lifecycle.cpp.
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
  TEST_CASE("every batch holds the samples and labels of its indices, in epoch order") {
    for (Storage storage : storages()) {
      for (uint32_t channels : {1u, 3u}) {
        TempDir dir;
        Spec spec;
        spec.storage = storage;
        spec.channels = channels;
        const Built built = build_cache(dir.path(), spec);
        const uint64_t n = built.samples.size();
        for (uint32_t bs : {1u, 7u, 8u, 53u, 100u}) {
          CAPTURE(dscache::to_string(storage));
          CAPTURE(bs);
          LoaderOptions o = small_options(bs);
          Loader loader(built.cache, o);
          CHECK(loader.batches_per_epoch() == (n + bs - 1) / bs);
          CHECK(loader.samples_per_epoch() == n);
          loader.start_epoch(17, 4);
          const auto batches = drain(loader);
          REQUIRE(batches.size() == loader.batches_per_epoch());
          for (size_t k = 0; k < batches.size(); ++k) {
            const Taken& t = batches[k];
            CHECK(t.index == k);
            CHECK(t.size == std::min<uint64_t>(bs, n - k * bs));
            CHECK(t.height == spec.height);
            CHECK(t.width == spec.width);
            CHECK(t.channels == channels);
            const size_t bytes = size_t{spec.height} * spec.width * channels;
            for (uint32_t j = 0; j < t.size; ++j) {
              const uint64_t i = t.indices[j];
              REQUIRE(i < n);
              CHECK(t.labels[j] == built.labels[i]);
              CHECK(std::memcmp(t.images.data() + j * bytes, built.samples[i].data(), bytes) == 0);
            }
          }
          // One epoch visits every sample once, in epoch_order's order.
          const auto order = all_indices(batches);
          CHECK(order == dscache::epoch_order(n, o.sampler, 17, 4));
          std::vector<uint64_t> sorted = order;
          std::sort(sorted.begin(), sorted.end());
          std::vector<uint64_t> iota(n);
          std::iota(iota.begin(), iota.end(), uint64_t{0});
          CHECK(sorted == iota);
        }
      }
    }
  }

  TEST_CASE("contents and order do not depend on workers or prefetch") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {30, 30, 37};
    const Built built = build_cache(dir.path(), spec);
    struct Mode {
      Shuffle shuffle;
      CropMode crop;
    };
    const Mode modes[] = {{Shuffle::kGlobal, CropMode::kNone},
                          {Shuffle::kWindowed, CropMode::kRandomResized},
                          {Shuffle::kNone, CropMode::kCenter}};
    for (const Mode& mode : modes) {
      std::vector<Taken> reference;
      bool first = true;
      for (uint32_t workers : {1u, 0u, 2u, 4u}) {
        for (uint32_t prefetch : {1u, 3u}) {
          CAPTURE(workers);
          CAPTURE(prefetch);
          LoaderOptions o = small_options(10);
          o.workers = workers;
          o.prefetch = prefetch;
          o.sampler.shuffle = mode.shuffle;
          o.sampler.block = 20;
          o.sampler.window_blocks = 2;
          o.transform.crop = mode.crop;
          o.transform.flip = true;
          if (mode.crop != CropMode::kNone) {
            o.transform.height = 4;
            o.transform.width = 4;
          }
          Loader loader(built.cache, o);
          loader.start_epoch(99, 2);
          auto batches = drain(loader);
          CHECK(batches.size() == 10);
          if (first) {
            reference = std::move(batches);
            first = false;
          } else {
            CHECK(batches == reference);
          }
        }
      }
    }
  }

  TEST_CASE("a cache open in pread mode yields the same batches as a mapped one") {
    for (const Storage storage : storages()) {
      TempDir dir;
      Built built;
      const auto pread = pread_cache(dir.path(), storage, &built);
      for (const CropMode crop : {CropMode::kNone, CropMode::kCenter, CropMode::kRandomResized}) {
        LoaderOptions o = small_options(10);
        o.workers = 2;
        o.sampler.shuffle = Shuffle::kGlobal;
        o.transform.crop = crop;
        o.transform.flip = true;
        if (crop != CropMode::kNone) {
          o.transform.height = 4;
          o.transform.width = 4;
        }
        Loader mapped(built.cache, o), read(pread, o);
        mapped.start_epoch(5, 1);
        read.start_epoch(5, 1);
        const auto want = drain(mapped);
        CHECK(want.size() == 10);
        CHECK(drain(read) == want);
      }
    }
  }

  TEST_CASE("crop none with flip serves each sample as stored or mirrored, as choose_crop says") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    LoaderOptions o = small_options(16);
    o.transform.flip = true;
    Loader loader(built.cache, o);
    loader.start_epoch(3, 0);
    int flipped = 0, total = 0;
    const uint32_t h = 6, w = 5, c = 3;
    for (const Taken& t : drain(loader)) {
      for (uint32_t j = 0; j < t.size; ++j) {
        const uint64_t i = t.indices[j];
        const bool flip = dscache::choose_crop(o.transform, h, w, 3, 0, i).flip;
        flipped += flip;
        ++total;
        const uint8_t* img = t.images.data() + size_t{j} * h * w * c;
        bool same = true;
        for (uint32_t y = 0; y < h; ++y) {
          for (uint32_t x = 0; x < w; ++x) {
            const uint32_t sx = flip ? w - 1 - x : x;
            for (uint32_t k = 0; k < c; ++k) {
              same &= img[(y * w + x) * c + k] == built.samples[i][(y * w + sx) * c + k];
            }
          }
        }
        CHECK(same);
      }
    }
    CHECK(flipped > 0);
    CHECK(flipped < total);
  }

  TEST_CASE("drop_last and batch counts") {
    struct Case {
      std::vector<uint64_t> shards;
      uint32_t batch_size;
      bool drop_last;
      uint64_t batches, samples, last_size;
    };
    const Case cases[] = {
        {{10, 10, 5}, 8, false, 4, 25, 1}, {{10, 10, 5}, 8, true, 3, 24, 8},
        {{8, 8}, 8, true, 2, 16, 8},       {{8, 8}, 8, false, 2, 16, 8},
        {{5}, 8, true, 0, 0, 0},           {{5}, 8, false, 1, 5, 5},
    };
    for (const Case& c : cases) {
      CAPTURE(c.batch_size);
      CAPTURE(c.drop_last);
      TempDir dir;
      Spec spec;
      spec.shard_counts = c.shards;
      const Built built = build_cache(dir.path(), spec);
      LoaderOptions o = small_options(c.batch_size);
      o.drop_last = c.drop_last;
      Loader loader(built.cache, o);
      CHECK(loader.batches_per_epoch() == c.batches);
      CHECK(loader.samples_per_epoch() == c.samples);
      loader.start_epoch(0, 0);
      const auto batches = drain(loader);
      REQUIRE(batches.size() == c.batches);
      CHECK(all_indices(batches).size() == c.samples);
      if (!batches.empty()) CHECK(batches.back().size == c.last_size);
    }
  }

  TEST_CASE("batch strides: offsets 0..S-1 together serve the unstrided batches, each once") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {20, 20, 13};  // 53 samples
    const Built built = build_cache(dir.path(), spec);
    struct Case {
      uint32_t batch_size, stride, world;
      bool drop_last;
    };
    const Case cases[] = {
        {4, 1, 1, false}, {4, 2, 1, false}, {4, 3, 1, true},   {4, 5, 2, false}, {8, 7, 1, false},
        {8, 7, 1, true},  {8, 9, 1, false}, {53, 2, 1, false}, {5, 3, 3, true},  {1, 4, 2, false},
    };
    for (const Case& c : cases) {
      CAPTURE(c.batch_size);
      CAPTURE(c.stride);
      CAPTURE(c.world);
      CAPTURE(c.drop_last);
      for (uint32_t rank = 0; rank < c.world; ++rank) {
        LoaderOptions o = small_options(c.batch_size);
        o.drop_last = c.drop_last;
        o.sampler.world_size = c.world;
        o.sampler.rank = rank;
        Loader whole(built.cache, o);
        whole.start_epoch(9, 2);
        const auto expected = drain(whole);
        REQUIRE(expected.size() == whole.batches_per_epoch());
        std::vector<Taken> merged(expected.size());
        uint64_t served = 0;
        for (uint32_t offset = 0; offset < c.stride; ++offset) {
          LoaderOptions so = o;
          so.batch_stride = c.stride;
          so.batch_offset = offset;
          Loader part(built.cache, so);
          CHECK(part.samples_per_epoch() == whole.samples_per_epoch());
          part.start_epoch(9, 2);
          const auto batches = drain(part);
          CHECK(batches.size() == part.batches_per_epoch());
          for (size_t k = 0; k < batches.size(); ++k) {
            const uint64_t at = offset + k * uint64_t{c.stride};
            CHECK(batches[k].index == at);
            REQUIRE(at < merged.size());
            merged[at] = batches[k];
          }
          served += batches.size();
          // Resuming a strided loader mid-epoch continues its own share.
          if (batches.size() >= 2) {
            part.restore(LoaderPosition{9, 2, 1});
            const auto rest = drain(part);
            REQUIRE(rest.size() == batches.size() - 1);
            CHECK(rest.front() == batches[1]);
          }
        }
        CHECK(served == expected.size());
        for (size_t k = 0; k < expected.size(); ++k) {
          CAPTURE(k);
          CHECK(merged[k] == expected[k]);
        }
      }
    }
  }

  TEST_CASE("ranks: equal batch counts, kDrop disjoint, kPad covers every sample") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {20, 20, 13};  // 53 samples: divides by no world size below
    const Built built = build_cache(dir.path(), spec);
    for (RankTail tail : {RankTail::kPad, RankTail::kDrop}) {
      for (uint32_t world : {1u, 2u, 3u, 4u}) {
        for (bool drop_last : {false, true}) {
          CAPTURE(world);
          CAPTURE(drop_last);
          std::vector<uint64_t> counts;
          std::vector<uint64_t> seen;
          for (uint32_t rank = 0; rank < world; ++rank) {
            LoaderOptions o = small_options(4);
            o.drop_last = drop_last;
            o.sampler.world_size = world;
            o.sampler.rank = rank;
            o.sampler.tail = tail;
            Loader loader(built.cache, o);
            loader.start_epoch(5, 1);
            const auto batches = drain(loader);
            CHECK(batches.size() == loader.batches_per_epoch());
            counts.push_back(batches.size());
            const auto mine = all_indices(batches);
            CHECK(mine.size() == loader.samples_per_epoch());
            seen.insert(seen.end(), mine.begin(), mine.end());
          }
          for (uint64_t c : counts) CHECK(c == counts[0]);
          std::set<uint64_t> distinct(seen.begin(), seen.end());
          if (tail == RankTail::kDrop) CHECK(distinct.size() == seen.size());
          if (tail == RankTail::kPad && !drop_last) CHECK(distinct.size() == 53);
        }
      }
    }
  }

  TEST_CASE("ragged caches are cropped to fixed-size batches") {
    for (Storage storage : storages()) {
      TempDir dir;
      Spec spec;
      spec.storage = storage;
      spec.layout = Layout::kRagged;
      const Built built = build_cache(dir.path(), spec);
      for (CropMode crop : {CropMode::kCenter, CropMode::kRandomResized}) {
        LoaderOptions o = small_options(8);
        o.transform.crop = crop;
        o.transform.height = 7;
        o.transform.width = 9;
        o.transform.flip = true;
        Loader loader(built.cache, o);
        loader.start_epoch(6, 2);
        const auto batches = drain(loader);
        CHECK(all_indices(batches).size() == built.samples.size());
        std::vector<uint8_t> expect(7 * 9 * 3);
        for (const Taken& t : batches) {
          CHECK(t.height == 7);
          CHECK(t.width == 9);
          CHECK(t.channels == 3);
          for (uint32_t j = 0; j < t.size; ++j) {
            const uint64_t i = t.indices[j];
            const SampleShape s = built.shapes[i];
            const ImageView view{built.samples[i].data(), s.height, s.width, s.channels, 0};
            const auto box = dscache::choose_crop(o.transform, s.height, s.width, 6, 2, i);
            dscache::crop_resize(view, box, 7, 9, expect.data());
            CHECK(std::memcmp(t.images.data() + j * expect.size(), expect.data(), expect.size()) ==
                  0);
            CHECK(t.labels[j] == built.labels[i]);
          }
        }
      }
    }
  }

  TEST_CASE("take_wait_seconds is non-negative and resets") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    Loader loader(built.cache, small_options(3));
    loader.start_epoch(0, 0);
    drain(loader);
    const double waited = loader.take_wait_seconds();
    CHECK(waited >= 0.0);
    CHECK(loader.take_wait_seconds() == 0.0);
  }

}  // TEST_SUITE
