// Helpers shared by the unit tests: temp dirs, whole-file I/O, expected errors, Python checks,
// test caches.
#pragma once

#include <dirent.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "temp_dir.h"

#ifdef DSCACHE_HAVE_HDF5
#include <hdf5.h>
#endif

namespace dscache::test {

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// The names in `dir`, without "." and "..", in readdir order.
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

// Runs a Python snippet with /usr/bin/python3 from a script in `dir` (removed afterwards);
// returns its exit status (0 = the asserts held).
inline int run_python(const TempDir& dir, const std::string& code, const std::string& args = "") {
  const std::string script = dir.file("check.py");
  write_all(script, code);
  const int rc = std::system(("/usr/bin/python3 '" + script + "' " + args).c_str());
  ::unlink(script.c_str());
  return rc;
}

// Every storage this build can write and read: npy, plus HDF5 when compiled in.
inline std::vector<Storage> storages() {
  std::vector<Storage> v = {Storage::kNpy};
  if (hdf5_supported()) v.push_back(Storage::kHdf5);
  return v;
}

// Runs `f`; when it throws an Error, CHECKs that its kind is kInvalidArgument and returns its
// reason() (its what() when `whole`). "" when `f` does not throw.
template <typename F>
std::string invalid_argument_message(F&& f, bool whole = false) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    return whole ? std::string(e.what()) : e.reason();
  }
  return "";
}

// The texts an expected error's message must contain: one ("x") or several ({"x", "y"}).
struct Parts {
  Parts(const char* part) : all{part} {}
  Parts(std::string part) : all{std::move(part)} {}
  Parts(std::initializer_list<std::string> parts) : all(parts) {}
  Parts(std::vector<std::string> parts) : all(std::move(parts)) {}
  std::vector<std::string> all;
};

// Runs `f`, which must throw Error of `kind` whose what() contains each of `parts`; returns
// that Error for further checks. A call that throws nothing FAILs the test case.
template <typename F>
Error expect_error(F&& f, ErrorKind kind, const Parts& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(e.kind() == kind);
    for (const std::string& p : parts.all) CHECK(what.find(p) != std::string::npos);
    return e;
  }
  std::string expected;
  for (const std::string& p : parts.all) expected += " '" + p + "'";
  FAIL("no dscache::Error thrown; expected one containing" << expected);
  return Error(kind, "", "");  // not reached: FAIL throws
}

#ifdef DSCACHE_HAVE_HDF5
// Writes `data` as a chunked + deflate uint8 dataset "images" of `dims` (as other tools write
// shards): a fresh HDF5 file at `path`.
inline void write_chunked_images_h5(const std::string& path, const std::vector<hsize_t>& dims,
                                    const std::vector<hsize_t>& chunk, const void* data) {
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(file >= 0);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  REQUIRE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) >= 0);
  REQUIRE(H5Pset_deflate(dcpl, 6) >= 0);
  hid_t d = H5Dcreate2(file, "images", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(d >= 0);
  REQUIRE(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);
}
#endif

// What write_test_cache builds: `shard_counts` samples per shard (an entry may be 0) of random
// bytes and random labels, all from `seed`.
struct CacheSpec {
  Storage storage = Storage::kNpy;
  Layout layout = Layout::kFixed;
  std::vector<uint64_t> shard_counts;
  uint32_t height = 0;  // fixed layout
  uint32_t width = 0;
  uint32_t channels = 3;
  uint64_t seed = 1;
  std::vector<std::string> classes;
  uint32_t ragged_min_side = 1;  // ragged layout: heights and widths drawn in [min, max];
  uint32_t ragged_max_side = 9;  // max is the manifest's recipe.max_side
  uint64_t spare_samples = 0;    // fixed shard writers' capacity beyond their samples
  uint64_t spare_bytes = 0;      // ragged shard writers' capacity beyond their samples
};

// A complete, valid cache on disk and what it should serve.
struct WrittenCache {
  std::string dir;
  Manifest manifest;
  std::vector<std::vector<uint8_t>> samples;  // HWC bytes of each sample
  std::vector<SampleShape> shapes;
  std::vector<int64_t> labels;
  std::vector<int64_t> index;  // ragged: (count, 3) rows

  // The bytes of all samples in shard `shard`.
  uint64_t data_bytes(size_t shard) const {
    uint64_t n = 0;
    const ShardEntry& e = manifest.shards[shard];
    for (uint64_t i = e.first; i < e.first + e.count; ++i) n += samples[i].size();
    return n;
  }
  std::string path(const std::string& name) const { return dir + "/" + name; }
};

