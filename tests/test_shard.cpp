// Shards: write → locate → read for npy, fixed and ragged; interop with numpy; bad files.
// HDF5 shards are in test_shard_hdf5.cpp.
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
#include "shard_fixtures.h"
#include "test_util.h"

// The library's names the tests use unqualified come with shard_fixtures.h.
using namespace dscache::test;

TEST_SUITE("unit") {
  TEST_CASE("shard_file_name") {
    struct Case {
      Storage storage;
      uint64_t index;
      const char* name;
    };
    const Case cases[] = {
        {Storage::kNpy, 0, "images-00000.npy"},       {Storage::kNpy, 12, "images-00012.npy"},
        {Storage::kHdf5, 12, "images-00012.h5"},      {Storage::kHdf5, 99999, "images-99999.h5"},
        {Storage::kNpy, 123456, "images-123456.npy"},
    };
    for (const Case& c : cases) CHECK(dscache::shard_file_name(c.storage, c.index) == c.name);
  }

  TEST_CASE("write, commit, locate and read back every storage and shape") {
    const SampleShape shapes[] = {{5, 7, 3}, {4, 6, 1}, {28, 28, 1}};
    for (const StorageCase& sc : storage_cases()) {
      for (const SampleShape& shape : shapes) {
        const std::string storage_name = sc.name;
        CAPTURE(storage_name);
        CAPTURE(shape.bytes());
        TempDir dir;
        const uint64_t n = 13, capacity = 20;  // capacity > count: the npy header is rewritten
        const Samples s = random_samples(shape, n, shape.bytes());
        const std::string name = dscache::shard_file_name(sc.storage, 3);
        const std::string path = dir.file(name);
        const dscache::ShardEntry e = write_shard(sc.storage, path, shape, s, capacity);
        CHECK(e.file == name);
        CHECK(e.first == 0);
        CHECK(e.count == n);
        const dscache::FileEntry h = dscache::hash_file(path);
        CHECK(e.bytes == h.bytes);
        CHECK(e.xxh64 == h.xxh64);
        CHECK(list_dir(dir.path()) == std::vector<std::string>{name});  // no temp files

        const ShardLocation loc = dscache::locate_shard(sc.storage, path, shape);
        CHECK(loc.count == n);
        CHECK(loc.contiguous);
        CHECK(loc.file_bytes == h.bytes);
        CHECK(loc.data_offset + n * shape.bytes() <= loc.file_bytes);
        if (sc.storage == Storage::kNpy) {
          CHECK(loc.data_offset % 64 == 0);
          CHECK(loc.data_offset + n * shape.bytes() == loc.file_bytes);
          const dscache::NpyHeader hdr = dscache::read_npy_header(path);
          CHECK(hdr.shape == std::vector<uint64_t>{n, shape.height, shape.width, shape.channels});
          // The header keeps the size it had for the capacity.
          CHECK(hdr.data_offset == dscache::format_npy_header(
                                       "|u1", {capacity, shape.height, shape.width, shape.channels})
                                       .size());
        }

        std::vector<uint8_t> all(n * shape.bytes());
        dscache::read_shard_samples(sc.storage, path, loc, shape, 0, n, all.data());
        CHECK(all == s.bytes);
        // The raw bytes at data_offset are the samples (what an mmap reader sees).
        const std::string raw = read_all(path);
        CHECK(std::memcmp(raw.data() + loc.data_offset, s.bytes.data(), s.bytes.size()) == 0);

        struct Range {
          uint64_t first, n;
        };
        for (const Range r : {Range{4, 5}, Range{12, 1}, Range{0, 1}, Range{13, 0}}) {
          std::vector<uint8_t> part(r.n * shape.bytes() + 1, 0xAB);
          dscache::read_shard_samples(sc.storage, path, loc, shape, r.first, r.n, part.data());
          CHECK(std::memcmp(part.data(), s.bytes.data() + r.first * shape.bytes(),
                            r.n * shape.bytes()) == 0);
          CHECK(part.back() == 0xAB);  // nothing written past the request
        }
        for (const Range r : {Range{13, 1}, Range{10, 4}, Range{~0ULL, 2}, Range{1, ~0ULL}}) {
          std::vector<uint8_t> part(64);
          CHECK_THROWS_WITH_AS(
              dscache::read_shard_samples(sc.storage, path, loc, shape, r.first, r.n, part.data()),
              doctest::Contains("InvalidArgument"), Error);
        }
      }
    }
  }

  TEST_CASE("zero-count shards commit and locate") {
    const SampleShape shape{8, 8, 3};
    for (const StorageCase& sc : storage_cases()) {
      const std::string storage_name = sc.name;
      CAPTURE(storage_name);
      TempDir dir;
      const std::string path = dir.file(dscache::shard_file_name(sc.storage, 0));
      auto w = dscache::ShardWriter::create(sc.storage, path, shape, 10);
      const dscache::ShardEntry e = w->commit();
      CHECK(e.count == 0);
      CHECK(e.bytes == dscache::hash_file(path).bytes);
      CHECK(e.xxh64 == dscache::hash_file(path).xxh64);
      const ShardLocation loc = dscache::locate_shard(sc.storage, path, shape);
      CHECK(loc.count == 0);
      CHECK(loc.file_bytes == e.bytes);
      CHECK(loc.contiguous);  // nothing to read through HDF5
      dscache::read_shard_samples(sc.storage, path, loc, shape, 0, 0, nullptr);
      CHECK_THROWS_AS(dscache::read_shard_samples(sc.storage, path, loc, shape, 0, 1, nullptr),
                      Error);
    }
  }

  TEST_CASE("a writer refuses samples past its capacity and a second commit") {
    const SampleShape shape{2, 2, 1};
    const uint8_t sample[4] = {1, 2, 3, 4};
    for (const StorageCase& sc : storage_cases()) {
      const std::string storage_name = sc.name;
      CAPTURE(storage_name);
      TempDir dir;
      const std::string path = dir.file("s");
      auto w = dscache::ShardWriter::create(sc.storage, path, shape, 2);
      w->append(sample, 0);
      w->append(sample, 1);
      CHECK_THROWS_WITH_AS(w->append(sample, 2), doctest::Contains("InvalidArgument"), Error);
      CHECK(w->count() == 2);
      CHECK(w->commit().count == 2);
      CHECK_THROWS_AS(w->commit(), Error);
      CHECK_THROWS_AS(w->append(sample, 3), Error);
      CHECK(dscache::locate_shard(sc.storage, path, shape).count == 2);
    }
  }

  TEST_CASE("invalid sample shapes are InvalidArgument") {
    TempDir dir;
    for (const SampleShape& bad :
         {SampleShape{0, 4, 3}, SampleShape{4, 0, 1}, SampleShape{4, 4, 2}, SampleShape{4, 4, 0}}) {
      CHECK_THROWS_WITH_AS(dscache::ShardWriter::create(Storage::kNpy, dir.file("x.npy"), bad, 1),
                           doctest::Contains("InvalidArgument"), Error);
    }
    CHECK(list_dir(dir.path()).empty());
  }

  TEST_CASE("destroying an uncommitted writer leaves no files") {
    const SampleShape shape{3, 3, 3};
    const Samples s = random_samples(shape, 4, 1);
    for (const StorageCase& sc : storage_cases()) {
      const std::string storage_name = sc.name;
      CAPTURE(storage_name);
      TempDir dir;
      {
        auto w = dscache::ShardWriter::create(sc.storage, dir.file("images-00000.x"), shape, 10);
        for (int i = 0; i < 4; ++i) w->append(s.bytes.data() + i * shape.bytes(), i);
        CHECK_FALSE(list_dir(dir.path()).empty());  // something is being written...
      }
      CHECK(list_dir(dir.path()).empty());  // ...and nothing is left
    }
  }

  TEST_CASE("numpy reads an npy shard; its pixel sum equals ours") {
    const WrittenShard w(Storage::kNpy, "images-00000.npy", {6, 5, 3}, 9, 42, 50);
    const char* code = R"PY(
import sys
import numpy as np
path, n, h, w, c, total = sys.argv[1], *map(int, sys.argv[2:])
a = np.load(path, mmap_mode="r")
assert a.dtype == np.uint8, a.dtype
assert a.shape == (n, h, w, c), a.shape
assert int(a.astype(np.int64).sum()) == total, (int(a.astype(np.int64).sum()), total)
)PY";
    CHECK(run_python(w.dir, code,
                     w.path + " 9 " + shape_args(w.shape) + " " + std::to_string(w.s.sum)) == 0);
  }

  TEST_CASE("bad shard files are Corruption naming the file; a missing one is NotFound") {
    const WrittenShard w(Storage::kNpy, "good.npy", {4, 4, 3}, 5, 9, 5);
    const std::string bytes = read_all(w.path);

    const std::string other_dtype_path = w.dir.file("i8.npy");
    std::vector<int64_t> i8(5 * 4 * 4 * 3, 1);
    dscache::write_npy_file(other_dtype_path, "<i8", {5, 4, 4, 3}, i8.data(), i8.size() * 8);
    std::vector<uint8_t> flat(240, 1);
    dscache::write_npy_file(w.dir.file("flat.npy"), "|u1", {240}, flat.data(), flat.size());
    const std::vector<BadShard> cases = {
        {"truncated.npy", bytes.substr(0, bytes.size() - 10), w.shape,
         ("file holds " + std::to_string(bytes.size() - 10) + " bytes, header says " +
          std::to_string(bytes.size()))},
        {"trailing.npy", bytes + "garbage", w.shape,
         ("file holds " + std::to_string(bytes.size() + 7) + " bytes, header says " +
          std::to_string(bytes.size()))},
        {"wrong_shape.npy", bytes, SampleShape{4, 3, 3}, "expected (n, 4, 3, 3)"},
        {"wrong_channels.npy", bytes, SampleShape{4, 4, 1}, "shape is (5, 4, 4, 3)"},
        {"zero.npy", "", w.shape, ""},
        {"header_only.npy", bytes.substr(0, 40), w.shape, ""},
        {"text.npy", "hello\n", w.shape, "magic"},
        {"i8.npy", read_all(other_dtype_path), w.shape, "dtype"},
        {"flat.npy", read_all(w.dir.file("flat.npy")), w.shape, "shape is (240,)"},
    };
    check_bad_shards(Storage::kNpy, w.dir, cases);
    for (const StorageCase& sc : storage_cases()) {
      const std::string missing = w.dir.file(std::string("missing.") + sc.name);
      expect_path_error([&] { dscache::locate_shard(sc.storage, missing, w.shape); },
                        ErrorKind::kNotFound, missing);
    }
  }

  TEST_CASE("ragged: write, commit, locate and read back bytes for every storage") {
    for (const StorageCase& sc : storage_cases()) {
      for (const uint32_t channels : {3u, 1u}) {
        const std::string storage_name = sc.name;
        CAPTURE(storage_name);
        CAPTURE(channels);
        TempDir dir;
        const RaggedSamples s = random_ragged(channels, 9, channels);
        const uint64_t capacity = s.bytes.size() + 1000;  // the npy header is rewritten
        const std::string name = dscache::shard_file_name(sc.storage, 0);
        const std::string path = dir.file(name);
        const dscache::ShardEntry e = write_ragged(sc.storage, path, channels, s, capacity);
        CHECK(e.file == name);
        CHECK(e.count == 9);
        const dscache::FileEntry h = dscache::hash_file(path);
        CHECK(e.bytes == h.bytes);
        CHECK(e.xxh64 == h.xxh64);
        CHECK(list_dir(dir.path()) == std::vector<std::string>{name});

        const ShardLocation loc = dscache::locate_ragged_shard(sc.storage, path);
        CHECK(loc.count == s.bytes.size());  // bytes, not samples
        CHECK(loc.contiguous);
        CHECK(loc.file_bytes == h.bytes);
        CHECK(loc.data_offset + s.bytes.size() <= loc.file_bytes);
        if (sc.storage == Storage::kNpy) {
          const dscache::NpyHeader hdr = dscache::read_npy_header(path);
          CHECK(hdr.shape == std::vector<uint64_t>{s.bytes.size()});
          CHECK(hdr.descr == "|u1");
          CHECK(hdr.data_offset == dscache::format_npy_header("|u1", {capacity}).size());
          CHECK(loc.data_offset + s.bytes.size() == loc.file_bytes);
        }
        const std::string raw = read_all(path);
        CHECK(std::memcmp(raw.data() + loc.data_offset, s.bytes.data(), s.bytes.size()) == 0);

        for (size_t i = 0; i < s.labels.size(); ++i) {
          const uint64_t n = uint64_t{s.heights[i]} * s.widths[i] * channels;
          std::vector<uint8_t> out(n + 1, 0xAB);
          dscache::read_shard_bytes(sc.storage, path, loc, s.offsets[i], n, out.data());
          CHECK(std::memcmp(out.data(), s.bytes.data() + s.offsets[i], n) == 0);
          CHECK(out.back() == 0xAB);
        }
        std::vector<uint8_t> out(16);
        const uint64_t total = s.bytes.size();
        for (const auto& r :
             {std::pair<uint64_t, uint64_t>{total, 1}, {total - 3, 4}, {~0ULL, 2}, {1, ~0ULL}}) {
          CHECK_THROWS_WITH_AS(
              dscache::read_shard_bytes(sc.storage, path, loc, r.first, r.second, out.data()),
              doctest::Contains("InvalidArgument"), Error);
        }
        // A ragged shard is not a fixed one, and the other way round.
        expect_path_error(
            [&] {
              dscache::locate_shard(sc.storage, path, SampleShape{2, 2, channels});
            },
            ErrorKind::kCorruption, path);
        const std::string fixed = dir.file("fixed");
        write_shard(sc.storage, fixed, SampleShape{2, 2, 1}, random_samples({2, 2, 1}, 3, 1), 3);
        expect_path_error([&] { dscache::locate_ragged_shard(sc.storage, fixed); },
                          ErrorKind::kCorruption, fixed, "expected");
      }
    }
  }

  TEST_CASE("ragged: capacity, zero sides, channels, empty shards, uncommitted writers") {
    const uint8_t px[12] = {};
    for (const StorageCase& sc : storage_cases()) {
      const std::string storage_name = sc.name;
      CAPTURE(storage_name);
      TempDir dir;
      {
        auto w = dscache::RaggedShardWriter::create(sc.storage, dir.file("a"), 3, 24);
        CHECK(w->append(px, 2, 2, 0) == 0);
        CHECK(w->append(px, 1, 4, 1) == 12);
        CHECK_THROWS_WITH_AS(w->append(px, 1, 1, 2), doctest::Contains("InvalidArgument"), Error);
        CHECK_THROWS_WITH_AS(w->append(px, 0, 1, 2), doctest::Contains("InvalidArgument"), Error);
        CHECK(w->count() == 2);
        CHECK(w->bytes() == 24);
        CHECK(w->commit().count == 2);
        CHECK_THROWS_AS(w->commit(), Error);
        CHECK_THROWS_AS(w->append(px, 1, 1, 3), Error);
        CHECK(dscache::locate_ragged_shard(sc.storage, dir.file("a")).count == 24);
      }
      {
        auto w = dscache::RaggedShardWriter::create(sc.storage, dir.file("b"), 1, 10);
        CHECK_THROWS_WITH_AS(w->append(px, 1, 0, 0), doctest::Contains("InvalidArgument"), Error);
        const dscache::ShardEntry e = w->commit();  // empty
        CHECK(e.count == 0);
        const ShardLocation loc = dscache::locate_ragged_shard(sc.storage, dir.file("b"));
        CHECK(loc.count == 0);
        CHECK(loc.contiguous);
        dscache::read_shard_bytes(sc.storage, dir.file("b"), loc, 0, 0, nullptr);
      }
      CHECK_THROWS_WITH_AS(dscache::RaggedShardWriter::create(sc.storage, dir.file("c"), 2, 10),
                           doctest::Contains("InvalidArgument"), Error);
      {
        auto w = dscache::RaggedShardWriter::create(sc.storage, dir.file("d"), 3, 100);
        w->append(px, 2, 2, 0);
      }
      std::vector<std::string> names = list_dir(dir.path());
      std::sort(names.begin(), names.end());
      CHECK(names == std::vector<std::string>{"a", "b"});  // nothing left of c or d
      expect_path_error([&] { dscache::locate_ragged_shard(sc.storage, dir.file("missing")); },
                        ErrorKind::kNotFound, dir.file("missing"));
    }
  }

  TEST_CASE("ragged npy: bad files are Corruption naming the file") {
    TempDir dir;
    const RaggedSamples s = random_ragged(3, 4, 8);
    const std::string good = dir.file("good.npy");
    write_ragged(Storage::kNpy, good, 3, s, s.bytes.size());
    const std::string bytes = read_all(good);
    std::vector<int64_t> i8(10, 1);
    dscache::write_npy_file(dir.file("i8.npy"), "<i8", {10}, i8.data(), 80);
    struct Case {
      const char* name;
      std::string content;
      std::string reason_part;
    };
    const Case cases[] = {
        {"truncated.npy", bytes.substr(0, bytes.size() - 1), "file holds"},
        {"trailing.npy", bytes + "x", "file holds"},
        {"i8.npy", read_all(dir.file("i8.npy")), "dtype"},
        {"zero.npy", "", ""},
    };
    for (const Case& c : cases) {
      const std::string name = c.name;
      CAPTURE(name);
      const std::string path = dir.file(c.name);
      write_all(path, c.content);
      expect_path_error([&] { dscache::locate_ragged_shard(Storage::kNpy, path); },
                        ErrorKind::kCorruption, path, c.reason_part);
    }
  }

  TEST_CASE("numpy reads a ragged npy shard: (bytes,) uint8, the samples back to back") {
    TempDir dir;
    const RaggedSamples s = random_ragged(3, 7, 5);
    const std::string path = dir.file("images-00000.npy");
    write_ragged(Storage::kNpy, path, 3, s, s.bytes.size() * 2);
    const char* code = R"PY(
import sys
import numpy as np
path, n, total, first_h, first_w, last_byte = sys.argv[1], *map(int, sys.argv[2:])
a = np.load(path, mmap_mode="r")
assert a.dtype == np.uint8, a.dtype
assert a.shape == (n,), a.shape
assert int(a.astype(np.int64).sum()) == total
img = a[:first_h * first_w * 3].reshape(first_h, first_w, 3)
assert img.shape == (first_h, first_w, 3)
assert int(a[-1]) == last_byte
)PY";
    CHECK(run_python(dir, code,
                     path + " " + std::to_string(s.bytes.size()) + " " + std::to_string(s.sum) +
                         " " + std::to_string(s.heights[0]) + " " + std::to_string(s.widths[0]) +
                         " " + std::to_string(s.bytes.back())) == 0);
  }
}
