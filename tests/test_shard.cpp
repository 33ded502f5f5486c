// Shards: write → locate → read for npy and HDF5, interop with numpy/h5py, and bad files.
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

namespace {

using dscache::Error;
using dscache::ErrorKind;
using dscache::SampleShape;
using dscache::ShardLocation;
using dscache::Storage;

using namespace dscache::test;

struct Samples {
  std::vector<uint8_t> bytes;  // n * shape.bytes(), HWC per sample
  std::vector<int64_t> labels;
  uint64_t sum = 0;  // of every byte, for the Python checks
};

Samples random_samples(SampleShape shape, uint64_t n, uint64_t seed) {
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
dscache::ShardEntry write_shard(Storage storage, const std::string& path, SampleShape shape,
                                const Samples& s, uint64_t capacity) {
  auto w = dscache::ShardWriter::create(storage, path, shape, capacity);
  for (size_t i = 0; i < s.labels.size(); ++i) {
    w->append(s.bytes.data() + i * shape.bytes(), s.labels[i]);
    CHECK(w->count() == i + 1);
  }
  return w->commit();
}

struct StorageCase {
  Storage storage;
  const char* name;
};

std::vector<StorageCase> storage_cases() {
  std::vector<StorageCase> v = {{Storage::kNpy, "npy"}};
  if (dscache::hdf5_supported()) v.push_back({Storage::kHdf5, "hdf5"});
  return v;
}

std::string shape_args(SampleShape s) {
  return std::to_string(s.height) + " " + std::to_string(s.width) + " " +
         std::to_string(s.channels);
}

// expect_error, and the Error's path() is `path` and its reason() contains `reason_part`.
template <typename F>
void expect_path_error(F&& f, ErrorKind kind, const std::string& path,
                       const std::string& reason_part = "") {
  const Error e = expect_error(f, kind, path);
  CHECK(e.path() == path);
  CHECK(e.reason().find(reason_part) != std::string::npos);
}

// Ragged samples of varied sizes, written back to back.
struct RaggedSamples {
  std::vector<uint8_t> bytes;  // all samples back to back
  std::vector<uint32_t> heights, widths;
  std::vector<uint64_t> offsets;  // where each starts in `bytes`
  std::vector<int64_t> labels;
  uint64_t sum = 0;
};

RaggedSamples random_ragged(uint32_t channels, uint64_t n, uint64_t seed) {
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

dscache::ShardEntry write_ragged(Storage storage, const std::string& path, uint32_t channels,
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
}  // namespace

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
    TempDir dir;
    const SampleShape shape{6, 5, 3};
    const Samples s = random_samples(shape, 9, 42);
    const std::string path = dir.file("images-00000.npy");
    write_shard(Storage::kNpy, path, shape, s, 50);
    const char* code = R"PY(
import sys
import numpy as np
path, n, h, w, c, total = sys.argv[1], *map(int, sys.argv[2:])
a = np.load(path, mmap_mode="r")
assert a.dtype == np.uint8, a.dtype
assert a.shape == (n, h, w, c), a.shape
assert int(a.astype(np.int64).sum()) == total, (int(a.astype(np.int64).sum()), total)
)PY";
    CHECK(run_python(dir, code, path + " 9 " + shape_args(shape) + " " + std::to_string(s.sum)) ==
          0);
  }

