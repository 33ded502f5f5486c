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

// Writes a complete valid npy cache of 5 samples in shards of {2, 0, 3} into `dir` (which must
// exist and be empty of cache files), deterministic bytes. Returns its manifest.
inline Manifest write_small_cache(const std::string& dir, CacheKind kind) {
  const bool jpeg = kind == CacheKind::kJpegFixed || kind == CacheKind::kJpegRagged;
  const bool ragged = kind == CacheKind::kRagged || kind == CacheKind::kJpegRagged;
  if (jpeg && !jpeg_supported()) throw Error(ErrorKind::kUnsupported, dir, "no JPEG support");
  const uint32_t channels = 3;
  Manifest m;
  m.layout = ragged ? Layout::kRagged : Layout::kFixed;
  m.storage = Storage::kNpy;
  m.codec = jpeg ? Codec::kJpeg : Codec::kRaw;
  m.format_version = format_version_for(m.codec);
  m.channels = channels;
  m.channel_order = "RGB";
  if (!ragged) {
    m.height = 6;
    m.width = 5;
  }
  m.classes = {"a", "b"};
  m.class_counts = {0, 0};
  std::mt19937_64 rng(42);
  const std::vector<uint64_t> counts = {2, 0, 3};
  std::vector<int64_t> labels, index;
  std::vector<uint64_t> sums;
  std::string sources;
  uint64_t first = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const std::string path = dir + "/" + shard_file_name(Storage::kNpy, k);
    ShardEntry e;
    if (ragged || jpeg) {
      auto w = RaggedShardWriter::create(Storage::kNpy, path, channels, 1 << 16);
      for (uint64_t j = 0; j < counts[k]; ++j) {
        SampleShape s{m.height, m.width, channels};
        if (ragged)
          s = {static_cast<uint32_t>(3 + rng() % 6), static_cast<uint32_t>(3 + rng() % 6),
               channels};
        std::vector<uint8_t> px(s.bytes());
        for (size_t p = 0; p < px.size(); ++p) px[p] = static_cast<uint8_t>(p * 7 + rng() % 16);
        std::vector<uint8_t> stored = px;
        if (jpeg) jpeg_encode(px.data(), s.height, s.width, channels, 90, &stored);
        const int64_t label = static_cast<int64_t>(labels.size() % 2);
        const uint64_t off = w->append_bytes(stored.data(), stored.size(), label);
        index.push_back(static_cast<int64_t>(off));
        if (jpeg) index.push_back(static_cast<int64_t>(stored.size()));
        index.push_back(s.height);
        index.push_back(s.width);
        sums.push_back(xxh64(stored.data(), stored.size()));
        labels.push_back(label);
      }
      e = w->commit();
    } else {
      const SampleShape s{m.height, m.width, channels};
      auto w = ShardWriter::create(Storage::kNpy, path, s, counts[k]);
      for (uint64_t j = 0; j < counts[k]; ++j) {
        std::vector<uint8_t> px(s.bytes());
        for (auto& x : px) x = static_cast<uint8_t>(rng());
        const int64_t label = static_cast<int64_t>(labels.size() % 2);
        w->append(px.data(), label);
        sums.push_back(xxh64(px.data(), px.size()));
        labels.push_back(label);
      }
      e = w->commit();
    }
    e.first = first;
    first += counts[k];
    m.shards.push_back(e);
  }
  m.count = first;
  for (int64_t l : labels) ++m.class_counts[static_cast<size_t>(l)];
  for (uint64_t i = 0; i < m.count; ++i) sources += "\"img/" + std::to_string(i) + ".png\"\n";
  write_npy_file(dir + "/labels.npy", "<i8", {m.count}, labels.data(), labels.size() * 8);
  m.labels = hash_file(dir + "/labels.npy");
  write_npy_file(dir + "/checksums.npy", "<u8", {m.count}, sums.data(), sums.size() * 8);
  m.checksums = hash_file(dir + "/checksums.npy");
  m.sources = write_file_atomic(dir + "/sources.jsonl", sources.data(), sources.size());
  m.skips = write_file_atomic(dir + "/skipped.jsonl", "", 0);
  if (ragged || jpeg) {
    const std::string name = jpeg ? "jpeg-index.npy" : "ragged-index.npy";
    write_npy_file(dir + "/" + name, "<i8", {m.count, jpeg ? 4u : 3u}, index.data(),
                   index.size() * 8);
    m.index = hash_file(dir + "/" + name);
  }
  m.recipe.height = m.height;
  m.recipe.width = m.width;
  m.recipe.channels = channels;
  m.recipe.max_side = ragged ? 8 : 0;
  m.recipe.quality = jpeg ? 90 : 0;
  m.source = {"folder", "/data/x", "", m.count, 0x1234};
  m.tool_version = "fuzz";
  m.created_utc = "2024-01-01T00:00:00Z";
  write_manifest(dir, m);
  return m;
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
