// JPEG caches (codec "jpeg"): the format read by Cache in every storage and layout, served by the
// Loader with serve-time decoding, in page-cache and pread modes; the manifest's codec fields.
// Corrupt samples, cut shards and lying index rows are in test_jpeg_cache_corrupt.cpp.
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

namespace {

// The library's names the tests use unqualified come with cache_fixtures.h, the JPEG cache
// fixtures with jpeg_cache_fixtures.h.
using namespace dscache::test;

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
