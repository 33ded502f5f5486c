// Cache: serving what was written (fixed and ragged, every storage, the HDF5 fallback), views,
// empty caches and bad indices, concurrency, a renamed directory. Memory modes are in
// test_cache_memory.cpp, corrupt caches in test_cache_corrupt.cpp.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache_fixtures.h"
#include "dscache/atomic_file.h"
#include "dscache/cache.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "test_util.h"

// The library's names the tests use unqualified come with cache_fixtures.h.
using namespace dscache::test;

namespace dscache::test {

Fixture write_cache(const std::string& dir, const Spec& spec) {
  return write_test_cache(dir, spec);
}

}  // namespace dscache::test

TEST_SUITE("unit") {
  TEST_CASE("fixed and ragged caches of every storage serve what was written") {
    struct Case {
      Layout layout;
      uint32_t channels;
      std::vector<uint64_t> shard_counts;
    };
    const Case cases[] = {
        {Layout::kFixed, 3, {4, 4, 2}},  {Layout::kFixed, 1, {5}},
        {Layout::kFixed, 3, {3, 0, 3}},  // an empty shard in the middle
        {Layout::kRagged, 3, {4, 4, 2}}, {Layout::kRagged, 1, {2, 0, 5}},
    };
    for (const Storage storage : storages()) {
      for (const Case& c : cases) {
        const std::string storage_s = storage_name(storage);
        const std::string layout_s = dscache::to_string(c.layout);
        CAPTURE(storage_s);
        CAPTURE(layout_s);
        CAPTURE(c.channels);
        TempDir dir;
        Spec spec;
        spec.storage = storage;
        spec.layout = c.layout;
        spec.channels = c.channels;
        spec.shard_counts = c.shard_counts;
        const Fixture f = write_cache(dir.path(), spec);
        for (const MemoryMode mode : {MemoryMode::kPageCache, MemoryMode::kInProcess}) {
          CacheOptions o;
          o.memory = mode;
          o.verify_checksums = true;
          const auto cache = Cache::open(dir.path(), o);
          CHECK(cache->dir() == dir.path());
          CHECK(cache->layout() == c.layout);
          CHECK(cache->shape().channels == c.channels);
          if (c.layout == Layout::kFixed) {
            CHECK(cache->shape().bytes() == spec.height * spec.width * c.channels);
          } else {
            CHECK(cache->shape().height == 0);
            CHECK(cache->shape().width == 0);
          }
          uint64_t largest = 0;
          for (uint64_t n : c.shard_counts) largest = std::max(largest, n);
          CHECK(cache->locality_block() == largest);
          CHECK(cache->manifest().count == f.samples.size());
          check_serves(*cache, f);
          uint64_t total = 0;
          for (size_t k = 0; k < c.shard_counts.size(); ++k) total += f.data_bytes(k);
          CHECK(cache->resident_bytes() == (mode == MemoryMode::kInProcess ? total : 0));
        }
      }
    }
  }

  TEST_CASE("views stay valid and unchanged for the cache's lifetime") {
    TempDir dir;
    const Fixture f = write_cache(dir.path(), Spec{});
    for (const MemoryMode mode : {MemoryMode::kPageCache, MemoryMode::kInProcess}) {
      const auto cache = open_in_mode(dir.path(), mode);
      std::vector<dscache::ImageView> views;
      for (uint64_t i = 0; i < cache->size(); ++i) views.push_back(cache->view(i));
      for (uint64_t i = 0; i < cache->size(); ++i) {
        CHECK(cache->view(i).data == views[i].data);  // the same place every time
        CHECK(std::memcmp(views[i].data, f.samples[i].data(), f.samples[i].size()) == 0);
      }
    }
  }

  TEST_CASE("an empty cache opens and serves nothing") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {};
    write_cache(dir.path(), spec);
    const auto cache = Cache::open(dir.path());
    CHECK(cache->size() == 0);
    CHECK(cache->locality_block() >= 1);
    expect_error([&] { cache->view(0); }, ErrorKind::kInvalidArgument, "out of range");
  }

  TEST_CASE("out-of-range indices are InvalidArgument") {
    TempDir dir;
    const Fixture f = write_cache(dir.path(), Spec{});
    const auto cache = Cache::open(dir.path());
    std::vector<uint8_t> buf(1024);
    for (const uint64_t i : {uint64_t{10}, uint64_t{11}, ~uint64_t{0}}) {
      CAPTURE(i);
      expect_error([&] { cache->view(i); }, ErrorKind::kInvalidArgument, "out of range");
      expect_error([&] { cache->copy_sample(i, buf.data()); }, ErrorKind::kInvalidArgument,
                   "out of range");
      expect_error([&] { cache->label(i); }, ErrorKind::kInvalidArgument, "out of range");
      expect_error([&] { cache->sample_shape(i); }, ErrorKind::kInvalidArgument, "out of range");
    }
  }

