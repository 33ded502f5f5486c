// Loader: batch buffers — 64-byte aligned and stable across epochs, supplied by a
// BufferAllocator and given back once, handed off with hand_off_images.
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
}  // TEST_SUITE
