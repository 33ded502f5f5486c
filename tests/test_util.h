// Helpers shared by the unit tests: temp dirs, whole-file I/O, expected errors, Python checks,
// test caches.
#pragma once

#include <dirent.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
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
#include "dscache/cache_writer.h"
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

// The small cache most tests build: 4 + 4 + 2 samples of 5x7x3 (ragged: sides 1..9) in classes
// cat/dog/emu.
struct SmallCacheSpec : CacheSpec {
  SmallCacheSpec() {
    shard_counts = {4, 4, 2};
    height = 5;
    width = 7;
    classes = {"cat", "dog", "emu"};
  }
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

// Writes a complete cache at `dir` (replaced if it exists) through CacheWriter, one shard per
// entry of spec.shard_counts (cut_shard()), and returns what it should serve.
inline WrittenCache write_test_cache(const std::string& dir, const CacheSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  WrittenCache f;
  f.dir = dir;
  const bool ragged = spec.layout == Layout::kRagged;
  const uint32_t sides = spec.ragged_max_side - spec.ragged_min_side + 1;
  uint64_t count = 0, most = 0;
  for (uint64_t n : spec.shard_counts) {
    count += n;
    most = std::max(most, n);
  }
  CacheWriterOptions o;
  o.storage = spec.storage;
  o.layout = spec.layout;
  o.recipe.channels = spec.channels;
  if (ragged) {
    o.recipe.max_side = spec.ragged_max_side;
    o.recipe.shard_bytes = uint64_t{1} << 40;  // shards are cut only where told
  } else {
    o.recipe.height = spec.height;
    o.recipe.width = spec.width;
    o.recipe.shard_bytes =
        (most + spec.spare_samples + 1) * spec.height * spec.width * spec.channels;
  }
  o.classes = spec.classes;
  o.source = {"folder", "/data/x", "", count, 0x1234};
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  o.force = true;
  auto w = CacheWriter::open(dir, o);
  for (uint64_t n : spec.shard_counts) {
    std::vector<std::vector<uint8_t>> batch;
    std::vector<SampleShape> shapes;
    for (uint64_t j = 0; j < n; ++j) {
      SampleShape s{spec.height, spec.width, spec.channels};
      if (ragged) {
        s = {static_cast<uint32_t>(spec.ragged_min_side + rng() % sides),
             static_cast<uint32_t>(spec.ragged_min_side + rng() % sides), spec.channels};
      }
      std::vector<uint8_t> b(s.bytes());
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      batch.push_back(std::move(b));
      shapes.push_back(s);
    }
    uint64_t offset = 0;
    for (uint64_t j = 0; j < n; ++j) {
      const int64_t label = static_cast<int64_t>(rng() % spec.classes.size());
      const std::string name = "img/" + std::to_string(f.samples.size()) + ".png";
      w->append(batch[j].data(), shapes[j].height, shapes[j].width, label, name);
      if (ragged) {
        f.index.insert(f.index.end(),
                       {static_cast<int64_t>(offset), shapes[j].height, shapes[j].width});
      }
      offset += batch[j].size();
      f.labels.push_back(label);
      f.samples.push_back(std::move(batch[j]));
      f.shapes.push_back(shapes[j]);
    }
    w->cut_shard();
  }
  f.manifest = w->publish();
  return f;
}

}  // namespace dscache::test
