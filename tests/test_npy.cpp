// .npy headers: format/parse round trips, hand-built and hostile headers, sizes, a fuzz loop.
// Files (read_npy_header, write_npy_file) and NumPy interop are in test_npy_file.cpp.
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

namespace {

// A header parse must refuse as Corruption, with `reason_part` in its reason.
struct BadHeader {
  const char* name;
  std::string bytes;
  const char* reason_part;
};

// Bad framing (magic, version, header length, truncations), dict syntax and keys.
std::vector<BadHeader> bad_framing_and_keys() {
  const std::string good = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string valid = make_header(1, good);
  std::string long_len = valid;
  long_len[8] = static_cast<char>(0xFF);
  long_len[9] = static_cast<char>(0xFF);
  std::string v2_long = make_header(2, good);
  v2_long[11] = static_cast<char>(0x7F);
  std::string bad_version = valid;
  bad_version[6] = 4;
  std::string bad_minor = valid;
  bad_minor[7] = 1;
  return {
      {"empty", "", "empty"},
      {"bad magic", "\x93NUMPX" + valid.substr(6), "magic"},
      {"not npy at all", "hello world, this is text", "magic"},
      {"truncated magic", valid.substr(0, 4), ""},
      {"truncated before length", valid.substr(0, 9), "truncated"},
      {"v2 truncated length", make_header(2, good).substr(0, 11), "truncated"},
      {"header_len past buffer", long_len, "runs past"},
      {"v2 header_len past buffer", v2_long, "runs past"},
      {"truncated dict", valid.substr(0, 40), "runs past"},
      {"version 4.0", bad_version, "version"},
      {"version 1.1", bad_minor, "version"},
      {"no braces", make_header(1, "'descr': '|u1', 'fortran_order': False, 'shape': (2,)"), ""},
      {"unclosed dict", make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,)"),
       ""},
      {"missing colon", make_header(1, "{'descr' '|u1', 'fortran_order': False, 'shape': (2,)}"),
       "':'"},
      {"double comma", make_header(1, "{'descr': '|u1',, 'fortran_order': False, 'shape': (2,)}"),
       ""},
      {"unquoted key", make_header(1, "{descr: '|u1', 'fortran_order': False, 'shape': (2,)}"), ""},
      {"empty dict", make_header(1, "{}"), "missing key"},
      {"missing shape", make_header(1, "{'descr': '|u1', 'fortran_order': False}"),
       "missing key 'shape'"},
      {"missing descr", make_header(1, "{'fortran_order': False, 'shape': (2,)}"),
       "missing key 'descr'"},
      {"missing fortran_order", make_header(1, "{'descr': '|u1', 'shape': (2,)}"),
       "missing key 'fortran_order'"},
      {"duplicate key",
       make_header(1, "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (2,)}"),
       "duplicate key 'descr'"},
      {"duplicate shape",
       make_header(1, "{'descr': '|u1', 'shape': (1,), 'fortran_order': False, 'shape': (2,)}"),
       "duplicate key 'shape'"},
  };
}