  TEST_CASE("bad shard files are Corruption naming the file; a missing one is NotFound") {
    TempDir dir;
    const SampleShape shape{4, 4, 3};
    const Samples s = random_samples(shape, 5, 9);
    const std::string good = dir.file("good.npy");
    write_shard(Storage::kNpy, good, shape, s, 5);
    const std::string bytes = read_all(good);

    struct Case {
      const char* name;
      std::string content;
      SampleShape shape;
      std::string reason_part;
    };
    const std::string other_dtype_path = dir.file("i8.npy");
    std::vector<int64_t> i8(5 * 4 * 4 * 3, 1);
    dscache::write_npy_file(other_dtype_path, "<i8", {5, 4, 4, 3}, i8.data(), i8.size() * 8);
    std::vector<uint8_t> flat(240, 1);
    dscache::write_npy_file(dir.file("flat.npy"), "|u1", {240}, flat.data(), flat.size());
    const Case cases[] = {
        {"truncated.npy", bytes.substr(0, bytes.size() - 10), shape,
         ("file holds " + std::to_string(bytes.size() - 10) + " bytes, header says " +
          std::to_string(bytes.size()))},
        {"trailing.npy", bytes + "garbage", shape,
         ("file holds " + std::to_string(bytes.size() + 7) + " bytes, header says " +
          std::to_string(bytes.size()))},
        {"wrong_shape.npy", bytes, SampleShape{4, 3, 3}, "expected (n, 4, 3, 3)"},
        {"wrong_channels.npy", bytes, SampleShape{4, 4, 1}, "shape is (5, 4, 4, 3)"},
        {"zero.npy", "", shape, ""},
        {"header_only.npy", bytes.substr(0, 40), shape, ""},
        {"text.npy", "hello\n", shape, "magic"},
        {"i8.npy", read_all(other_dtype_path), shape, "dtype"},
        {"flat.npy", read_all(dir.file("flat.npy")), shape, "shape is (240,)"},
    };
    for (const Case& c : cases) {
      const std::string name = c.name;
      CAPTURE(name);
      const std::string path = dir.file(c.name);
      write_all(path, c.content);
      expect_path_error([&] { dscache::locate_shard(Storage::kNpy, path, c.shape); },
                        ErrorKind::kCorruption, path, c.reason_part);
    }
    for (const StorageCase& sc : storage_cases()) {
      const std::string missing = dir.file(std::string("missing.") + sc.name);
      expect_path_error([&] { dscache::locate_shard(sc.storage, missing, shape); },
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
#ifdef DSCACHE_HAVE_HDF5

  TEST_CASE("hdf5 ragged: h5py reads images (bytes,), labels and channel_order") {
    TempDir dir;
    const RaggedSamples s = random_ragged(1, 6, 12);
    const std::string path = dir.file("images-00000.h5");
    write_ragged(Storage::kHdf5, path, 1, s, s.bytes.size());
    const ShardLocation loc = dscache::locate_ragged_shard(Storage::kHdf5, path);
    std::string labels;
    for (int64_t l : s.labels) labels += (labels.empty() ? "" : ",") + std::to_string(l);
    const char* code = R"PY(
import sys
import h5py
import numpy as np
path, labels = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
n, total, offset = map(int, sys.argv[3:])
with h5py.File(path, "r") as f:
    im = f["images"]
    assert im.shape == (n,), im.shape
    assert im.dtype == np.uint8, im.dtype
    assert im.chunks is None
    assert im.id.get_offset() == offset, (im.id.get_offset(), offset)
    assert int(im[...].astype(np.int64).sum()) == total
    assert f["labels"].dtype == np.int64
    assert list(f["labels"][...]) == labels
    assert im.attrs["channel_order"] == "L"
)PY";
    CHECK(run_python(dir, code,
                     path + " " + labels + " " + std::to_string(s.bytes.size()) + " " +
                         std::to_string(s.sum) + " " + std::to_string(loc.data_offset)) == 0);
  }

  TEST_CASE("hdf5 ragged: a rebuild is byte-identical (no object times)") {
    TempDir dir;
    const RaggedSamples s = random_ragged(3, 5, 2);
    write_ragged(Storage::kHdf5, dir.file("a.h5"), 3, s, s.bytes.size());
    ::usleep(1100 * 1000);  // object times have 1 s resolution: a second later they would differ
    write_ragged(Storage::kHdf5, dir.file("b.h5"), 3, s, s.bytes.size());
    CHECK(read_all(dir.file("a.h5")) == read_all(dir.file("b.h5")));
  }

  TEST_CASE("hdf5 ragged: a chunked + deflate 1-d images dataset is read through the library") {
    TempDir dir;
    const RaggedSamples s = random_ragged(3, 8, 4);
    const std::string path = dir.file("chunked.h5");
    write_chunked_images_h5(path, {s.bytes.size()}, {64}, s.bytes.data());
    const ShardLocation loc = dscache::locate_ragged_shard(Storage::kHdf5, path);
    CHECK_FALSE(loc.contiguous);
    CHECK(loc.count == s.bytes.size());
    for (size_t i = 0; i < s.labels.size(); ++i) {
      const uint64_t n = uint64_t{s.heights[i]} * s.widths[i] * 3;
      std::vector<uint8_t> out(n);
      dscache::read_shard_bytes(Storage::kHdf5, path, loc, s.offsets[i], n, out.data());
      CHECK(std::memcmp(out.data(), s.bytes.data() + s.offsets[i], n) == 0);
    }
  }
  TEST_CASE("hdf5: bad files are Corruption naming the file") {
    TempDir dir;
    const SampleShape shape{4, 4, 3};
    const Samples s = random_samples(shape, 6, 5);
    const std::string good = dir.file("good.h5");
    write_shard(Storage::kHdf5, good, shape, s, 6);
    const std::string bytes = read_all(good);
    const ShardLocation loc = dscache::locate_shard(Storage::kHdf5, good, shape);

    // An HDF5 file without `images`, and one whose `images` is int16.
    const std::string no_images = dir.file("no_images.h5");
    const std::string int16 = dir.file("int16.h5");
    {
      hid_t f = H5Fcreate(no_images.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
      REQUIRE(f >= 0);
      H5Fclose(f);
      f = H5Fcreate(int16.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
      const hsize_t dims[4] = {2, 4, 4, 3};
      hid_t sp = H5Screate_simple(4, dims, nullptr);
      hid_t d = H5Dcreate2(f, "images", H5T_STD_I16LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      REQUIRE(d >= 0);
      H5Dclose(d);
      H5Sclose(sp);
      H5Fclose(f);
    }
    struct Case {
      const char* name;
      std::string content;  // empty name content means "use the file as is"
      SampleShape shape;
      const char* reason_part;
    };
    const Case cases[] = {
        {"zero.h5", "", shape, "HDF5"},
        {"text.h5", "this is not an HDF5 file\n", shape, "not an HDF5 file"},
        {"npy.h5", read_all(dir.file("good.h5")).substr(0, 0) + "\x93NUMPY", shape, "HDF5"},
        {"truncated.h5", bytes.substr(0, loc.data_offset + 10), shape, ""},
        {"wrong_shape.h5", bytes, SampleShape{4, 4, 1}, "expected (n, 4, 4, 1)"},
    };
    for (const Case& c : cases) {
      const std::string name = c.name;
      CAPTURE(name);
      const std::string path = dir.file(c.name);
      write_all(path, c.content);
      expect_path_error([&] { dscache::locate_shard(Storage::kHdf5, path, c.shape); },
                        ErrorKind::kCorruption, path, c.reason_part);
    }
    expect_path_error([&] { dscache::locate_shard(Storage::kHdf5, no_images, shape); },
                      ErrorKind::kCorruption, no_images, "no dataset 'images'");
    expect_path_error([&] { dscache::locate_shard(Storage::kHdf5, int16, shape); },
                      ErrorKind::kCorruption, int16, "uint8");
  }

  TEST_CASE("hdf5: the library reads back images, labels, layout and offset") {
    TempDir dir;
    const SampleShape shape{5, 6, 3};
    const uint64_t n = 7;
    const Samples s = random_samples(shape, n, 77);
    const std::string path = dir.file("images-00000.h5");
    write_shard(Storage::kHdf5, path, shape, s, 100);
    const ShardLocation loc = dscache::locate_shard(Storage::kHdf5, path, shape);

    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(f >= 0);
    hid_t images = H5Dopen2(f, "images", H5P_DEFAULT);
    hid_t labels = H5Dopen2(f, "labels", H5P_DEFAULT);
    REQUIRE(images >= 0);
    REQUIRE(labels >= 0);
    std::vector<uint8_t> got(s.bytes.size());
    CHECK(H5Dread(images, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()) >= 0);
    CHECK(got == s.bytes);
    std::vector<int64_t> got_labels(n);
    CHECK(H5Dread(labels, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, got_labels.data()) >= 0);
    CHECK(got_labels == s.labels);

    hid_t type = H5Dget_type(images);
    CHECK(H5Tequal(type, H5T_STD_U8LE) > 0);
    H5Tclose(type);
    type = H5Dget_type(labels);
    CHECK(H5Tequal(type, H5T_STD_I64LE) > 0);
    H5Tclose(type);
    hid_t space = H5Dget_space(images);
    hsize_t dims[4] = {};
    CHECK(H5Sget_simple_extent_dims(space, dims, nullptr) == 4);
    CHECK(dims[0] == n);
    CHECK(dims[1] == shape.height);
    CHECK(dims[2] == shape.width);
    CHECK(dims[3] == shape.channels);
    H5Sclose(space);
    hid_t dcpl = H5Dget_create_plist(images);
    CHECK(H5Pget_layout(dcpl) == H5D_CONTIGUOUS);
    H5D_alloc_time_t alloc;
    CHECK(H5Pget_alloc_time(dcpl, &alloc) >= 0);
    CHECK(alloc == H5D_ALLOC_TIME_EARLY);
    H5Pclose(dcpl);
    const haddr_t offset = H5Dget_offset(images);
    CHECK(offset == loc.data_offset);

    // The attribute: a string "RGB".
    hid_t attr = H5Aopen(images, "channel_order", H5P_DEFAULT);
    REQUIRE(attr >= 0);
    hid_t atype = H5Aget_type(attr);
    CHECK(H5Tget_class(atype) == H5T_STRING);
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5T_CSET_UTF8);
    char* order = nullptr;
    CHECK(H5Aread(attr, mem, &order) >= 0);
    REQUIRE(order != nullptr);
    CHECK(std::string(order) == "RGB");
    H5free_memory(order);
    H5Tclose(mem);
    H5Tclose(atype);
    H5Aclose(attr);
    H5Dclose(labels);
    H5Dclose(images);
    H5Fclose(f);

    // pread at H5Dget_offset gives the samples: what the mmap reader relies on.
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    std::vector<uint8_t> raw(s.bytes.size());
    CHECK(::pread(fd, raw.data(), raw.size(), static_cast<off_t>(offset)) ==
          static_cast<ssize_t>(raw.size()));
    ::close(fd);
    CHECK(raw == s.bytes);
  }

  TEST_CASE("hdf5: a chunked + deflate images dataset is located as non-contiguous and read") {
    TempDir dir;
    const SampleShape shape{6, 4, 3};
    const uint64_t n = 11;
    const Samples s = random_samples(shape, n, 3);
    const std::string path = dir.file("chunked.h5");
    write_chunked_images_h5(path, {n, shape.height, shape.width, shape.channels},
                            {3, shape.height, shape.width, shape.channels}, s.bytes.data());
    const ShardLocation loc = dscache::locate_shard(Storage::kHdf5, path, shape);
    CHECK_FALSE(loc.contiguous);
    CHECK(loc.count == n);
    struct Range {
      uint64_t first, n;
    };
    for (const Range r : {Range{0, n}, Range{2, 5}, Range{10, 1}, Range{5, 0}}) {
      CAPTURE(r.first);
      std::vector<uint8_t> out(r.n * shape.bytes() + 1);  // +1: never an empty buffer
      dscache::read_shard_samples(Storage::kHdf5, path, loc, shape, r.first, r.n, out.data());
      CHECK(std::memcmp(out.data(), s.bytes.data() + r.first * shape.bytes(),
                        r.n * shape.bytes()) == 0);
    }
    std::vector<uint8_t> out(shape.bytes() * 2);
    CHECK_THROWS_AS(
        dscache::read_shard_samples(Storage::kHdf5, path, loc, shape, 10, 2, out.data()), Error);
  }

  TEST_CASE("hdf5: h5py reads images, labels and channel_order") {
    TempDir dir;
    struct Case {
      SampleShape shape;
      const char* order;
    };
    for (const Case& c : {Case{{5, 7, 3}, "RGB"}, Case{{9, 8, 1}, "L"}}) {
      const uint64_t n = 6;
      const Samples s = random_samples(c.shape, n, c.shape.bytes());
      const std::string path = dir.file("images-00001.h5");
      write_shard(Storage::kHdf5, path, c.shape, s, 8);
      const ShardLocation loc = dscache::locate_shard(Storage::kHdf5, path, c.shape);
      std::string labels;
      for (int64_t l : s.labels) labels += (labels.empty() ? "" : ",") + std::to_string(l);
      const char* code = R"PY(
import sys
import h5py
import numpy as np
path, order, labels = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
n, h, w, c, total, offset = map(int, sys.argv[4:])
with h5py.File(path, "r") as f:
    im = f["images"]
    assert im.shape == (n, h, w, c), im.shape
    assert im.dtype == np.uint8, im.dtype
    assert im.chunks is None  # contiguous
    assert im.id.get_offset() == offset, (im.id.get_offset(), offset)
    assert int(im[...].astype(np.int64).sum()) == total
    assert f["labels"].dtype == np.int64
    assert list(f["labels"][...]) == labels, list(f["labels"][...])
    got = im.attrs["channel_order"]
    assert got == order, repr(got)
)PY";
      CAPTURE(c.order);
      CHECK(run_python(dir, code,
                       path + " " + c.order + " " + labels + " " + std::to_string(n) + " " +
                           shape_args(c.shape) + " " + std::to_string(s.sum) + " " +
                           std::to_string(loc.data_offset)) == 0);
      ::unlink(path.c_str());
    }
  }

  TEST_CASE("hdf5 is supported in this build") { CHECK(dscache::hdf5_supported()); }
#else
  TEST_CASE("without HDF5, hdf5 storage is Unsupported") {
    TempDir dir;
    CHECK_FALSE(dscache::hdf5_supported());
    CHECK_THROWS_WITH_AS(
        dscache::ShardWriter::create(Storage::kHdf5, dir.file("a.h5"), SampleShape{2, 2, 1}, 1),
        doctest::Contains("Unsupported"), Error);
    CHECK_THROWS_WITH_AS(dscache::locate_shard(Storage::kHdf5, dir.file("a.h5"), {2, 2, 1}),
                         doctest::Contains("Unsupported"), Error);
  }
#endif
}