// Writes a complete cache into `dir` with the library's own writers: shards, labels.npy,
// checksums.npy, sources/skips, the ragged index and manifest.json.
inline WrittenCache write_test_cache(const std::string& dir, const CacheSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  WrittenCache f;
  f.dir = dir;
  Manifest& m = f.manifest;
  m.layout = spec.layout;
  m.storage = spec.storage;
  m.channels = spec.channels;
  m.channel_order = spec.channels == 3 ? "RGB" : "L";
  const bool ragged = spec.layout == Layout::kRagged;
  if (!ragged) {
    m.height = spec.height;
    m.width = spec.width;
  }
  m.classes = spec.classes;
  m.class_counts.assign(spec.classes.size(), 0);
  const uint32_t sides = spec.ragged_max_side - spec.ragged_min_side + 1;
  std::string sources;
  std::vector<uint64_t> checksums;
  uint64_t first = 0;
  for (size_t k = 0; k < spec.shard_counts.size(); ++k) {
    const std::string path = dir + "/" + shard_file_name(spec.storage, k);
    const uint64_t n = spec.shard_counts[k];
    std::vector<std::vector<uint8_t>> batch;
    std::vector<SampleShape> shapes;
    uint64_t bytes = 0;
    for (uint64_t j = 0; j < n; ++j) {
      SampleShape s{spec.height, spec.width, spec.channels};
      if (ragged) {
        s = {static_cast<uint32_t>(spec.ragged_min_side + rng() % sides),
             static_cast<uint32_t>(spec.ragged_min_side + rng() % sides), spec.channels};
      }
      std::vector<uint8_t> b(s.bytes());
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      bytes += b.size();
      batch.push_back(std::move(b));
      shapes.push_back(s);
    }
    ShardEntry e;
    if (ragged) {
      auto w =
          RaggedShardWriter::create(spec.storage, path, spec.channels, bytes + spec.spare_bytes);
      for (uint64_t j = 0; j < n; ++j) {
        const int64_t label = static_cast<int64_t>(rng() % spec.classes.size());
        const uint64_t off = w->append(batch[j].data(), shapes[j].height, shapes[j].width, label);
        f.index.insert(f.index.end(),
                       {static_cast<int64_t>(off), shapes[j].height, shapes[j].width});
        f.labels.push_back(label);
      }
      e = w->commit();
    } else {
      auto w = ShardWriter::create(spec.storage, path,
                                   SampleShape{spec.height, spec.width, spec.channels},
                                   n + spec.spare_samples);
      for (uint64_t j = 0; j < n; ++j) {
        const int64_t label = static_cast<int64_t>(rng() % spec.classes.size());
        w->append(batch[j].data(), label);
        f.labels.push_back(label);
      }
      e = w->commit();
    }
    e.first = first;
    first += n;
    m.shards.push_back(e);
    for (uint64_t j = 0; j < n; ++j) {
      checksums.push_back(xxh64(batch[j].data(), batch[j].size()));
      sources += "\"img/" + std::to_string(f.samples.size()) + ".png\"\n";
      f.samples.push_back(std::move(batch[j]));
      f.shapes.push_back(shapes[j]);
    }
  }
  m.count = first;
  for (int64_t l : f.labels) ++m.class_counts[static_cast<size_t>(l)];
  write_npy_file(dir + "/labels.npy", "<i8", {m.count}, f.labels.data(), f.labels.size() * 8);
  m.labels = hash_file(dir + "/labels.npy");
  write_npy_file(dir + "/checksums.npy", "<u8", {m.count}, checksums.data(), checksums.size() * 8);
  m.checksums = hash_file(dir + "/checksums.npy");
  m.sources = write_file_atomic(dir + "/sources.jsonl", sources.data(), sources.size());
  m.skips = write_file_atomic(dir + "/skipped.jsonl", "", 0);
  if (ragged) {
    write_npy_file(dir + "/ragged-index.npy", "<i8", {m.count, 3}, f.index.data(),
                   f.index.size() * 8);
    m.index = hash_file(dir + "/ragged-index.npy");
    m.recipe.max_side = spec.ragged_max_side;
  } else {
    m.recipe.height = spec.height;
    m.recipe.width = spec.width;
  }
  m.recipe.channels = spec.channels;
  m.source = {"folder", "/data/x", "", m.count, 0x1234};
  m.tool_version = "test";
  m.created_utc = "2024-01-01T00:00:00Z";
  write_manifest(dir, m);
  return f;
}

}  // namespace dscache::test
