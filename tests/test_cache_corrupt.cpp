// Cache::open on damaged caches: each corruption is Corruption naming the file; a symlink that
// stays inside the directory is accepted; verify_checksums catches a flipped byte.
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

#include "cache_fixtures.h"
#include "dscache/atomic_file.h"
#include "dscache/cache.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "test_util.h"

// The library's names the tests use unqualified come with cache_fixtures.h.
using namespace dscache::test;

namespace {

// A damage done to a written cache and the error Cache::open must then throw.
struct CorruptCase {
  const char* name;
  Layout layout;
  std::function<void(Fixture&)> damage;
  ErrorKind kind;
  std::string part;  // must appear in what()
};

// Cuts the file at `path` by `delta` bytes (negative: shorter).
void truncate_by(const std::string& path, int64_t delta) {
  const std::string b = read_all(path);
  write_all(path, b.substr(0, static_cast<size_t>(static_cast<int64_t>(b.size()) + delta)));
}

// Damages to a fixed-layout cache: shards, labels, side files, symlinks.
std::vector<CorruptCase> fixed_damages() {
  return {
      {"truncated shard", Layout::kFixed,
       [](Fixture& f) { truncate_by(f.path("images-00001.npy"), -10); }, ErrorKind::kCorruption,
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
       [](Fixture& f) { truncate_by(f.path("labels.npy"), -8); }, ErrorKind::kCorruption,
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
         REQUIRE(::symlink(("../" + base + ".outside.npy").c_str(), f.path("labels.npy").c_str()) ==
                 0);
       },
       ErrorKind::kCorruption, "labels.npy: symlink leads outside the cache directory"},
  };
}

// Damages to a ragged cache: its shards and ragged-index.npy.
std::vector<CorruptCase> ragged_damages() {
  return {
      {"ragged shard truncated", Layout::kRagged,
       [](Fixture& f) { truncate_by(f.path("images-00002.npy"), -1); }, ErrorKind::kCorruption,
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
       [](Fixture& f) { truncate_by(f.path("ragged-index.npy"), -8); }, ErrorKind::kCorruption,
       "ragged-index.npy: file holds"},
  };
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("corrupt caches are Corruption naming the file") {
    std::vector<CorruptCase> cases = fixed_damages();
    for (CorruptCase& c : ragged_damages()) cases.push_back(std::move(c));
    for (const CorruptCase& c : cases) {
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
}
