// JPEG caches (codec "jpeg"): the format read by Cache in every storage and layout, served by the
// Loader with serve-time decoding, in page-cache and pread modes, and corrupt samples named.
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

using dscache::Codec;
// The library's other names the tests use unqualified come with cache_fixtures.h.
using namespace dscache::test;

// A smooth, photo-like image (gradients, a disc and mild noise) that JPEG compresses as it would
// a photograph: the decoded pixels stay close to these.
std::vector<uint8_t> photo_like(uint32_t h, uint32_t w, uint32_t c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double cx = w * (0.3 + 0.4 * (rng() % 100) / 100.0), cy = h * 0.5, r = std::min(h, w) / 3.0;
  std::vector<uint8_t> img(size_t{h} * w * c);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      const bool in = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
      for (uint32_t k = 0; k < c; ++k) {
        double v = 40 + 150.0 * x / w + 40.0 * std::sin(y * 0.2 + k) + (in ? 50 : 0);
        v += static_cast<double>(rng() % 7) - 3;
        img[(size_t{y} * w + x) * c + k] = static_cast<uint8_t>(std::max(0.0, std::min(255.0, v)));
      }
    }
  }
  return img;
}

struct JpegCache {
  std::string dir;
  Manifest manifest;
  std::vector<std::vector<uint8_t>> pixels;  // what was encoded
  std::vector<std::vector<uint8_t>> stored;  // the JPEG streams
  std::vector<SampleShape> shapes;
  std::vector<int64_t> labels;
  std::vector<int64_t> index;  // (count, 4): offset, length, h, w
};

// Writes a JPEG cache of `counts[k]` samples in shard k, as `dscache build --codec jpeg:Q`
// would: byte shards, jpeg-index.npy, checksums of the stored bytes, format_version 2.
JpegCache write_jpeg_cache(const std::string& dir, Storage storage, Layout layout,
                           const std::vector<uint64_t>& counts, uint32_t channels = 3,
                           int quality = 90) {
  JpegCache f;
  f.dir = dir;
  const bool ragged = layout == Layout::kRagged;
  const uint32_t height = ragged ? 0 : 24, width = ragged ? 0 : 40;
  uint64_t count = 0;
  for (uint64_t n : counts) count += n;
  dscache::CacheWriterOptions o;
  o.storage = storage;
  o.layout = layout;
  o.codec = Codec::kJpeg;
  o.recipe.height = height;
  o.recipe.width = width;
  o.recipe.channels = channels;
  o.recipe.max_side = ragged ? 48 : 0;
  o.recipe.quality = static_cast<uint32_t>(quality);
  o.recipe.shard_bytes = 1 << 24;  // shards are cut where told
  o.classes = {"a", "b", "c"};
  o.source = {"folder", "/data/x", "", count, 0x1234};
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  o.force = true;
  auto w = dscache::CacheWriter::open(dir, o);
  std::mt19937_64 rng(7);
  for (uint64_t n : counts) {
    uint64_t offset = 0;
    for (uint64_t j = 0; j < n; ++j) {
      const uint64_t i = f.pixels.size();
      SampleShape s{height, width, channels};
      if (ragged)
        s = {static_cast<uint32_t>(9 + rng() % 40), static_cast<uint32_t>(9 + rng() % 40),
             channels};
      std::vector<uint8_t> px = photo_like(s.height, s.width, channels, i);
      std::vector<uint8_t> jpg;
      dscache::jpeg_encode(px.data(), s.height, s.width, channels, quality, &jpg);
      const int64_t label = static_cast<int64_t>(i % 3);
      w->append_encoded(jpg.data(), jpg.size(), s.height, s.width, label,
                        "img/" + std::to_string(i) + ".png");
      f.index.insert(f.index.end(), {static_cast<int64_t>(offset), static_cast<int64_t>(jpg.size()),
                                     s.height, s.width});
      offset += jpg.size();
      f.labels.push_back(label);
      f.pixels.push_back(std::move(px));
      f.stored.push_back(std::move(jpg));
      f.shapes.push_back(s);
    }
    w->cut_shard();
  }
  f.manifest = w->publish();
  return f;
}

