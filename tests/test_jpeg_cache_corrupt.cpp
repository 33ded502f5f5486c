// JPEG caches (codec "jpeg") that lie: a corrupt or cut sample, a shard truncated under an open
// Cache, index rows that claim huge images or disagree with the shards: Corruption naming them.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache_fixtures.h"
#include "dscache/cache.h"
#include "dscache/cache_writer.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "jpeg_cache_fixtures.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <atomic>
#define DSCACHE_TEST_ASAN 1
// From libasan (GCC ships no sanitizer/allocator_interface.h): calls `m` on every allocation.
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*m)(const volatile void*, size_t),
                                                         void (*f)(const volatile void*));
namespace {
std::atomic<uint64_t> largest_allocation{0};  // the largest malloc seen since the hook was set
void note_allocation(const volatile void*, size_t n) {
  uint64_t seen = largest_allocation.load();
  while (n > seen && !largest_allocation.compare_exchange_weak(seen, n)) {
  }
}
}  // namespace
#endif

namespace {

// The library's names the tests use unqualified come with cache_fixtures.h, the JPEG cache
// fixtures with jpeg_cache_fixtures.h.
using namespace dscache::test;

}  // namespace

TEST_SUITE("jpeg cache") {
  TEST_CASE("a corrupt or cut JPEG sample is Corruption naming the shard and the sample") {
    for (Storage storage : storages()) {
      CAPTURE(dscache::to_string(storage));
      TempDir tmp;
      JpegCache f = write_jpeg_cache(tmp.path(), storage, Layout::kFixed, {4, 4});
      // Sample 6 (shard 1): keep its length, but zero everything after its first 40 bytes, as a
      // torn write would leave it. The file's manifest entry is refreshed: only the sample is bad.
      const std::string shard = dscache::shard_file_name(storage, 1);
      const uint64_t at = static_cast<uint64_t>(f.index[4 * 6]);
      const uint64_t len = static_cast<uint64_t>(f.index[4 * 6 + 1]);
      const dscache::ShardLocation loc =
          dscache::locate_ragged_shard(storage, tmp.path() + "/" + shard);
      REQUIRE(loc.contiguous);
      std::string bytes = read_all(tmp.path() + "/" + shard);
      for (uint64_t k = 40; k < len; ++k) bytes[loc.data_offset + at + k] = 0;
      write_all(tmp.path() + "/" + shard, bytes);
      refresh_entry(f, shard);

      auto cache = Cache::open(tmp.path(), CacheOptions{});
      std::vector<uint8_t> out(24 * 40 * 3);
      cache->copy_sample(5, out.data());  // its neighbours are fine
      cache->copy_sample(7, out.data());
      expect_error([&] { cache->copy_sample(6, out.data()); }, ErrorKind::kCorruption,
                   {shard, "sample 6"});
      dscache::LoaderOptions o;
      o.batch_size = 8;
      o.sampler.shuffle = dscache::Shuffle::kNone;
      dscache::Loader loader(cache, o);
      loader.start_epoch(0, 0);
      expect_error([&] { loader.next(); }, ErrorKind::kCorruption, {shard, "sample 6"});
      // The shard's file hash was refreshed, so open succeeds; the per-sample checksum (what
      // `dscache verify` compares) still tells the stored bytes changed.
      std::vector<uint8_t> stored;
      cache->stored_sample(6, &stored);
      const std::vector<uint8_t> sums = [&] {
        std::string s = read_all(tmp.path() + "/checksums.npy");
        return std::vector<uint8_t>(s.end() - 8 * 8, s.end());
      }();
      uint64_t want = 0;
      std::memcpy(&want, sums.data() + 6 * 8, 8);
      CHECK(dscache::xxh64(stored.data(), stored.size()) != want);
    }
  }

  TEST_CASE("a JPEG shard truncated under an open Cache: every decode is Corruption, not SIGBUS") {
    // libjpeg must never read the mapping itself: the stream is copied out through the guard.
    for (Storage storage : storages()) {
      for (Layout layout : {Layout::kFixed, Layout::kRagged}) {
        CAPTURE(dscache::to_string(storage));
        CAPTURE(dscache::to_string(layout));
        TempDir tmp;
        JpegCache f = write_jpeg_cache(tmp.path(), storage, layout, {300});
        CacheOptions co;
        co.memory = MemoryMode::kPageCache;
        auto cache = Cache::open(tmp.path(), co);
        const std::string shard = dscache::shard_file_name(storage, 0);
        REQUIRE(::truncate((tmp.path() + "/" + shard).c_str(), 128) == 0);
        const std::vector<std::string> parts = {shard, "file shrank while mapped"};
        const uint64_t last = f.manifest.count - 1;  // far past the first page
        std::vector<uint8_t> out(size_t{f.shapes[last].bytes()});
        expect_error([&] { cache->copy_sample(last, out.data()); }, ErrorKind::kCorruption, parts);
        const dscache::CropBox box{0, 0, 8, 8, false};
        expect_error([&] { cache->decode_crop(last, box, 4, 4, out.data()); },
                     ErrorKind::kCorruption, parts);
        dscache::LoaderOptions o;
        o.batch_size = 16;
        o.workers = 2;
        o.transform.crop = dscache::CropMode::kRandomResized;
        o.transform.height = 8;
        o.transform.width = 8;
        dscache::Loader loader(cache, o);
        loader.start_epoch(0, 0);
        expect_error(
            [&] {
              while (loader.next() != nullptr) {
              }
            },
            ErrorKind::kCorruption, {shard});  // a zeroed stream in the first page, or SIGBUS
      }
    }
  }

  TEST_CASE("a lying index row (65500x65500 over a small stream) is Corruption before allocating") {
    // Run in a child under a 4 GB address-space limit: a decoder that sized its buffer from the
    // row would need 12.9 GB (bad_alloc, exit 3 below) before it ever read the stream's header.
    TempDir tmp;
    JpegCache f = write_jpeg_cache(tmp.path(), Storage::kNpy, Layout::kRagged, {6});
    f.index[2] = f.index[3] = 65500;  // row 0: h, w
    dscache::write_npy_file(tmp.path() + "/jpeg-index.npy", "<i8", {f.manifest.count, 4},
                            f.index.data(), f.index.size() * 8);
    f.manifest.index = dscache::hash_file(tmp.path() + "/jpeg-index.npy");
    dscache::write_manifest(tmp.path(), f.manifest);
    const std::string want = "stream is " + std::to_string(f.shapes[0].height) + "x" +
                             std::to_string(f.shapes[0].width) + ", expected 65500x65500";
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
#ifdef DSCACHE_TEST_ASAN
        // AddressSanitizer's shadow memory needs far more than 4 GB of address space: watch
        // every allocation's size instead of limiting them.
        __sanitizer_install_malloc_and_free_hooks(note_allocation, [](const volatile void*) {});
#else
        struct rlimit lim {
          uint64_t{4} << 30, uint64_t{4} << 30
        };
        ::setrlimit(RLIMIT_AS, &lim);
#endif
        int code = 0;
        try {
          CacheOptions co;
          co.memory = MemoryMode::kPageCache;
          co.jpeg.crop = path != 2;  // path 2: the full decode + crop_resize reference path
          co.jpeg.scale = path != 2;
          auto cache = Cache::open(tmp.path(), co);
          std::vector<uint8_t> out(8 * 8 * 3);
          const dscache::CropBox box{0, 0, 65500, 65500, false};
          if (path == 0) {
            cache->decode_crop(0, box, 8, 8, out.data());  // scaled: 1/8
          } else {
            cache->decode_crop(0, dscache::CropBox{0, 0, 64, 64, false}, 64, 64, out.data());
          }
          code = 2;  // no error at all
        } catch (const Error& e) {
          const std::string what = e.what();
          code = e.kind() == ErrorKind::kCorruption && what.find(want) != std::string::npos &&
                         what.find("sample 0") != std::string::npos
                     ? 0
                     : 1;
          if (code != 0) std::fprintf(stderr, "%s\n", e.what());
        } catch (const std::bad_alloc&) {
          code = 3;
        }
#ifdef DSCACHE_TEST_ASAN
        if (largest_allocation.load() > (uint64_t{4} << 30)) code = 3;
        if (largest_allocation.load() == 0) code = 4;  // the hook saw nothing: not installed
#endif
        ::_exit(code);
      }
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
    }
  }

  TEST_CASE("index rows that disagree with the shards or the shape are Corruption") {
    struct Mutation {
      const char* what;
      size_t row;
      int col;
      int64_t value;
      const char* part;
    };
    const Mutation mutations[] = {
        {"length 0", 2, 1, 0, "length > 0"},
        {"offset gap", 1, 0, -1, "offset is"},  // value -1: add 1 to the offset
        {"past the end", 7, 1, 1 << 20, "passes the end"},
        {"height != fixed shape", 2, 2, 23, "fixed layout's samples are 24x40"},
        {"width 0", 0, 3, 0, "0 < h, w"},
        {"height beyond JPEG's 16 bits", 2, 2, 65536, "h, w <= 65500"},
        {"height beyond libjpeg's 65500", 2, 2, 65520, "row 2 (images-00000.npy), sample 2, is ("},
        {"width 65501", 3, 3, 65501, "h, w <= 65500 (libjpeg's limit)"},
    };
    for (const Mutation& mu : mutations) {
      CAPTURE(std::string(mu.what));
      TempDir tmp;
      JpegCache f = write_jpeg_cache(tmp.path(), Storage::kNpy, Layout::kFixed, {4, 4});
      std::vector<int64_t> index = f.index;
      int64_t& cell = index[4 * mu.row + static_cast<size_t>(mu.col)];
      cell = mu.value == -1 ? cell + 1 : mu.value;
      dscache::write_npy_file(tmp.path() + "/jpeg-index.npy", "<i8", {8, 4}, index.data(),
                              index.size() * 8);
      f.manifest.index = dscache::hash_file(tmp.path() + "/jpeg-index.npy");
      dscache::write_manifest(tmp.path(), f.manifest);
      expect_error([&] { Cache::open(tmp.path(), CacheOptions{}); }, ErrorKind::kCorruption,
                   {"jpeg-index.npy", mu.part});
    }
  }
}
