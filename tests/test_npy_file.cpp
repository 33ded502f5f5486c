// .npy files: read_npy_header on missing, truncated and hostile files, write_npy_file, and
// NumPy interop both ways (numpy loads what we wrote; we parse what np.save wrote).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/npy.h"
#include "npy_fixtures.h"
#include "test_util.h"

// The library's names the tests use unqualified come with npy_fixtures.h.
using namespace dscache::test;

TEST_SUITE("unit") {
  TEST_CASE("read_npy_header: missing file, truncated file, hostile length") {
    TempDir dir;
    CHECK_THROWS_WITH_AS(dscache::read_npy_header(dir.file("nope.npy")),
                         doctest::Contains("NotFound"), Error);
    const std::string h = dscache::format_npy_header("<i8", {4});
    struct Case {
      const char* name;
      std::string bytes;
      ErrorKind kind;
    };
    std::string huge_len = dscache::format_npy_header("<i8", {4});
    huge_len[6] = 2;  // claims v2: the length now reads as 4 bytes, past the file
    const Case cases[] = {
        {"zero.npy", "", ErrorKind::kCorruption},
        {"short.npy", h.substr(0, 30), ErrorKind::kCorruption},
        {"magic_only.npy", h.substr(0, 8), ErrorKind::kCorruption},
        {"huge.npy", huge_len, ErrorKind::kCorruption},
        {"text.npy", "just some text\n", ErrorKind::kCorruption},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      write_all(dir.file(c.name), c.bytes);
      try {
        dscache::read_npy_header(dir.file(c.name));
        FAIL("accepted");
      } catch (const Error& e) {
        CHECK(e.kind() == c.kind);
        CHECK(e.path() == dir.file(c.name));
      }
    }
    // The header alone is enough: read_npy_header does not check the data size.
    write_all(dir.file("header_only.npy"), h);
    const NpyHeader p = dscache::read_npy_header(dir.file("header_only.npy"));
    CHECK(p.shape == std::vector<uint64_t>{4});
    CHECK(p.data_offset == h.size());
  }

  TEST_CASE("write_npy_file writes header + data atomically and checks the size") {
    TempDir dir;
    const std::vector<int64_t> values = {-2, -1, 0, 1, 2, 1LL << 40};
    const std::string path = dir.file("labels.npy");
    dscache::write_npy_file(path, "<i8", {values.size()}, values.data(), values.size() * 8);
    const std::string bytes = read_all(path);
    const NpyHeader h = dscache::read_npy_header(path);
    CHECK(h.descr == "<i8");
    CHECK(h.data_offset + h.data_bytes() == bytes.size());
    CHECK(std::memcmp(bytes.data() + h.data_offset, values.data(), values.size() * 8) == 0);
    CHECK_THROWS_WITH_AS(
        dscache::write_npy_file(dir.file("bad.npy"), "<i8", {7}, values.data(), 48),
        doctest::Contains("InvalidArgument"), Error);
    CHECK(::access(dir.file("bad.npy").c_str(), F_OK) != 0);
    // No temp files are left behind.
    CHECK(std::system(
              ("test -z \"$(ls -A '" + dir.path() + "' | grep -v '^labels.npy$')\"").c_str()) == 0);
  }

  TEST_CASE("numpy loads what write_npy_file wrote (mmap_mode='r')") {
    TempDir dir;
    // Element i holds i % 7 (i % 2 for bool), so the expected sum is easy to state.
    const uint16_t kHalf[7] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600};
    struct Case {
      const char* descr;
      std::vector<uint64_t> shape;
    };
    const Case cases[] = {
        {"|u1", {3, 4, 5, 3}}, {"<u1", {7}},    {"|i1", {2, 9}},     {"|b1", {5, 5}},
        {"<u2", {11}},         {"<i2", {3, 3}}, {"<u4", {1, 1, 13}}, {"<i4", {6}},
        {"<u8", {2, 2, 2}},    {"<i8", {17}},   {"<f2", {8}},        {"<f4", {4, 4}},
        {"<f8", {3}},          {"<f8", {}},
    };
    std::string args;
    int i = 0;
    for (const Case& c : cases) {
      NpyHeader h;
      h.descr = c.descr;
      h.shape = c.shape;
      const uint64_t n = h.element_count();
      const size_t item = h.item_size();
      std::vector<unsigned char> data(n * item);
      uint64_t sum = 0;
      for (uint64_t e = 0; e < n; ++e) {
        const uint64_t v = h.descr == "|b1" ? e % 2 : e % 7;
        sum += v;
        unsigned char* p = data.data() + e * item;
        if (h.descr == "<f2") {
          std::memcpy(p, &kHalf[v], 2);
        } else if (h.descr == "<f4") {
          const float f = static_cast<float>(v);
          std::memcpy(p, &f, 4);
        } else if (h.descr == "<f8") {
          const double d = static_cast<double>(v);
          std::memcpy(p, &d, 8);
        } else {
          std::memcpy(p, &v, item);  // little-endian host
        }
      }
      const std::string name = "a" + std::to_string(i++) + ".npy";
      dscache::write_npy_file(dir.file(name), c.descr, c.shape, data.data(), data.size());
      std::string shape = "x";
      for (uint64_t d : c.shape) shape += std::to_string(d) + "x";
      args += " '" + dir.file(name) + "' '" + c.descr + "' " + shape + " " + std::to_string(sum);
    }
    const char* code = R"PY(
import sys
import numpy as np
a = sys.argv[1:]
for k in range(0, len(a), 4):
    path, descr, shape, total = a[k], a[k + 1], a[k + 2], int(a[k + 3])
    shape = tuple(int(x) for x in shape.split('x') if x)
    arr = np.load(path, mmap_mode='r')
    assert arr.dtype == np.dtype(descr), (path, arr.dtype, descr)
    assert arr.shape == shape, (path, arr.shape, shape)
    assert arr.flags.c_contiguous
    got = int(np.asarray(arr).astype(np.float64).sum())
    assert got == total, (path, got, total)
print("numpy read", len(a) // 4, "files")
)PY";
    CHECK(run_python(dir, code, args) == 0);
  }

  TEST_CASE("headers numpy itself wrote (np.save, format 1.0/2.0/3.0) parse correctly") {
    TempDir dir;
    struct Case {
      const char* dtype;  // numpy dtype text
      const char* descr;  // what the header must say
      std::vector<uint64_t> shape;
      const char* version;  // None lets numpy choose
    };
    const Case cases[] = {
        {"u1", "|u1", {2, 3, 4, 3}, "None"},
        {"<i8", "<i8", {7}, "None"},
        {"<u8", "<u8", {}, "None"},
        {"<f4", "<f4", {3, 0, 2}, "None"},
        {"<f2", "<f2", {1, 1, 1, 1, 1}, "None"},
        {"?", "|b1", {4, 4}, "None"},
        {"<i2", "<i2", {1000}, "None"},
        {"u1", "|u1", {0, 28, 28, 1}, "None"},
        {"<u4", "<u4", {5, 6}, "(2, 0)"},
        {"<f8", "<f8", {9}, "(3, 0)"},
        {"u1", "|u1", {3, 2, 2, 3}, "(1, 0)"},
    };
    std::string code = "import numpy as np\nfrom numpy.lib import format as F\n";
    int i = 0;
    for (const Case& c : cases) {
      std::string shape = "(";
      for (uint64_t d : c.shape) shape += std::to_string(d) + ",";
      shape += ")";
      code += "a = np.arange(int(np.prod(" + shape + "))).astype('" + c.dtype + "').reshape(" +
              shape + ")\n";
      code += "with open('" + dir.file("np" + std::to_string(i++) + ".npy") +
              "', 'wb') as f: F.write_array(f, a, version=" + c.version + ")\n";
    }
    REQUIRE(run_python(dir, code) == 0);
    i = 0;
    for (const Case& c : cases) {
      const std::string path = dir.file("np" + std::to_string(i++) + ".npy");
      CAPTURE(path);
      const NpyHeader h = dscache::read_npy_header(path);
      CHECK(h.descr == c.descr);
      CHECK(h.shape == c.shape);
      CHECK_FALSE(h.fortran_order);
      CHECK(h.data_offset % 16 == 0);
      CHECK(h.data_offset + h.data_bytes() == read_all(path).size());
      if (std::string(c.version) == "(2, 0)") CHECK(h.major == 2);
      if (std::string(c.version) == "(3, 0)") CHECK(h.major == 3);
      if (std::string(c.version) != "None") continue;
      CHECK(h.major == 1);
    }
  }

}  // TEST_SUITE