// Rewrites one file's manifest entry after the file changed (so only the change is tested).
void refresh_entry(JpegCache& f, const std::string& name) {
  const dscache::FileEntry h = dscache::hash_file(f.dir + "/" + name);
  for (dscache::ShardEntry& s : f.manifest.shards) {
    if (s.file == name) {
      s.bytes = h.bytes;
      s.xxh64 = h.xxh64;
    }
  }
  dscache::write_manifest(f.dir, f.manifest);
}

double mean_abs_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::abs(int(a[i]) - int(b[i]));
  return n ? s / n : 0;
}

// Every batch of one epoch, concatenated: images, labels, indices.
struct Epoch {
  std::vector<uint8_t> images;
  std::vector<int64_t> labels;
  std::vector<uint64_t> indices;
};

Epoch run_epoch(std::shared_ptr<const Cache> cache, const dscache::LoaderOptions& o,
                uint64_t seed = 3, uint64_t epoch = 1) {
  dscache::Loader loader(cache, o);
  loader.start_epoch(seed, epoch);
  Epoch e;
  while (const dscache::Batch* b = loader.next()) {
    const size_t bytes = size_t{b->size} * b->height * b->width * b->channels;
    e.images.insert(e.images.end(), b->images, b->images + bytes);
    e.labels.insert(e.labels.end(), b->labels, b->labels + b->size);
    e.indices.insert(e.indices.end(), b->indices, b->indices + b->size);
  }
  return e;
}

}  // namespace