#ifdef DSCACHE_HAVE_HDF5

  TEST_CASE("hdf5: a chunked + deflate shard is served through the library") {
    for (const Layout layout : {Layout::kFixed, Layout::kRagged}) {
      const std::string layout_s = dscache::to_string(layout);
      CAPTURE(layout_s);
      TempDir dir;
      Spec spec;
      spec.storage = Storage::kHdf5;
      spec.layout = layout;
      Fixture f = write_cache(dir.path(), spec);
      make_chunked(f, 1);  // samples [4, 8)
      {
        CacheOptions o;
        o.verify_checksums = true;
        const auto cache = Cache::open(dir.path(), o);
        check_serves(*cache, f, /*views=*/false);
        CHECK(cache->resident_bytes() == 0);
        for (uint64_t i = 0; i < cache->size(); ++i) {
          CAPTURE(i);
          if (i >= 4 && i < 8) {
            expect_error([&] { cache->view(i); }, ErrorKind::kUnsupported, "images-00001.h5");
          } else {
            CHECK(std::memcmp(cache->view(i).data, f.samples[i].data(), f.samples[i].size()) == 0);
          }
        }
      }
      {
        // kInProcess holds it in memory: then it can be viewed.
        const auto cache = open_in_mode(dir.path(), MemoryMode::kInProcess);
        CHECK(cache->resident_bytes() == f.data_bytes(0) + f.data_bytes(1) + f.data_bytes(2));
        check_serves(*cache, f);
      }
    }
  }
#endif

  TEST_CASE("concurrent copy_sample and view from 4 threads equal the reference") {
    struct Case {
      Storage storage;
      Layout layout;
      MemoryMode mode;
      bool chunked;
    };
    std::vector<Case> cases = {
        {Storage::kNpy, Layout::kFixed, MemoryMode::kPageCache, false},
        {Storage::kNpy, Layout::kRagged, MemoryMode::kInProcess, false},
    };
    if (dscache::hdf5_supported()) {
      cases.push_back({Storage::kHdf5, Layout::kFixed, MemoryMode::kPageCache, true});
      cases.push_back({Storage::kHdf5, Layout::kRagged, MemoryMode::kPageCache, false});
    }
    for (const Case& c : cases) {
      const std::string storage_s = storage_name(c.storage);
      CAPTURE(storage_s);
      CAPTURE(c.chunked);
      TempDir dir;
      Spec spec;
      spec.storage = c.storage;
      spec.layout = c.layout;
      spec.shard_counts = {7, 7, 7, 3};
      Fixture f = write_cache(dir.path(), spec);
#ifdef DSCACHE_HAVE_HDF5
      if (c.chunked) make_chunked(f, 2);
#endif
      CacheOptions o;
      o.memory = c.mode;
      const auto cache = Cache::open(dir.path(), o);
      std::atomic<uint64_t> mismatches{0}, calls{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 rng(static_cast<uint64_t>(t) + 100);
          std::vector<uint8_t> buf(1024);
          for (int k = 0; k < 3000; ++k) {
            const uint64_t i = rng() % cache->size();
            const std::vector<uint8_t>& want = f.samples[i];
            const bool in_chunked = c.chunked && i >= 14 && i < 21;
            if (rng() % 2 == 0 || in_chunked) {
              cache->copy_sample(i, buf.data());
              if (std::memcmp(buf.data(), want.data(), want.size()) != 0) ++mismatches;
            } else {
              const dscache::ImageView v = cache->view(i);
              if (std::memcmp(v.data, want.data(), want.size()) != 0 || v.label != f.labels[i]) {
                ++mismatches;
              }
            }
            if (cache->label(i) != f.labels[i]) ++mismatches;
            ++calls;
          }
        });
      }
      for (std::thread& th : threads) th.join();
      CHECK(calls == 4 * 3000);
      CHECK(mismatches == 0);
    }
  }

  TEST_CASE("an open cache keeps working after its directory is renamed") {
    std::vector<std::pair<Storage, bool>> cases = {{Storage::kNpy, false}};
    if (dscache::hdf5_supported()) cases.push_back({Storage::kHdf5, true});
    for (const auto& [storage, chunked] : cases) {
      const std::string storage_s = storage_name(storage);
      CAPTURE(storage_s);
      TempDir parent;
      const std::string before = parent.file("c1"), after = parent.file("c2");
      REQUIRE(::mkdir(before.c_str(), 0755) == 0);
      Spec spec;
      spec.storage = storage;
      Fixture f = write_cache(before, spec);
#ifdef DSCACHE_HAVE_HDF5
      if (chunked) make_chunked(f, 1);
#endif
      const auto cache = Cache::open(before);
      REQUIRE(std::rename(before.c_str(), after.c_str()) == 0);
      check_serves(*cache, f, /*views=*/!chunked);
      // Mappings even survive deletion. (HDF5 reads reopen the file through /proc/self/fd,
      // and libhdf5 needs the realpath of a name, which a deleted file no longer has.)
      if (!chunked) {
        std::system(("rm -rf '" + after + "'").c_str());
        check_serves(*cache, f);
      }
    }
  }
}
