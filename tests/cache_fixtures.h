// Fixtures of the Cache tests (test_cache*.cpp): the caches they write, and checks that a
// Cache serves what was written.
#pragma once

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
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/cache.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "test_util.h"

namespace dscache::test {

// The library's names the test files use unqualified: they take them, with the fixtures,
// by `using namespace dscache::test`.
using dscache::Cache;
using dscache::CacheOptions;
using dscache::Error;
using dscache::ErrorKind;
using dscache::Layout;
using dscache::Manifest;
using dscache::MemoryMode;
using dscache::SampleShape;
using dscache::Storage;

using Fixture = WrittenCache;

// What to build: by default the small cache, written by shard writers with room to spare.
struct Spec : SmallCacheSpec {
  Spec() {
    spare_samples = 3;
    spare_bytes = 100;
  }
};

// 4 + 0 + 3 + 5 samples in `storage`: runs that cross shards, one shard empty.
inline Spec spec_with_empty_shard(Storage storage) {
  Spec spec;
  spec.storage = storage;
  spec.shard_counts = {4, 0, 3, 5};
  return spec;
}

// The cache in `dir` opened in memory mode `mode`, its other options at their defaults.
inline std::shared_ptr<Cache> open_in_mode(const std::string& dir, MemoryMode mode) {
  CacheOptions o;
  o.memory = mode;
  return Cache::open(dir, o);
}

// Writes `spec` into `dir` (test_cache.cpp).
Fixture write_cache(const std::string& dir, const Spec& spec);

// After a file of the cache was replaced: its manifest entry takes the file's new size and hash.
inline void refresh_entry(Fixture& f, const std::string& name) {
  const dscache::FileEntry h = dscache::hash_file(f.path(name));
  for (dscache::ShardEntry& s : f.manifest.shards) {
    if (s.file == name) {
      s.bytes = h.bytes;
      s.xxh64 = h.xxh64;
    }
  }
  for (dscache::FileEntry* e : {&f.manifest.labels, &f.manifest.checksums, &f.manifest.sources,
                                &f.manifest.skips, &f.manifest.index}) {
    if (e->file == name) *e = h;
  }
  dscache::write_manifest(f.dir, f.manifest);
}

inline std::string storage_name(Storage s) { return dscache::to_string(s); }

// Every sample through view() (when `views`) and copy_sample() equals what was written.
inline void check_serves(const Cache& c, const Fixture& f, bool views = true) {
  REQUIRE(c.size() == f.samples.size());
  for (uint64_t i = 0; i < c.size(); ++i) {
    CAPTURE(i);
    const std::vector<uint8_t>& want = f.samples[i];
    CHECK(c.label(i) == f.labels[i]);
    CHECK(c.sample_shape(i).bytes() == want.size());
    std::vector<uint8_t> got(want.size() + 1, 0xEE);
    c.copy_sample(i, got.data());
    CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
    CHECK(got.back() == 0xEE);
    if (views) {
      const dscache::ImageView v = c.view(i);
      REQUIRE(v.data != nullptr);
      CHECK(v.height == f.shapes[i].height);
      CHECK(v.width == f.shapes[i].width);
      CHECK(v.channels == f.shapes[i].channels);
      CHECK(v.label == f.labels[i]);
      CHECK(std::memcmp(v.data, want.data(), want.size()) == 0);
    }
  }
}

#ifdef DSCACHE_HAVE_HDF5
// Rewrites shard `k` of `f` as a chunked + deflate HDF5 file (as other tools write them).
inline void make_chunked(Fixture& f, size_t k) {
  const dscache::ShardEntry e = f.manifest.shards[k];
  const bool ragged = f.manifest.layout == Layout::kRagged;
  std::vector<uint8_t> data;
  for (uint64_t i = e.first; i < e.first + e.count; ++i) {
    data.insert(data.end(), f.samples[i].begin(), f.samples[i].end());
  }
  const std::string path = f.path(e.file);
  ::unlink(path.c_str());
  std::vector<hsize_t> dims, chunk;
  if (ragged) {
    dims = {data.size()};
    chunk = {std::max<hsize_t>(1, data.size() / 3)};
  } else {
    dims = {e.count, f.manifest.height, f.manifest.width, f.manifest.channels};
    chunk = {2, f.manifest.height, f.manifest.width, f.manifest.channels};
  }
  write_chunked_images_h5(path, dims, chunk, data.data());
  refresh_entry(f, e.file);
}
#endif

}  // namespace dscache::test