TEST_SUITE("jpeg cache") {
  TEST_CASE("every storage and layout: the stored bytes, whole decodes and crops served") {
    for (Storage storage : storages()) {
      for (Layout layout : {Layout::kFixed, Layout::kRagged}) {
        CAPTURE(dscache::to_string(storage));
        CAPTURE(dscache::to_string(layout));
        TempDir tmp;
        JpegCache f = write_jpeg_cache(tmp.path(), storage, layout, {5, 0, 4, 3});
        auto cache = Cache::open(tmp.path(), CacheOptions{});
        REQUIRE(cache->size() == 12);
        CHECK(cache->encoded());
        CHECK(cache->manifest().codec == Codec::kJpeg);
        CHECK(cache->manifest().recipe.quality == 90);
        for (uint64_t i = 0; i < cache->size(); ++i) {
          CAPTURE(i);
          CHECK(cache->label(i) == f.labels[i]);
          const SampleShape s = cache->sample_shape(i);
          CHECK(s.height == f.shapes[i].height);
          CHECK(s.width == f.shapes[i].width);
          std::vector<uint8_t> stored;
          cache->stored_sample(i, &stored);
          CHECK(stored == f.stored[i]);
          // copy_sample decodes the whole image: exactly jpeg_decode, close to what was encoded.
          std::vector<uint8_t> got(s.bytes()), want(s.bytes());
          cache->copy_sample(i, got.data());
          dscache::JpegScratch scratch;
          dscache::jpeg_decode(stored.data(), stored.size(), s.height, s.width, s.channels,
                               want.data(), &scratch);
          CHECK(got == want);
          CHECK(mean_abs_diff(got.data(), f.pixels[i].data(), got.size()) < 4.0);
          expect_error([&] { cache->view(i); }, ErrorKind::kUnsupported, {"JPEG"});
        }
        // The Loader: crop none (fixed) serves whole decodes; random-resized crops equal
        // decode_crop of the same box, in every worker count.
        dscache::LoaderOptions o;
        o.batch_size = 5;
        o.workers = 2;
        if (layout == Layout::kFixed) {
          const Epoch e = run_epoch(cache, o);
          REQUIRE(e.indices.size() == 12);
          const size_t sb = f.shapes[0].bytes();
          for (size_t k = 0; k < 12; ++k) {
            std::vector<uint8_t> want(sb);
            cache->copy_sample(e.indices[k], want.data());
            CHECK(std::memcmp(e.images.data() + k * sb, want.data(), sb) == 0);
            CHECK(e.labels[k] == f.labels[e.indices[k]]);
          }
        }
        o.transform.crop = dscache::CropMode::kRandomResized;
        o.transform.height = 16;
        o.transform.width = 16;
        o.transform.flip = true;
        const Epoch a = run_epoch(cache, o);
        o.workers = 1;
        const Epoch b = run_epoch(cache, o);
        CHECK(a.images == b.images);
        CHECK(a.indices == b.indices);
        const size_t sb = 16 * 16 * 3;
        for (size_t k = 0; k < a.indices.size(); ++k) {
          const uint64_t i = a.indices[k];
          const SampleShape s = cache->sample_shape(i);
          const dscache::CropBox box =
              dscache::choose_crop(o.transform, s.height, s.width, 3, 1, i);
          std::vector<uint8_t> want(sb);
          cache->decode_crop(i, box, 16, 16, want.data());
          CHECK(std::memcmp(a.images.data() + k * sb, want.data(), sb) == 0);
        }
      }
    }
  }

  TEST_CASE("pread mode serves the same batches as the page cache") {
    for (Layout layout : {Layout::kFixed, Layout::kRagged}) {
      TempDir tmp;
      const JpegCache f = write_jpeg_cache(tmp.path(), Storage::kNpy, layout, {6, 6, 1});
      CacheOptions mapped, pread;
      mapped.memory = MemoryMode::kPageCache;
      pread.memory = MemoryMode::kPread;
      auto c1 = Cache::open(tmp.path(), mapped);
      auto c2 = Cache::open(tmp.path(), pread);
      CHECK(c2->memory_mode() == MemoryMode::kPread);
      dscache::LoaderOptions o;
      o.batch_size = 4;
      o.transform.crop = dscache::CropMode::kCenter;
      o.transform.height = 12;
      o.transform.width = 20;
      const Epoch a = run_epoch(c1, o), b = run_epoch(c2, o);
      CHECK(a.indices == b.indices);
      CHECK(a.images == b.images);
      CHECK(a.images.size() == 13u * 12 * 20 * 3);
      // The windowed shuffle, sized in stored (compressed) bytes, with read-ahead hints.
      o.sampler.shuffle = dscache::Shuffle::kWindowed;
      o.sampler.block_bytes = 2 * f.stored[0].size();
      o.sampler.window_bytes = 3 * o.sampler.block_bytes;
      const Epoch wa = run_epoch(c1, o), wb = run_epoch(c2, o);
      CHECK(wa.indices == wb.indices);
      CHECK(wa.images == wb.images);
      std::vector<uint64_t> sorted = wa.indices;
      std::sort(sorted.begin(), sorted.end());
      for (uint64_t k = 0; k < sorted.size(); ++k) CHECK(sorted[k] == k);  // a permutation
      dscache::Loader probe(c2, o);
      CHECK(probe.sampler_options().block >= 1);
      CHECK(probe.sampler_options().block <= 3);  // ~2 compressed samples per block
    }
  }

  TEST_CASE("CacheOptions.jpeg {false, false}: the Loader serves full decode + crop_resize") {
    TempDir tmp;
    JpegCache f = write_jpeg_cache(tmp.path(), Storage::kNpy, Layout::kRagged, {7, 5});
    CacheOptions ref;
    ref.jpeg = dscache::JpegDecodeOptions{false, false};
    auto fast = Cache::open(tmp.path(), CacheOptions{});
    auto full = Cache::open(tmp.path(), ref);
    dscache::LoaderOptions o;
    o.batch_size = 5;
    o.transform.crop = dscache::CropMode::kRandomResized;
    o.transform.height = o.transform.width = 8;  // at most half most crops: DCT scaling applies
    o.transform.flip = true;
    const Epoch a = run_epoch(full, o), b = run_epoch(fast, o);
    REQUIRE(a.indices == b.indices);
    double diff = mean_abs_diff(a.images.data(), b.images.data(), a.images.size());
    CHECK(diff < 6.0);  // the reduced decode is close to the reference...
    const size_t sb = 8 * 8 * 3;
    for (size_t k = 0; k < a.indices.size(); ++k) {
      const uint64_t i = a.indices[k];
      const SampleShape s = full->sample_shape(i);
      std::vector<uint8_t> whole(s.bytes()), want(sb);
      full->copy_sample(i, whole.data());
      const dscache::ImageView v{whole.data(), s.height, s.width, s.channels, 0};
      dscache::crop_resize(v, dscache::choose_crop(o.transform, s.height, s.width, 3, 1, i), 8, 8,
                           want.data());
      // ...and the reference is exactly decode + crop_resize.
      CHECK(std::memcmp(a.images.data() + k * sb, want.data(), sb) == 0);
    }
  }

  TEST_CASE("grey JPEG caches decode to one channel") {
    TempDir tmp;
    JpegCache f = write_jpeg_cache(tmp.path(), Storage::kNpy, Layout::kFixed, {3}, 1, 75);
    auto cache = Cache::open(tmp.path(), CacheOptions{});
    CHECK(cache->shape().channels == 1);
    std::vector<uint8_t> got(24 * 40);
    cache->copy_sample(2, got.data());
    CHECK(mean_abs_diff(got.data(), f.pixels[2].data(), got.size()) < 5.0);
  }

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

  TEST_CASE("manifest: codec and version agree, quality 1..100, the index is required") {
    TempDir tmp;
    JpegCache f = write_jpeg_cache(tmp.path(), Storage::kNpy, Layout::kFixed, {2});
    const std::string text = dscache::to_json(f.manifest);
    CHECK(text.find("\"codec\": \"jpeg\"") != std::string::npos);
    CHECK(text.find("\"format_version\": 2") != std::string::npos);
    CHECK(text.find("\"quality\": 90") != std::string::npos);
    const Manifest back = dscache::manifest_from_json(text, "m.json");
    CHECK(back.codec == Codec::kJpeg);
    CHECK(back.recipe.quality == 90);
    CHECK(back.index.file == "jpeg-index.npy");

    auto broken = [&](const std::string& from, const std::string& to) {
      std::string t = text;
      const size_t at = t.find(from);
      REQUIRE(at != std::string::npos);
      t.replace(at, from.size(), to);
      return t;
    };
    struct Case {
      const char* from;
      const char* to;
      const char* reason;  // in the Corruption's message
    };
    const Case cases[] = {
        {"\"format_version\": 2", "\"format_version\": 1", "m.json"},
        {"\"quality\": 90", "\"quality\": 0", "recipe.quality is 0"},
        {"\"codec\": \"jpeg\"", "\"codec\": \"webp\"", "codec is 'webp'"},
        {"\"codec\": \"jpeg\"", "\"codec\": \"raw\"", "format_version is 2, expected 1"},
    };
    for (const Case& c : cases) {
      const std::string to = c.to;
      CAPTURE(to);
      const std::string bad = broken(c.from, c.to);
      expect_error([&] { dscache::manifest_from_json(bad, "m.json"); }, ErrorKind::kCorruption,
                   c.reason);
    }
    // A raw manifest keeps version 1 and writes no codec key (readers before 2 read it).
    Manifest raw = back;
    raw.codec = Codec::kRaw;
    raw.format_version = 1;
    raw.index = {};
    const std::string raw_text = dscache::to_json(raw);
    CHECK(raw_text.find("codec") == std::string::npos);
    CHECK(raw_text.find("quality") == std::string::npos);
  }
}
