// Cache: open-time validation, serving from mappings and private copies, the HDF5 fallback,
// the ragged layout, corruption, concurrency.
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

namespace {

using dscache::Cache;
using dscache::CacheOptions;
using dscache::Error;
using dscache::ErrorKind;
using dscache::Layout;
using dscache::Manifest;
using dscache::MemoryMode;
using dscache::SampleShape;
using dscache::Storage;

using namespace dscache::test;
using Fixture = WrittenCache;

// What to build: by default 4 + 4 + 2 samples of 5x7x3 (ragged: sides 1..9) in classes
// cat/dog/emu, written by shard writers with room to spare.
struct Spec : CacheSpec {
  Spec() {
    shard_counts = {4, 4, 2};
    height = 5;
    width = 7;
    classes = {"cat", "dog", "emu"};
    ragged_min_side = 1;
    ragged_max_side = 9;
    spare_samples = 3;
    spare_bytes = 100;
  }
};

Fixture write_cache(const std::string& dir, const Spec& spec) {
  return write_test_cache(dir, spec);
}

// After a file of the cache was replaced: its manifest entry takes the file's new size and hash.
void refresh_entry(Fixture& f, const std::string& name) {
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

std::string storage_name(Storage s) { return dscache::to_string(s); }

// Every sample through view() (when `views`) and copy_sample() equals what was written.
void check_serves(const Cache& c, const Fixture& f, bool views = true) {
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
void make_chunked(Fixture& f, size_t k) {
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

}  // namespace

// A memory cgroup this test made (v1 memory controller, or v2 with memory enabled), removed
// on destruction. ok() is false where none can be made here (not root, no memory controller).
class MemCgroup {
 public:
  explicit MemCgroup(uint64_t limit) {
    const std::string name = "dscache-test-" + std::to_string(::getpid());
    struct stat st;
    if (::stat("/sys/fs/cgroup/memory/cgroup.procs", &st) == 0) {
      dir_ = "/sys/fs/cgroup/memory/" + name;
      limit_file_ = "memory.limit_in_bytes";
    } else if (std::ifstream("/sys/fs/cgroup/cgroup.subtree_control")) {
      std::string controllers;
      std::getline(std::ifstream("/sys/fs/cgroup/cgroup.subtree_control"), controllers);
      if (controllers.find("memory") == std::string::npos) return;
      dir_ = "/sys/fs/cgroup/" + name;
      limit_file_ = "memory.max";
    } else {
      return;
    }
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      dir_.clear();
      return;
    }
    std::ofstream f(dir_ + "/" + limit_file_);
    f << limit << std::flush;
    ok_ = f.good();
  }
  ~MemCgroup() {
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  bool ok() const { return ok_; }
  // Moves the calling process into the cgroup.
  bool join() const {
    std::ofstream f(dir_ + "/cgroup.procs");
    f << ::getpid() << std::flush;
    return f.good();
  }
  std::string describe() const { return dir_ + "/" + limit_file_; }

 private:
  std::string dir_, limit_file_;
  bool ok_ = false;
};

TEST_SUITE("unit") {
  TEST_CASE("fixed and ragged caches of every storage serve what was written") {
    struct Case {
      Layout layout;
      uint32_t channels;
      std::vector<uint64_t> shard_counts;
    };
    const Case cases[] = {
        {Layout::kFixed, 3, {4, 4, 2}},  {Layout::kFixed, 1, {5}},
        {Layout::kFixed, 3, {3, 0, 3}},  // an empty shard in the middle
        {Layout::kRagged, 3, {4, 4, 2}}, {Layout::kRagged, 1, {2, 0, 5}},
    };
    for (const Storage storage : storages()) {
      for (const Case& c : cases) {
        const std::string storage_s = storage_name(storage);
        const std::string layout_s = dscache::to_string(c.layout);
        CAPTURE(storage_s);
        CAPTURE(layout_s);
        CAPTURE(c.channels);
        TempDir dir;
        Spec spec;
        spec.storage = storage;
        spec.layout = c.layout;
        spec.channels = c.channels;
        spec.shard_counts = c.shard_counts;
        const Fixture f = write_cache(dir.path(), spec);
        for (const MemoryMode mode : {MemoryMode::kPageCache, MemoryMode::kInProcess}) {
          CacheOptions o;
          o.memory = mode;
          o.verify_checksums = true;
          const auto cache = Cache::open(dir.path(), o);
          CHECK(cache->dir() == dir.path());
          CHECK(cache->layout() == c.layout);
          CHECK(cache->shape().channels == c.channels);
          if (c.layout == Layout::kFixed) {
            CHECK(cache->shape().bytes() == spec.height * spec.width * c.channels);
          } else {
            CHECK(cache->shape().height == 0);
            CHECK(cache->shape().width == 0);
          }
          uint64_t largest = 0;
          for (uint64_t n : c.shard_counts) largest = std::max(largest, n);
          CHECK(cache->locality_block() == largest);
          CHECK(cache->manifest().count == f.samples.size());
          check_serves(*cache, f);
          uint64_t total = 0;
          for (size_t k = 0; k < c.shard_counts.size(); ++k) total += f.data_bytes(k);
          CHECK(cache->resident_bytes() == (mode == MemoryMode::kInProcess ? total : 0));
        }
      }
    }
  }

  TEST_CASE("kPread serves every fixed sample by pread; views are Unsupported; ragged refused") {
    for (const Storage storage : storages()) {
      const std::string storage_s = storage_name(storage);
      CAPTURE(storage_s);
      TempDir dir;
      Spec spec;
      spec.storage = storage;
      spec.shard_counts = {4, 0, 3, 5};
      const Fixture f = write_cache(dir.path(), spec);
      CacheOptions o;
      o.memory = MemoryMode::kPread;
      const auto cache = Cache::open(dir.path(), o);
      CHECK(cache->memory_mode() == MemoryMode::kPread);
      CHECK(cache->resident_bytes() == 0);
      check_serves(*cache, f, /*views=*/false);
      expect_error([&] { cache->view(0); }, ErrorKind::kUnsupported, "pread mode");
      // The reads use the descriptors opened at open(): a renamed directory still serves.
      const std::string moved = dir.path() + "-moved";
      REQUIRE(::rename(dir.path().c_str(), moved.c_str()) == 0);
      check_serves(*cache, f, /*views=*/false);
      REQUIRE(::rename(moved.c_str(), dir.path().c_str()) == 0);
    }
    TempDir dir;
    Spec spec;
    spec.layout = Layout::kRagged;
    write_cache(dir.path(), spec);
    CacheOptions o;
    o.memory = MemoryMode::kPread;
    expect_error([&] { Cache::open(dir.path(), o); }, ErrorKind::kInvalidArgument,
                 "kPread serves the raw fixed layout and JPEG caches only");
  }

  TEST_CASE("copy_samples reads runs across shards; advise hints never change what is read") {
    for (const Storage storage : storages()) {
      for (const MemoryMode mode : {MemoryMode::kPread, MemoryMode::kPageCache}) {
        CAPTURE(storage_name(storage));
        CAPTURE(dscache::to_string(mode));
        TempDir dir;
        Spec spec;
        spec.storage = storage;
        spec.shard_counts = {4, 0, 3, 5};
        const Fixture f = write_cache(dir.path(), spec);
        CacheOptions o;
        o.memory = mode;
        const auto cache = Cache::open(dir.path(), o);
        REQUIRE(cache->memory_mode() == mode);
        const uint64_t n = cache->size(), bytes = cache->shape().bytes();
        CHECK(cache->stored_bytes() == n * bytes);
        // Every run [first, first + count), including ones that cross shard boundaries.
        for (uint64_t first = 0; first < n; ++first) {
          for (uint64_t count = 1; first + count <= n; ++count) {
            std::vector<uint8_t> got(count * bytes + 1, 0xEE);
            cache->copy_samples(first, count, got.data());
            std::vector<uint8_t> want;
            for (uint64_t i = first; i < first + count; ++i) {
              want.insert(want.end(), f.samples[i].begin(), f.samples[i].end());
            }
            CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
            CHECK(got.back() == 0xEE);
          }
        }
        // Drop and read ahead whole and partial ranges, then read everything again.
        for (const dscache::Advice a : {dscache::Advice::kDontNeed, dscache::Advice::kWillNeed}) {
          cache->advise(0, n, a);
          cache->advise(2, 5, a);
          cache->advise(n - 1, 1, a);
          cache->advise(n, 0, a);
          check_serves(*cache, f, /*views=*/mode != MemoryMode::kPread);
        }
        expect_error([&] { cache->advise(n - 2, 3, dscache::Advice::kWillNeed); },
                     ErrorKind::kInvalidArgument, "pass the end of the cache");
        expect_error([&] { cache->copy_samples(n, 1, nullptr); }, ErrorKind::kInvalidArgument,
                     "pass the end of the cache");
      }
    }
  }

  TEST_CASE("kAuto: page cache when the shards fit in available memory, pread otherwise") {
    using dscache::choose_memory_mode;
    CHECK(choose_memory_mode(100, 100, Layout::kFixed) == MemoryMode::kPageCache);
    CHECK(choose_memory_mode(101, 100, Layout::kFixed) == MemoryMode::kPread);
    CHECK(choose_memory_mode(0, 0, Layout::kFixed) == MemoryMode::kPageCache);
    CHECK(choose_memory_mode(UINT64_MAX, 1, Layout::kRagged) == MemoryMode::kPageCache);
    // This machine has memory to spare for a few hundred bytes: the default opens mapped.
    const uint64_t avail = dscache::available_memory_bytes();
    CHECK(avail > (uint64_t{16} << 20));
    TempDir dir;
    const Fixture f = write_cache(dir.path(), Spec{});
    const auto cache = Cache::open(dir.path());
    CHECK(cache->memory_mode() == MemoryMode::kPageCache);
    check_serves(*cache, f);
    CHECK(std::string(dscache::to_string(MemoryMode::kAuto)) == "auto");
    CHECK(std::string(dscache::to_string(MemoryMode::kPread)) == "pread");
  }

  TEST_CASE("every access hint serves the same bytes") {
    TempDir dir;
    const Fixture f = write_cache(dir.path(), Spec{});
    for (const auto hint : {dscache::AccessHint::kRandom, dscache::AccessHint::kSequential,
                            dscache::AccessHint::kWillNeed}) {
      CacheOptions o;
      o.hint = hint;
      check_serves(*Cache::open(dir.path(), o), f);
    }
  }

  TEST_CASE("kInProcess copies whole shards, in order, within the budget") {
    for (const Layout layout : {Layout::kFixed, Layout::kRagged}) {
      const std::string layout_s = dscache::to_string(layout);
      CAPTURE(layout_s);
      TempDir dir;
      Spec spec;
      spec.layout = layout;
      spec.shard_counts = {4, 4, 4};
      const Fixture f = write_cache(dir.path(), spec);
      const uint64_t s0 = f.data_bytes(0), s1 = f.data_bytes(1), s2 = f.data_bytes(2);
      struct Case {
        uint64_t budget;
        uint64_t resident;
      };
      const Case cases[] = {
          {0, s0 + s1 + s2},  // 0 = everything
          {s0, s0},           // exactly the first shard
          {s0 + s1 - 1, s0},  // the second does not fit: it and the rest stay mapped
          {s0 + s1 + s2, s0 + s1 + s2},
          {s0 - 1, 0},  // not even the first
      };
      for (const Case& c : cases) {
        CAPTURE(c.budget);
        CacheOptions o;
        o.memory = MemoryMode::kInProcess;
        o.memory_budget = c.budget;
        const auto cache = Cache::open(dir.path(), o);
        CHECK(cache->resident_bytes() == c.resident);
        check_serves(*cache, f);
      }
      CacheOptions page;
      page.memory_budget = 1;  // ignored by kPageCache
      CHECK(Cache::open(dir.path(), page)->resident_bytes() == 0);
    }
  }

  TEST_CASE("views stay valid and unchanged for the cache's lifetime") {
    TempDir dir;
    const Fixture f = write_cache(dir.path(), Spec{});
    for (const MemoryMode mode : {MemoryMode::kPageCache, MemoryMode::kInProcess}) {
      CacheOptions o;
      o.memory = mode;
      const auto cache = Cache::open(dir.path(), o);
      std::vector<dscache::ImageView> views;
      for (uint64_t i = 0; i < cache->size(); ++i) views.push_back(cache->view(i));
      for (uint64_t i = 0; i < cache->size(); ++i) {
        CHECK(cache->view(i).data == views[i].data);  // the same place every time
        CHECK(std::memcmp(views[i].data, f.samples[i].data(), f.samples[i].size()) == 0);
      }
    }
  }

  TEST_CASE("an empty cache opens and serves nothing") {
    TempDir dir;
    Spec spec;
    spec.shard_counts = {};
    write_cache(dir.path(), spec);
    const auto cache = Cache::open(dir.path());
    CHECK(cache->size() == 0);
    CHECK(cache->locality_block() >= 1);
    expect_error([&] { cache->view(0); }, ErrorKind::kInvalidArgument, "out of range");
  }

  TEST_CASE("out-of-range indices are InvalidArgument") {
    TempDir dir;
    const Fixture f = write_cache(dir.path(), Spec{});
    const auto cache = Cache::open(dir.path());
    std::vector<uint8_t> buf(1024);
    for (const uint64_t i : {uint64_t{10}, uint64_t{11}, ~uint64_t{0}}) {
      CAPTURE(i);
      expect_error([&] { cache->view(i); }, ErrorKind::kInvalidArgument, "out of range");
      expect_error([&] { cache->copy_sample(i, buf.data()); }, ErrorKind::kInvalidArgument,
                   "out of range");
      expect_error([&] { cache->label(i); }, ErrorKind::kInvalidArgument, "out of range");
      expect_error([&] { cache->sample_shape(i); }, ErrorKind::kInvalidArgument, "out of range");
    }
  }

#ifdef DSCACHE_HAVE_HDF5
  TEST_CASE("hdf5: a chunked + deflate shard is served through the library") {
    for (const Layout layout : {Layout::kFixed, Layout::kRagged}) {
      const std::string layout_s = dscache::to_string(layout);
      CAPTURE(layout_s);
      TempDir dir;
      Spec spec;
      spec.storage = Storage::kHdf5;
      spec.layout = layout;
      Fixture f = write_cache(dir.path(), spec);
      make_chunked(f, 1);  // samples [4, 8)
      {
        CacheOptions o;
        o.verify_checksums = true;
        const auto cache = Cache::open(dir.path(), o);
        check_serves(*cache, f, /*views=*/false);
        CHECK(cache->resident_bytes() == 0);
        for (uint64_t i = 0; i < cache->size(); ++i) {
          CAPTURE(i);
          if (i >= 4 && i < 8) {
            expect_error([&] { cache->view(i); }, ErrorKind::kUnsupported, "images-00001.h5");
          } else {
            CHECK(std::memcmp(cache->view(i).data, f.samples[i].data(), f.samples[i].size()) == 0);
          }
        }
      }
      {
        // kInProcess holds it in memory: then it can be viewed.
        CacheOptions o;
        o.memory = MemoryMode::kInProcess;
        const auto cache = Cache::open(dir.path(), o);
        CHECK(cache->resident_bytes() == f.data_bytes(0) + f.data_bytes(1) + f.data_bytes(2));
        check_serves(*cache, f);
      }
    }
  }
#endif

  TEST_CASE("corrupt caches are Corruption naming the file") {
    struct Case {
      const char* name;
      Layout layout;
      std::function<void(Fixture&)> damage;
      ErrorKind kind;
      std::string part;  // must appear in what()
    };
    auto truncate = [](const std::string& path, int64_t delta) {
      const std::string b = read_all(path);
      write_all(path, b.substr(0, static_cast<size_t>(static_cast<int64_t>(b.size()) + delta)));
    };
    const Case cases[] = {
        {"truncated shard", Layout::kFixed,
         [&](Fixture& f) { truncate(f.path("images-00001.npy"), -10); }, ErrorKind::kCorruption,
         "images-00001.npy: file holds"},
        {"shard with extra bytes", Layout::kFixed,
         [](Fixture& f) {
           write_all(f.path("images-00000.npy"), read_all(f.path("images-00000.npy")) + "xx");
         },
         ErrorKind::kCorruption, "images-00000.npy: file holds"},
        {"shard whose header says another shape", Layout::kFixed,
         [](Fixture& f) {
           // Same bytes, but (n, 7, 5, 3): the manifest's size agrees, the header does not.
           std::vector<uint8_t> data;
           for (uint64_t i = 4; i < 8; ++i) {
             data.insert(data.end(), f.samples[i].begin(), f.samples[i].end());
           }
           dscache::write_npy_file(f.path("images-00001.npy"), "|u1", {4, 7, 5, 3}, data.data(),
                                   data.size());
           refresh_entry(f, "images-00001.npy");
         },
         ErrorKind::kCorruption, "images-00001.npy: shape is (4, 7, 5, 3)"},
        {"shard with fewer samples than the manifest says", Layout::kFixed,
         [](Fixture& f) {
           std::vector<uint8_t> data(3 * 5 * 7 * 3, 1);
           dscache::write_npy_file(f.path("images-00001.npy"), "|u1", {3, 5, 7, 3}, data.data(),
                                   data.size());
           refresh_entry(f, "images-00001.npy");
         },
         ErrorKind::kCorruption, "images-00001.npy: header says 3 samples, manifest says 4"},
        {"two shards swapped", Layout::kFixed,
         [](Fixture& f) {
           const std::string a = f.path("images-00001.npy"), b = f.path("images-00002.npy");
           REQUIRE(std::rename(a.c_str(), (a + ".x").c_str()) == 0);
           REQUIRE(std::rename(b.c_str(), a.c_str()) == 0);
           REQUIRE(std::rename((a + ".x").c_str(), b.c_str()) == 0);
         },
         ErrorKind::kCorruption, "images-00001.npy: file holds"},
        {"labels.npy truncated", Layout::kFixed,
         [&](Fixture& f) { truncate(f.path("labels.npy"), -8); }, ErrorKind::kCorruption,
         "labels.npy: file holds"},
        {"label out of range", Layout::kFixed,
         [](Fixture& f) {
           std::vector<int64_t> labels = f.labels;
           labels[6] = 3;
           dscache::write_npy_file(f.path("labels.npy"), "<i8", {labels.size()}, labels.data(),
                                   labels.size() * 8);
           refresh_entry(f, "labels.npy");
         },
         ErrorKind::kCorruption, "labels.npy: label of sample 6 is 3, outside [0, 3)"},
        {"labels of the wrong length", Layout::kFixed,
         [](Fixture& f) {
           std::vector<int64_t> labels(9, 0);
           dscache::write_npy_file(f.path("labels.npy"), "<i8", {9}, labels.data(), 72);
           refresh_entry(f, "labels.npy");
         },
         ErrorKind::kCorruption, "labels.npy: shape is (9,), expected (10,)"},
        {"labels of the wrong dtype", Layout::kFixed,
         [](Fixture& f) {
           std::vector<int32_t> labels(10, 0);
           dscache::write_npy_file(f.path("labels.npy"), "<i4", {10}, labels.data(), 40);
           refresh_entry(f, "labels.npy");
         },
         ErrorKind::kCorruption, "labels.npy: dtype is '<i4'"},
        {"sources.jsonl missing", Layout::kFixed,
         [](Fixture& f) { ::unlink(f.path("sources.jsonl").c_str()); }, ErrorKind::kNotFound,
         "sources.jsonl"},
        {"manifest missing", Layout::kFixed,
         [](Fixture& f) { ::unlink(f.path("manifest.json").c_str()); }, ErrorKind::kNotFound,
         "manifest.json"},
        {"a shard is a directory", Layout::kFixed,
         [](Fixture& f) {
           ::unlink(f.path("images-00002.npy").c_str());
           REQUIRE(::mkdir(f.path("images-00002.npy").c_str(), 0755) == 0);
         },
         ErrorKind::kCorruption, "images-00002.npy: not a regular file"},
        {"symlinked shard pointing outside the dir", Layout::kFixed,
         [](Fixture& f) {
           const std::string outside = f.dir + ".outside.npy";
           REQUIRE(std::rename(f.path("images-00001.npy").c_str(), outside.c_str()) == 0);
           REQUIRE(::symlink(outside.c_str(), f.path("images-00001.npy").c_str()) == 0);
         },
         ErrorKind::kCorruption, "images-00001.npy: symlink leads outside the cache directory"},
        {"symlink through .. back out of the dir", Layout::kFixed,
         [](Fixture& f) {
           const std::string outside = f.dir + ".outside.npy";
           REQUIRE(std::rename(f.path("labels.npy").c_str(), outside.c_str()) == 0);
           const std::string base = f.dir.substr(f.dir.rfind('/') + 1);
           REQUIRE(::symlink(("../" + base + ".outside.npy").c_str(),
                             f.path("labels.npy").c_str()) == 0);
         },
         ErrorKind::kCorruption, "labels.npy: symlink leads outside the cache directory"},
        {"ragged shard truncated", Layout::kRagged,
         [&](Fixture& f) { truncate(f.path("images-00002.npy"), -1); }, ErrorKind::kCorruption,
         "images-00002.npy: file holds"},
        {"ragged index pointing past its shard", Layout::kRagged,
         [](Fixture& f) {
           std::vector<int64_t> index = f.index;
           index[3 * 3 + 1] += 1;  // sample 3, the last of shard 0, one row taller
           dscache::write_npy_file(f.path("ragged-index.npy"), "<i8", {10, 3}, index.data(),
                                   index.size() * 8);
           refresh_entry(f, "ragged-index.npy");
         },
         ErrorKind::kCorruption, "ragged-index.npy: row 3 (images-00000.npy)"},
        {"ragged index with a gap between samples", Layout::kRagged,
         [](Fixture& f) {
           std::vector<int64_t> index = f.index;
           index[3 * 5] += 1;  // sample 5 starts one byte late
           index[3 * 5 + 1] = 1;
           index[3 * 5 + 2] = 1;
           dscache::write_npy_file(f.path("ragged-index.npy"), "<i8", {10, 3}, index.data(),
                                   index.size() * 8);
           refresh_entry(f, "ragged-index.npy");
         },
         ErrorKind::kCorruption, "ragged-index.npy: row 5 (images-00001.npy)"},
        {"ragged index with a zero side", Layout::kRagged,
         [](Fixture& f) {
           std::vector<int64_t> index = f.index;
           index[3 * 0 + 2] = 0;
           dscache::write_npy_file(f.path("ragged-index.npy"), "<i8", {10, 3}, index.data(),
                                   index.size() * 8);
           refresh_entry(f, "ragged-index.npy");
         },
         ErrorKind::kCorruption, "ragged-index.npy: row 0"},
        {"ragged index truncated", Layout::kRagged,
         [&](Fixture& f) { truncate(f.path("ragged-index.npy"), -8); }, ErrorKind::kCorruption,
         "ragged-index.npy: file holds"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      TempDir dir;
      Spec spec;
      spec.layout = c.layout;
      Fixture f = write_cache(dir.path(), spec);
      c.damage(f);
      for (const MemoryMode mode : {MemoryMode::kPageCache, MemoryMode::kInProcess}) {
        CacheOptions o;
        o.memory = mode;
        expect_error([&] { Cache::open(dir.path(), o); }, c.kind, c.part);
      }
      std::system(("rm -f '" + dir.path() + ".outside.npy'").c_str());
    }
  }

  TEST_CASE("a symlink that stays inside the cache directory is accepted") {
    TempDir dir;
    const Fixture f = write_cache(dir.path(), Spec{});
    REQUIRE(::mkdir(f.path("store").c_str(), 0755) == 0);
    REQUIRE(std::rename(f.path("images-00001.npy").c_str(), f.path("store/s1.npy").c_str()) == 0);
    REQUIRE(::symlink("store/s1.npy", f.path("images-00001.npy").c_str()) == 0);
    REQUIRE(std::rename(f.path("labels.npy").c_str(), f.path("store/l.npy").c_str()) == 0);
    REQUIRE(::symlink((f.dir + "/store/l.npy").c_str(), f.path("labels.npy").c_str()) == 0);
    check_serves(*Cache::open(dir.path()), f);
  }

  TEST_CASE("verify_checksums catches a flipped byte that keeps the size") {
    struct Case {
      const char* file;
      uint64_t at_from_end;  // which byte, counted from the end (inside the data)
    };
    for (const Case& c :
         {Case{"images-00001.npy", 5}, Case{"sources.jsonl", 3}, Case{"checksums.npy", 1}}) {
      CAPTURE(c.file);
      TempDir dir;
      const Fixture f = write_cache(dir.path(), Spec{});
      std::string bytes = read_all(f.path(c.file));
      bytes[bytes.size() - c.at_from_end] ^= 0x01;
      write_all(f.path(c.file), bytes);
      CHECK_NOTHROW(Cache::open(dir.path()));  // sizes agree: only the hash can tell
      CacheOptions o;
      o.verify_checksums = true;
      expect_error([&] { Cache::open(dir.path(), o); }, ErrorKind::kCorruption,
                   std::string(c.file) + ": XXH64 is ");
    }
  }

  TEST_CASE("concurrent copy_sample and view from 4 threads equal the reference") {
    struct Case {
      Storage storage;
      Layout layout;
      MemoryMode mode;
      bool chunked;
    };
    std::vector<Case> cases = {
        {Storage::kNpy, Layout::kFixed, MemoryMode::kPageCache, false},
        {Storage::kNpy, Layout::kRagged, MemoryMode::kInProcess, false},
    };
    if (dscache::hdf5_supported()) {
      cases.push_back({Storage::kHdf5, Layout::kFixed, MemoryMode::kPageCache, true});
      cases.push_back({Storage::kHdf5, Layout::kRagged, MemoryMode::kPageCache, false});
    }
    for (const Case& c : cases) {
      const std::string storage_s = storage_name(c.storage);
      CAPTURE(storage_s);
      CAPTURE(c.chunked);
      TempDir dir;
      Spec spec;
      spec.storage = c.storage;
      spec.layout = c.layout;
      spec.shard_counts = {7, 7, 7, 3};
      Fixture f = write_cache(dir.path(), spec);
#ifdef DSCACHE_HAVE_HDF5
      if (c.chunked) make_chunked(f, 2);
#endif
      CacheOptions o;
      o.memory = c.mode;
      const auto cache = Cache::open(dir.path(), o);
      std::atomic<uint64_t> mismatches{0}, calls{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 rng(static_cast<uint64_t>(t) + 100);
          std::vector<uint8_t> buf(1024);
          for (int k = 0; k < 3000; ++k) {
            const uint64_t i = rng() % cache->size();
            const std::vector<uint8_t>& want = f.samples[i];
            const bool in_chunked = c.chunked && i >= 14 && i < 21;
            if (rng() % 2 == 0 || in_chunked) {
              cache->copy_sample(i, buf.data());
              if (std::memcmp(buf.data(), want.data(), want.size()) != 0) ++mismatches;
            } else {
              const dscache::ImageView v = cache->view(i);
              if (std::memcmp(v.data, want.data(), want.size()) != 0 || v.label != f.labels[i]) {
                ++mismatches;
              }
            }
            if (cache->label(i) != f.labels[i]) ++mismatches;
            ++calls;
          }
        });
      }
      for (std::thread& th : threads) th.join();
      CHECK(calls == 4 * 3000);
      CHECK(mismatches == 0);
    }
  }

  TEST_CASE("an open cache keeps working after its directory is renamed") {
    std::vector<std::pair<Storage, bool>> cases = {{Storage::kNpy, false}};
    if (dscache::hdf5_supported()) cases.push_back({Storage::kHdf5, true});
    for (const auto& [storage, chunked] : cases) {
      const std::string storage_s = storage_name(storage);
      CAPTURE(storage_s);
      TempDir parent;
      const std::string before = parent.file("c1"), after = parent.file("c2");
      REQUIRE(::mkdir(before.c_str(), 0755) == 0);
      Spec spec;
      spec.storage = storage;
      Fixture f = write_cache(before, spec);
#ifdef DSCACHE_HAVE_HDF5
      if (chunked) make_chunked(f, 1);
#endif
      const auto cache = Cache::open(before);
      REQUIRE(std::rename(before.c_str(), after.c_str()) == 0);
      check_serves(*cache, f, /*views=*/!chunked);
      // Mappings even survive deletion. (HDF5 reads reopen the file through /proc/self/fd,
      // and libhdf5 needs the realpath of a name, which a deleted file no longer has.)
      if (!chunked) {
        std::system(("rm -rf '" + after + "'").c_str());
        check_serves(*cache, f);
      }
    }
  }

  // Registered in meson as its own test (cache_cgroup): it exits 77 (SKIP) where no memory
  // cgroup can be made, and the main `cache` test excludes it.
  TEST_CASE("in a memory cgroup smaller than the cache, kAuto preads and serves every sample") {
    TempDir dir;
    Spec spec;
    spec.height = 64;
    spec.width = 64;
    spec.shard_counts = {1000, 1000, 1000, 1000};  // 49 MB of samples
    const Fixture f = write_cache(dir.path(), spec);
    const uint64_t limit = uint64_t{24} << 20;
    MemCgroup cg(limit);
    if (!cg.ok()) {
      std::fprintf(stderr,
                   "SKIP: no memory cgroup can be made here (needs root and a memory "
                   "controller at /sys/fs/cgroup)\n");
      std::exit(77);
    }
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // In the child: exit codes say what went wrong (doctest's checks live in the parent).
      if (!cg.join()) ::_exit(2);
      const uint64_t avail = dscache::available_memory_bytes();
      if (avail > limit) ::_exit(3);
      const auto cache = Cache::open(dir.path());
      if (cache->memory_mode() != MemoryMode::kPread) ::_exit(4);
      dscache::LoaderOptions o;
      o.batch_size = 64;
      o.workers = 2;
      o.sampler.shuffle = dscache::Shuffle::kGlobal;
      dscache::Loader loader(cache, o);
      loader.start_epoch(1, 0);
      uint64_t seen = 0;
      const uint64_t sb = cache->shape().bytes();
      while (const dscache::Batch* b = loader.next()) {
        for (uint32_t k = 0; k < b->size; ++k) {
          const uint64_t i = b->indices[k];
          if (std::memcmp(b->images + k * sb, f.samples[i].data(), sb) != 0) ::_exit(5);
          if (b->labels[k] != f.labels[i]) ::_exit(6);
          ++seen;
        }
      }
      ::_exit(seen == f.samples.size() ? 0 : 7);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("cgroup " << cg.describe() << "; child status " << status
                   << " (exit 2 join, 3 limit not seen, 4 not pread, 5/6 wrong sample, 7 count;"
                      " signal 9: OOM-killed)");
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}
