// Helpers shared by the fuzz targets: a per-process temp dir, whole-file writes, small valid
// caches written with the library's own writers, and reading every sample of a source.
//
// Fuzz targets run the same code under libFuzzer (-Dfuzz=enabled, clang) and, in every build,
// under standalone_main.cpp, which feeds each file of a seed corpus to LLVMFuzzerTestOneInput.
// A target returns normally for any input the library rejects with dscache::Error; anything
// else (a crash, a sanitizer report, another exception, a failed FUZZ_CHECK) is a finding.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "dscache/atomic_file.h"
#include "dscache/cache_writer.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/sample_source.h"
#include "dscache/shard.h"
#include "dscache/transform.h"

// An invariant of the library that the input broke: abort, so libFuzzer records a crash.
#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace dscache::fuzz {

// A directory under $TMPDIR (or /tmp); a target's static one lives as long as the process.
using dscache::test::TempDir;

// Replaces `path` with exactly `size` bytes (not atomically: fuzz inputs need no durability).
inline void write_bytes(const std::string& path, const void* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::vector<uint8_t> out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

// Seed writing: when DSCACHE_FUZZ_SEEDS is set, targets whose inputs are files of a cache they
// write themselves put those files there (tests/fuzz/make_corpus.py collects them).
inline void write_seed(const std::string& name, const std::vector<uint8_t>& bytes) {
  const char* dir = std::getenv("DSCACHE_FUZZ_SEEDS");
  if (dir == nullptr || *dir == '\0') return;
  ::mkdir(dir, 0755);
  write_bytes(std::string(dir) + "/" + name, bytes.data(), bytes.size());
}

// Which small valid cache to write.
enum class CacheKind { kFixed, kRagged, kJpegFixed, kJpegRagged };

// Writes a complete valid npy cache of 5 samples in shards of {2, 0, 3} at `dir` (an empty
// directory or none) through CacheWriter, deterministic bytes. Returns its manifest.
inline Manifest write_small_cache(const std::string& dir, CacheKind kind) {
  const bool jpeg = kind == CacheKind::kJpegFixed || kind == CacheKind::kJpegRagged;
  const bool ragged = kind == CacheKind::kRagged || kind == CacheKind::kJpegRagged;
  const uint32_t channels = 3;
  const uint32_t height = ragged ? 0 : 6, width = ragged ? 0 : 5;
  CacheWriterOptions o;
  o.storage = Storage::kNpy;
  o.layout = ragged ? Layout::kRagged : Layout::kFixed;
  o.codec = jpeg ? Codec::kJpeg : Codec::kRaw;
  o.recipe.height = height;
  o.recipe.width = width;
  o.recipe.channels = channels;
  o.recipe.max_side = ragged ? 8 : 0;
  o.recipe.quality = jpeg ? 90 : 0;
  o.recipe.shard_bytes = 1 << 16;  // shards are cut where told
  o.classes = {"a", "b"};
  o.source = {"folder", "/data/x", "", 5, 0x1234};
  o.tool_version = "fuzz";
  o.created_utc = "2024-01-01T00:00:00Z";
  o.force = true;
  auto w = CacheWriter::open(dir, o);  // Error(kUnsupported) without JPEG support
  std::mt19937_64 rng(42);
  uint64_t i = 0;
  for (uint64_t n : {2, 0, 3}) {
    for (uint64_t j = 0; j < n; ++j, ++i) {
      SampleShape s{height, width, channels};
      if (ragged) {
        s = {static_cast<uint32_t>(3 + rng() % 6), static_cast<uint32_t>(3 + rng() % 6), channels};
      }
      std::vector<uint8_t> px(s.bytes());
      if (ragged || jpeg) {
        for (size_t p = 0; p < px.size(); ++p) px[p] = static_cast<uint8_t>(p * 7 + rng() % 16);
      } else {
        for (auto& x : px) x = static_cast<uint8_t>(rng());
      }
      const int64_t label = static_cast<int64_t>(i % 2);
      const std::string name = "img/" + std::to_string(i) + ".png";
      if (jpeg) {
        std::vector<uint8_t> stored;
        jpeg_encode(px.data(), s.height, s.width, channels, 90, &stored);
        w->append_encoded(stored.data(), stored.size(), s.height, s.width, label, name);
      } else {
        w->append(px.data(), s.height, s.width, label, name);
      }
    }
    w->cut_shard();
  }
  return w->publish();
}

// The most bytes read_everything allocates for one sample (or all of a fixed cache's).
constexpr uint64_t kMaxSampleBytes = uint64_t{64} << 20;

// Reads every sample of `src` every way it offers (copy, view, crop decode), so a source that
// opened on bad metadata shows it here. Errors thrown by the library are fine.
inline void read_everything(const SampleSource& src) {
  std::vector<uint8_t> buf;
  for (uint64_t i = 0; i < src.size(); ++i) {
    try {
      (void)src.label(i);
      const SampleShape s = src.sample_shape(i);
      // A JPEG cache's index may claim up to 65500 x 65500 (the stream is checked against it
      // when decoded): crop small from such a sample instead of allocating it whole.
      const bool huge = s.bytes() > kMaxSampleBytes;
      if (!huge) {
        buf.assign(static_cast<size_t>(s.bytes()), 0);
        src.copy_sample(i, buf.data());
      }
      if (src.encoded()) {
        const CropBox box{s.height / 4, s.width / 4, s.height - s.height / 2, s.width - s.width / 2,
                          true};
        std::vector<uint8_t> out(uint64_t{3} * 3 * s.channels);
        src.decode_crop(i, box, 3, 3, out.data());
      } else if (!huge) {
        const ImageView v = src.view(i);
        FUZZ_CHECK(v.height == s.height && v.width == s.width && v.channels == s.channels);
        // Touch the first and last byte: ASan sees a view that passes its mapping.
        if (s.bytes() > 0) buf[0] = static_cast<uint8_t>(v.data[0] + v.data[s.bytes() - 1]);
      }
    } catch (const Error&) {
    }
  }
  if (src.layout() == Layout::kFixed && src.size() > 0 &&
      src.size() * src.shape().bytes() <= kMaxSampleBytes) {
    try {
      buf.assign(static_cast<size_t>(src.size() * src.shape().bytes()), 0);
      src.copy_samples(0, src.size(), buf.data());
    } catch (const Error&) {
    }
  }
}

}  // namespace dscache::fuzz
