// Fixtures of the JPEG cache tests (test_jpeg_cache*.cpp): photo-like images, a JPEG cache
// written as `dscache build --codec jpeg:Q` would, and one epoch of a Loader's batches.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache_fixtures.h"
#include "dscache/cache.h"
#include "dscache/cache_writer.h"
#include "dscache/checksum.h"
#include "dscache/jpeg.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"

namespace dscache::test {

using dscache::Codec;

// A smooth, photo-like image (gradients, a disc and mild noise) that JPEG compresses as it would
// a photograph: the decoded pixels stay close to these.
inline std::vector<uint8_t> photo_like(uint32_t h, uint32_t w, uint32_t c, uint64_t seed) {
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
inline JpegCache write_jpeg_cache(const std::string& dir, Storage storage, Layout layout,
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
inline void refresh_entry(JpegCache& f, const std::string& name) {
  const dscache::FileEntry h = dscache::hash_file(f.dir + "/" + name);
  for (dscache::ShardEntry& s : f.manifest.shards) {
    if (s.file == name) {
      s.bytes = h.bytes;
      s.xxh64 = h.xxh64;
    }
  }
  dscache::write_manifest(f.dir, f.manifest);
}

inline double mean_abs_diff(const uint8_t* a, const uint8_t* b, size_t n) {
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

inline Epoch run_epoch(std::shared_ptr<const Cache> cache, const dscache::LoaderOptions& o,
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

}  // namespace dscache::test
