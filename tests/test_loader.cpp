// Loader: batches from real caches (npy/HDF5, fixed/ragged) — contents, order, determinism
// across workers/prefetch, rank sharding, drop_last, crops, buffers and their allocators.
// The windowed shuffle is in test_loader_windowed.cpp; resume, restarts, errors, shutdown
// and option checks in test_loader_lifecycle.cpp.
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

  TEST_CASE("batch memory is 64-byte aligned and stable across epochs") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    Loader loader(built.cache, small_options(5));
    std::set<const uint8_t*> buffers;
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      loader.start_epoch(1, epoch);
      while (const Batch* b = loader.next()) {
        CHECK(reinterpret_cast<uintptr_t>(b->images) % 64 == 0);
        buffers.insert(b->images);
      }
    }
    CHECK(buffers.size() <= 3);  // prefetch 2 + 1 slots, reused every epoch
  }

  TEST_CASE("a BufferAllocator supplies every image buffer and gets each back once") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    struct Region {
      uint8_t* base;
      size_t bytes;
    };
    std::vector<Region> live;
    size_t allocated = 0, released = 0;
    LoaderOptions o = small_options(5);  // prefetch 2: 3 slots
    o.allocator.allocate = [&](size_t bytes) {
      void* p = std::aligned_alloc(128, (bytes + 127) / 128 * 128);
      live.push_back({static_cast<uint8_t*>(p), bytes});
      ++allocated;
      return p;
    };
    o.allocator.release = [&](void* p) {
      auto it =
          std::find_if(live.begin(), live.end(), [&](const Region& r) { return r.base == p; });
      REQUIRE(it != live.end());  // only what allocate returned, and only once
      live.erase(it);
      std::free(p);
      ++released;
    };
    std::vector<Taken> with_allocator;
    {
      Loader loader(built.cache, o);
      CHECK(allocated == 3);
      loader.start_epoch(4, 0);
      while (const Batch* b = loader.next()) {
        const size_t n = size_t{b->size} * b->height * b->width * b->channels;
        const bool inside = std::any_of(live.begin(), live.end(), [&](const Region& r) {
          return b->images >= r.base && b->images + n <= r.base + r.bytes;
        });
        CHECK(inside);
        with_allocator.push_back(copy_of(*b));
      }
    }
    CHECK(released == 3);
    CHECK(live.empty());
    // The same batches as with the Loader's own buffers.
    Loader plain(built.cache, small_options(5));
    plain.start_epoch(4, 0);
    CHECK(drain(plain) == with_allocator);

    // Misaligned memory and half an allocator are refused, naming the field; nothing leaks.
    LoaderOptions bad = small_options(5);
    std::vector<void*> owned;
    bad.allocator.allocate = [&](size_t bytes) {
      owned.push_back(std::malloc(bytes + 64));
      return static_cast<uint8_t*>(owned.back()) + 1;
    };
    bad.allocator.release = [&](void* p) {
      auto it = std::find(owned.begin(), owned.end(), static_cast<uint8_t*>(p) - 1);
      REQUIRE(it != owned.end());
      std::free(*it);
      owned.erase(it);
    };
    CHECK(ctor_message(built.cache, bad).find("loader.allocator returned memory not aligned") !=
          std::string::npos);
    CHECK(owned.empty());
    LoaderOptions half = small_options(5);
    half.allocator.allocate = [](size_t bytes) { return std::aligned_alloc(64, bytes); };
    CHECK(ctor_message(built.cache, half).find("loader.allocator needs both") != std::string::npos);
  }

  TEST_CASE("hand_off_images: each batch keeps its own images, every buffer released once") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    std::vector<void*> live;  // allocated and not yet released
    size_t allocated = 0;
    LoaderOptions o = small_options(5);  // prefetch 2: 3 slots
    o.hand_off_images = true;
    o.allocator.allocate = [&](size_t bytes) {
      live.push_back(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      ++allocated;
      return live.back();
    };
    // Released buffers are kept (not freed) until the end, so that their contents can be
    // compared after later batches.
    std::vector<void*> released;
    o.allocator.release = [&](void* p) {
      auto it = std::find(live.begin(), live.end(), p);
      REQUIRE(it != live.end());  // only what allocate returned, and only once
      live.erase(it);
      released.push_back(p);
    };
    for (uint32_t workers : {2u, 0u}) {
      CAPTURE(workers);
      o.workers = workers;
      Loader plain(built.cache, small_options(5));
      plain.start_epoch(4, 1);
      const std::vector<Taken> want = drain(plain);
      std::vector<Taken> kept;
      std::vector<const uint8_t*> pointers;  // each batch's images, read again at the end
      {
        Loader loader(built.cache, o);
        loader.start_epoch(4, 1);
        while (const Batch* b = loader.next()) {
          pointers.push_back(b->images);
          kept.push_back(copy_of(*b));
        }
        // Every batch's images still hold that batch, after all later batches were filled.
        REQUIRE(kept.size() == want.size());
        for (size_t k = 0; k < kept.size(); ++k) {
          CAPTURE(k);
          CHECK(kept[k] == want[k]);
          const std::vector<uint8_t>& w = want[k].images;
          CHECK(std::equal(w.begin(), w.end(), pointers[k]));
        }
        CHECK(std::set<const uint8_t*>(pointers.begin(), pointers.end()).size() == kept.size());
        CHECK(allocated == 3 + kept.size());  // the ring, then one per batch handed off
        loader.start_epoch(4, 2);             // a restart hands the held batch off too
        REQUIRE(loader.next() != nullptr);
        loader.start_epoch(4, 1);
        CHECK(drain(loader) == want);
      }
      CHECK(live.empty());
      for (void* p : released) std::free(p);
      released.clear();
      allocated = 0;
    }
    LoaderOptions no_allocator = small_options(5);
    no_allocator.hand_off_images = true;
    CHECK(
        ctor_message(built.cache, no_allocator).find("loader.hand_off_images needs an allocator") !=
        std::string::npos);
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