// Bad values: descr, shape and fortran_order, text after the dict, a NUL inside it.
std::vector<BadHeader> bad_values() {
  const std::string good = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }";
  std::string nul_inside = make_header(1, good);
  nul_inside[20] = '\0';
  return {
      {"unknown key",
       make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), 'extra': 1}"),
       "unknown key 'extra'"},
      {"big-endian descr",
       make_header(1, "{'descr': '>u4', 'fortran_order': False, 'shape': (2,)}"), "big-endian"},
      {"object descr", make_header(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,)}"),
       "object"},
      {"unicode descr", make_header(1, "{'descr': '<U10', 'fortran_order': False, 'shape': (2,)}"),
       "unsupported descr"},
      {"complex descr", make_header(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,)}"),
       "unsupported descr"},
      {"structured descr",
       make_header(1, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,)}"),
       "structured"},
      {"negative dim", make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (-1, 3)}"),
       "negative"},
      {"dim 2^64",
       make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (18446744073709551616,)}"),
       "64 bits"},
      {"product overflows",
       make_header(1,
                   "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296)}"),
       "overflows"},
      {"bytes overflow",
       make_header(1, "{'descr': '<u8', 'fortran_order': False, 'shape': (2305843009213693952,)}"),
       "overflows"},
      {"float dim", make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2.5,)}"),
       ""},
      {"hex dim", make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (0x10,)}"), ""},
      {"shape not a tuple",
       make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (5)}"), "tuple"},
      {"shape is a list", make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': [5]}"),
       "tuple"},
      {"shape is an int", make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': 5}"),
       "tuple"},
      {"unclosed shape", make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (5,"),
       ""},
      {"unterminated string", make_header(1, "{'descr': '|u1", false), "unterminated"},
      {"unterminated key", make_header(1, "{'descr", false), "unterminated"},
      {"newline in string",
       make_header(1, "{'des\ncr': '|u1', 'fortran_order': False, 'shape': (2,)}"), "unterminated"},
      {"escape in string",
       make_header(1, "{'descr': '|u\\1', 'fortran_order': False, 'shape': (2,)}"), "escape"},
      {"mismatched quotes",
       make_header(1, "{'descr\": '|u1', 'fortran_order': False, 'shape': (2,)}"), ""},
      {"fortran_order 0", make_header(1, "{'descr': '|u1', 'fortran_order': 0, 'shape': (2,)}"),
       "fortran_order"},
      {"fortran_order lowercase",
       make_header(1, "{'descr': '|u1', 'fortran_order': false, 'shape': (2,)}"), "fortran_order"},
      {"fortran_order string",
       make_header(1, "{'descr': '|u1', 'fortran_order': 'False', 'shape': (2,)}"),
       "fortran_order"},
      {"fortran_order Truex",
       make_header(1, "{'descr': '|u1', 'fortran_order': Truex, 'shape': (2,)}"), "fortran_order"},
      {"text after dict", make_header(1, good + " junk"), "after"},
      {"NUL inside dict", nul_inside, ""},
      {"descr not a string", make_header(1, "{'descr': 1, 'fortran_order': False, 'shape': (2,)}"),
       "descr"},
  };
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("format then parse round-trips every descr and many shapes") {
    const std::vector<std::vector<uint64_t>> shapes = {
        {},
        {0},
        {5},
        {1, 2, 3},
        {2, 3, 4, 5},
        {0, 224, 224, 3},
        {4294967296ULL, 3},
        std::vector<uint64_t>(32, 1),
        {60000, 28, 28, 1},
    };
    for (const char* descr : kDescrs) {
      for (const auto& shape : shapes) {
        CAPTURE(descr);
        CAPTURE(shape_str(shape));
        const std::string h = dscache::format_npy_header(descr, shape);
        CHECK(h.size() % 64 == 0);
        CHECK(h.back() == '\n');
        CHECK(h[6] == 1);  // v1.0: these dicts are tiny
        const NpyHeader p = parse(h);
        CHECK(p.major == 1);
        CHECK(p.minor == 0);
        CHECK(p.descr == descr);
        CHECK_FALSE(p.fortran_order);
        CHECK(p.shape == shape);
        CHECK(p.data_offset == h.size());
      }
    }
  }

  TEST_CASE("format writes NumPy's dict text; a one-element shape is (5,)") {
    struct Case {
      std::vector<uint64_t> shape;
      const char* text;
    };
    const Case cases[] = {
        {{5}, "'shape': (5,)"},
        {{}, "'shape': ()"},
        {{2, 3}, "'shape': (2, 3)"},
        {{7, 32, 32, 3}, "'shape': (7, 32, 32, 3)"},
    };
    for (const Case& c : cases) {
      const std::string h = dscache::format_npy_header("|u1", c.shape);
      CAPTURE(h);
      CHECK(h.find(c.text) != std::string::npos);
      CHECK(h.find("{'descr': '|u1', 'fortran_order': False, ") == 10);
      // Padding is spaces only, then one newline.
      const size_t close = h.find('}');
      REQUIRE(close != std::string::npos);
      CHECK(h.find_first_not_of(' ', close + 1) == h.size() - 1);
    }
  }

  TEST_CASE("min_total pads to a fixed size; v2 only when the header needs it") {
    struct Case {
      size_t min_total;
      size_t expected_size;
      int major;
    };
    const Case cases[] = {
        {0, 128, 1},       {1, 128, 1},       {128, 128, 1},     {129, 192, 1},
        {1000, 1024, 1},   {65536, 65536, 1},  // the largest v1 header: length field 65526
        {65537, 65600, 2}, {65600, 65600, 2}, {65601, 65664, 2}, {200000, 200000, 2},
    };
    for (const Case& c : cases) {
      CAPTURE(c.min_total);
      const std::string h = dscache::format_npy_header("|u1", {1000, 224, 224, 3}, c.min_total);
      CHECK(h.size() == c.expected_size);
      CHECK(h[6] == c.major);
      const NpyHeader p = parse(h);
      CHECK(p.major == c.major);
      CHECK(p.data_offset == h.size());
      CHECK(p.shape == std::vector<uint64_t>{1000, 224, 224, 3});
    }
    // A header sized for a capacity can be rewritten with any smaller count at the same length.
    const std::string big = dscache::format_npy_header("|u1", {99999999999ULL, 64, 64, 3});
    for (uint64_t n : {0ULL, 1ULL, 12345ULL, 99999999999ULL}) {
      CHECK(dscache::format_npy_header("|u1", {n, 64, 64, 3}, big.size()).size() == big.size());
    }
  }

  TEST_CASE("format rejects descrs the parser would refuse") {
    for (const char* descr : {">u4", "|O", "<U10", "", "u1", "<c8"}) {
      CAPTURE(descr);
      CHECK_THROWS_AS(dscache::format_npy_header(descr, {1}), Error);
    }
  }

  TEST_CASE("hand-built headers that are valid: v1/v2/v3, any key order, spacing, quotes") {
    struct Case {
      int major;
      const char* dict;
      const char* descr;
      bool fortran;
      std::vector<uint64_t> shape;
    };
    const Case cases[] = {
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", "|u1", false, {2, 3}},
        {2, "{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }", "<i8", false, {7}},
        {3, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "<f4", false, {}},
        {1, "{'shape': (4, 5), 'descr': '<u8', 'fortran_order': True}", "<u8", true, {4, 5}},
        {1,
         "{\"fortran_order\": False, \"shape\": (1,2,3,), \"descr\": \"|b1\"}",
         "|b1",
         false,
         {1, 2, 3}},
        {1,
         "  {  'descr' :'<u2' ,\n 'fortran_order':False,'shape':( 9 , ) , }  ",
         "<u2",
         false,
         {9}},
        {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3L, 4L), }", "<i4", false, {3, 4}},
        {2,
         "{'descr': '|i1', 'fortran_order': False, 'shape': (18446744073709551615,), }",
         "|i1",
         false,
         {18446744073709551615ULL}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.dict);
      const std::string h = make_header(c.major, c.dict);
      const NpyHeader p = parse(h);
      CHECK(p.major == c.major);
      CHECK(p.descr == c.descr);
      CHECK(p.fortran_order == c.fortran);
      CHECK(p.shape == c.shape);
      CHECK(p.data_offset == h.size());
      // The bytes after the header are not part of it.
      CHECK(parse(h + std::string(100, '\xff')).data_offset == h.size());
    }
  }

  TEST_CASE("malformed and hostile headers are rejected as Corruption") {
    std::vector<BadHeader> cases = bad_framing_and_keys();
    for (BadHeader& c : bad_values()) cases.push_back(std::move(c));
    for (const BadHeader& c : cases) {
      CAPTURE(c.name);
      try {
        parse(c.bytes);
        FAIL("accepted: " << c.name);
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::kCorruption);
        CHECK(e.path() == "x.npy");
        CHECK(std::string(e.what()).find("Corruption: x.npy: ") == 0);
        CAPTURE(e.what());
        CHECK(std::string(e.reason()).find(c.reason_part) != std::string::npos);
      }
    }
  }

  TEST_CASE("dimension count: 32 is accepted, 33 is rejected") {
    for (size_t ndim : {31, 32, 33, 1000}) {
      std::string shape = "(";
      for (size_t i = 0; i < ndim; ++i) shape += "1, ";
      const std::string h =
          make_header(1, "{'descr': '|u1', 'fortran_order': False, 'shape': " + shape + ")}");
      CAPTURE(ndim);
      if (ndim <= 32) {
        CHECK(parse(h).shape.size() == ndim);
      } else {
        CHECK_THROWS_WITH_AS(parse(h), doctest::Contains("more than 32 dimensions"), Error);
      }
    }
  }

  TEST_CASE("item_size, element_count and data_bytes") {
    struct Case {
      const char* descr;
      std::vector<uint64_t> shape;
      uint64_t item, count, bytes;
    };
    const Case cases[] = {
        {"|u1", {2, 3, 4}, 1, 24, 24}, {"<i8", {5}, 8, 5, 40},   {"<f2", {3, 3}, 2, 9, 18},
        {"<u4", {}, 4, 1, 4},          {"<f8", {0, 7}, 8, 0, 0}, {"|b1", {10}, 1, 10, 10},
    };
    for (const Case& c : cases) {
      NpyHeader h;
      h.descr = c.descr;
      h.shape = c.shape;
      CAPTURE(c.descr);
      CHECK(h.item_size() == c.item);
      CHECK(h.element_count() == c.count);
      CHECK(h.data_bytes() == c.bytes);
    }
    NpyHeader big;
    big.descr = "<u8";
    big.shape = {1ULL << 62};
    CHECK(big.element_count() == (1ULL << 62));
    CHECK_THROWS_AS(big.data_bytes(), Error);
  }

  TEST_CASE("fuzz: 20000 mutations of a valid header parse or throw dscache::Error") {
    std::mt19937_64 rng(0x5EED);
    const std::string base_v1 = dscache::format_npy_header("|u1", {12, 32, 32, 3});
    const std::string base_v2 =
        make_header(2, "{'shape': (3L, 4), \"descr\": '<f8', 'fortran_order': True}");
    const std::string alphabet =
        "{}()[]',:\" -0123456789TrueFalsedescrshapefortran_order<>|uifbLO\n\x93\xff";
    size_t parsed = 0, rejected = 0;
    for (int iter = 0; iter < 20000; ++iter) {
      std::string h = (iter % 4 == 0) ? base_v2 : base_v1;
      const int mutations = 1 + static_cast<int>(rng() % 4);
      for (int m = 0; m < mutations; ++m) {
        const size_t pos = h.empty() ? 0 : rng() % h.size();
        switch (rng() % 6) {
          case 0:  // flip a byte
            if (!h.empty()) h[pos] = static_cast<char>(rng());
            break;
          case 1:  // replace with a syntax-relevant character
            if (!h.empty()) h[pos] = alphabet[rng() % alphabet.size()];
            break;
          case 2:  // truncate
            h.resize(pos);
            break;
          case 3:  // insert
            h.insert(pos, 1, alphabet[rng() % alphabet.size()]);
            break;
          case 4:  // delete a byte
            if (!h.empty()) h.erase(pos, 1);
            break;
          case 5:  // corrupt the length field
            if (h.size() > 9) h[8 + rng() % 2] = static_cast<char>(rng());
            break;
        }
      }
      try {
        const NpyHeader p = dscache::parse_npy_header(h.data(), h.size(), "fuzz.npy");
        ++parsed;
        CHECK(p.data_offset <= h.size());
        CHECK(p.shape.size() <= 32);
        CHECK_NOTHROW(p.data_bytes());  // accepted headers never overflow
      } catch (const Error& e) {
        ++rejected;
        if (e.kind() != ErrorKind::kCorruption) FAIL("unexpected kind: " << e.what());
      } catch (const std::exception& e) {
        FAIL("non-dscache exception: " << e.what());
      }
    }
    CHECK(parsed + rejected == 20000);
    CHECK(parsed > 100);     // the mutations must not all break the header...
    CHECK(rejected > 1000);  // ...nor all miss it
  }

}  // TEST_SUITE
