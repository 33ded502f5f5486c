// HDF5 shards: write → locate → read, fixed and ragged; interop with h5py; chunked + deflate
// datasets other tools write; bad files. Without HDF5, hdf5 storage is Unsupported.
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
    const WrittenShard w(Storage::kHdf5, "good.h5", {4, 4, 3}, 6, 5, 6);
    const std::string bytes = read_all(w.path);
    const ShardLocation loc = dscache::locate_shard(Storage::kHdf5, w.path, w.shape);

    // An HDF5 file without `images`, and one whose `images` is int16.
    const std::string no_images = w.dir.file("no_images.h5");
    const std::string int16 = w.dir.file("int16.h5");
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
    const std::vector<BadShard> cases = {
        {"zero.h5", "", w.shape, "HDF5"},
        {"text.h5", "this is not an HDF5 file\n", w.shape, "not an HDF5 file"},
        {"npy.h5", read_all(w.dir.file("good.h5")).substr(0, 0) + "\x93NUMPY", w.shape, "HDF5"},
        {"truncated.h5", bytes.substr(0, loc.data_offset + 10), w.shape, ""},
        {"wrong_shape.h5", bytes, SampleShape{4, 4, 1}, "expected (n, 4, 4, 1)"},
    };
    check_bad_shards(Storage::kHdf5, w.dir, cases);
    expect_path_error([&] { dscache::locate_shard(Storage::kHdf5, no_images, w.shape); },
                      ErrorKind::kCorruption, no_images, "no dataset 'images'");
    expect_path_error([&] { dscache::locate_shard(Storage::kHdf5, int16, w.shape); },
                      ErrorKind::kCorruption, int16, "uint8");
  }

  TEST_CASE("hdf5: the library reads back images, labels, layout and offset") {
    const uint64_t n = 7;
    const WrittenShard w(Storage::kHdf5, "images-00000.h5", {5, 6, 3}, n, 77, 100);
    const ShardLocation loc = dscache::locate_shard(Storage::kHdf5, w.path, w.shape);

    hid_t f = H5Fopen(w.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(f >= 0);
    hid_t images = H5Dopen2(f, "images", H5P_DEFAULT);
    hid_t labels = H5Dopen2(f, "labels", H5P_DEFAULT);
    REQUIRE(images >= 0);
    REQUIRE(labels >= 0);
    std::vector<uint8_t> got(w.s.bytes.size());
    CHECK(H5Dread(images, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()) >= 0);
    CHECK(got == w.s.bytes);
    std::vector<int64_t> got_labels(n);
    CHECK(H5Dread(labels, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, got_labels.data()) >= 0);
    CHECK(got_labels == w.s.labels);

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
    CHECK(dims[1] == w.shape.height);
    CHECK(dims[2] == w.shape.width);
    CHECK(dims[3] == w.shape.channels);
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
    const int fd = ::open(w.path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    std::vector<uint8_t> raw(w.s.bytes.size());
    CHECK(::pread(fd, raw.data(), raw.size(), static_cast<off_t>(offset)) ==
          static_cast<ssize_t>(raw.size()));
    ::close(fd);
    CHECK(raw == w.s.bytes);
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
