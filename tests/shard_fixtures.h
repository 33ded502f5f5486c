// Fixtures of the shard tests (test_shard*.cpp): seeded fixed and ragged samples, and the
// storages and shapes every case runs over.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/error.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "test_util.h"

namespace dscache::test {

// The library's names the test files use unqualified: they take them, with the fixtures,
// by `using namespace dscache::test`.
using dscache::Error;
using dscache::ErrorKind;
using dscache::SampleShape;
using dscache::ShardLocation;
using dscache::Storage;

struct Samples {
  std::vector<uint8_t> bytes;  // n * shape.bytes(), HWC per sample
  std::vector<int64_t> labels;
  uint64_t sum = 0;  // of every byte, for the Python checks
};

inline Samples random_samples(SampleShape shape, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Samples s;
  s.bytes.resize(n * shape.bytes());
  for (auto& b : s.bytes) {
    b = static_cast<uint8_t>(rng());
    s.sum += b;
  }
  for (uint64_t i = 0; i < n; ++i) s.labels.push_back(static_cast<int64_t>(rng() % 1000) - 3);
  return s;
}

// Writes `s` through a ShardWriter of `capacity` and commits it.
inline dscache::ShardEntry write_shard(Storage storage, const std::string& path, SampleShape shape,
                                       const Samples& s, uint64_t capacity) {
  auto w = dscache::ShardWriter::create(storage, path, shape, capacity);
  for (size_t i = 0; i < s.labels.size(); ++i) {
    w->append(s.bytes.data() + i * shape.bytes(), s.labels[i]);
    CHECK(w->count() == i + 1);
  }
  return w->commit();
}

// A fixed-layout shard in a fresh temp dir: `n` random samples of `shape` (seed `seed`) written
// as `name` through a ShardWriter of `capacity` and committed.
struct WrittenShard {
  TempDir dir;
  SampleShape shape;
  Samples s;
  std::string path;  // dir/name

  WrittenShard(Storage storage, const std::string& name, SampleShape shape_, uint64_t n,
               uint64_t seed, uint64_t capacity)
      : shape(shape_), s(random_samples(shape_, n, seed)), path(dir.file(name)) {
    write_shard(storage, path, shape, s, capacity);
  }
};

struct StorageCase {
  Storage storage;
  const char* name;
};

inline std::vector<StorageCase> storage_cases() {
  std::vector<StorageCase> v = {{Storage::kNpy, "npy"}};
  if (dscache::hdf5_supported()) v.push_back({Storage::kHdf5, "hdf5"});
  return v;
}

inline std::string shape_args(SampleShape s) {
  return std::to_string(s.height) + " " + std::to_string(s.width) + " " +
         std::to_string(s.channels);
}

// expect_error, and the Error's path() is `path` and its reason() contains `reason_part`.
template <typename F>
inline void expect_path_error(F&& f, ErrorKind kind, const std::string& path,
                              const std::string& reason_part = "") {
  const Error e = expect_error(f, kind, path);
  CHECK(e.path() == path);
  CHECK(e.reason().find(reason_part) != std::string::npos);
}

// A damaged fixed-layout shard: `content` written as `name`, which locating as `shape` must
// refuse as Corruption naming the file, for a reason that contains `reason_part`.
struct BadShard {
  const char* name;
  std::string content;
  SampleShape shape;
  std::string reason_part;
};

// Writes each of `cases` into `dir` and checks that locate_shard(`storage`) refuses it so.
inline void check_bad_shards(Storage storage, const TempDir& dir,
                             const std::vector<BadShard>& cases) {
  for (const BadShard& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const std::string path = dir.file(c.name);
    write_all(path, c.content);
    expect_path_error([&] { dscache::locate_shard(storage, path, c.shape); },
                      ErrorKind::kCorruption, path, c.reason_part);
  }
}

// Ragged samples of varied sizes, written back to back.
struct RaggedSamples {
  std::vector<uint8_t> bytes;  // all samples back to back
  std::vector<uint32_t> heights, widths;
  std::vector<uint64_t> offsets;  // where each starts in `bytes`
  std::vector<int64_t> labels;
  uint64_t sum = 0;
};

inline RaggedSamples random_ragged(uint32_t channels, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RaggedSamples s;
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t h = 1 + static_cast<uint32_t>(rng() % 11),
                   w = 1 + static_cast<uint32_t>(rng() % 13);
    s.heights.push_back(h);
    s.widths.push_back(w);
    s.offsets.push_back(s.bytes.size());
    for (uint64_t k = 0; k < uint64_t{h} * w * channels; ++k) {
      s.bytes.push_back(static_cast<uint8_t>(rng()));
      s.sum += s.bytes.back();
    }
    s.labels.push_back(static_cast<int64_t>(rng() % 10));
  }
  return s;
}

inline dscache::ShardEntry write_ragged(Storage storage, const std::string& path, uint32_t channels,
                                        const RaggedSamples& s, uint64_t capacity_bytes) {
  auto w = dscache::RaggedShardWriter::create(storage, path, channels, capacity_bytes);
  for (size_t i = 0; i < s.labels.size(); ++i) {
    const uint64_t off =
        w->append(s.bytes.data() + s.offsets[i], s.heights[i], s.widths[i], s.labels[i]);
    CHECK(off == s.offsets[i]);
    CHECK(w->count() == i + 1);
    CHECK(w->bytes() == s.offsets[i] + uint64_t{s.heights[i]} * s.widths[i] * channels);
  }
  return w->commit();
}

}  // namespace dscache::test
