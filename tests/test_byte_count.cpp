// parse_byte_count: the one byte-count grammar of `dscache` and `dscache-train`.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "dscache/byte_count.h"
#include "dscache/error.h"

namespace {

using dscache::Error;
using dscache::ErrorKind;
using dscache::parse_byte_count;

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kTiB = uint64_t{1} << 40;

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("byte counts: every unit, and the largest values that fit") {
    struct Case {
      const char* text;
      uint64_t bytes;
    };
    const Case cases[] = {
        {"1", 1},
        {"65536", 65536},
        {"007", 7},
        {"1B", 1},
        {"100B", 100},
        {"1K", kKiB},
        {"1k", kKiB},
        {"3KiB", 3 * kKiB},
        {"512M", 512 * kMiB},
        {"2MiB", 2 * kMiB},
        {"1G", kGiB},
        {"1GiB", kGiB},
        {"4T", 4 * kTiB},
        {"4TiB", 4 * kTiB},
        {"9999999999999999999", 9999999999999999999ull},  // 19 digits: the most taken
        {"9999999999999999999B", 9999999999999999999ull},
        {"16777215T", 16777215 * kTiB},                    // (2^24 - 1) TiB
        {"17179869183G", 17179869183 * kGiB},              // (2^34 - 1) GiB
        {"17592186044415M", 17592186044415 * kMiB},        // (2^44 - 1) MiB
        {"18014398509481983K", 18014398509481983 * kKiB},  // (2^54 - 1) KiB
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      CHECK(parse_byte_count(c.text, "--x") == c.bytes);
    }
  }

  TEST_CASE("byte counts: zero, overflow and garbage are refused, naming the field") {
    const char* bad[] = {
        "",
        "0",
        "0K",
        "00",
        "K",
        "B",
        "KiB",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1 K",
        "1.5G",
        "1e9",
        "0x10",
        "1KB",
        "1kb",
        "1m",
        "1g",
        "1t",
        "1Kib",
        "1KiBs",
        "1GG",
        "1Mi",
        "1iB",
        "G1",
        "1,000",
        "1_000",
        "16777216T",             // 2^64 bytes
        "17179869184G",          // 2^64 bytes
        "17592186044416M",       // 2^64 bytes
        "18014398509481984K",    // 2^64 bytes
        "9999999999999999999K",  // overflows after the unit
        "18446744073709551615",  // 2^64 - 1, but 20 digits: at most 19 are read
        "00000000000000000001",  // 20 digits, small value: refused the same
        "18446744073709551616",  // 2^64
        "99999999999999999999999999",
    };
    for (const char* text : bad) {
      CAPTURE(text);
      try {
        const uint64_t v = parse_byte_count(text, "--shard-size");
        FAIL("accepted as " << v);
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::kInvalidArgument);
        CHECK(e.reason().rfind("--shard-size '" + std::string(text) + "': ", 0) == 0);
        CHECK(e.reason().find("positive byte count") != std::string::npos);
        // The message lists every unit the grammar takes.
        CHECK(e.reason().find("B, K, k, KiB, M, MiB, G, GiB, T, TiB") != std::string::npos);
      }
    }
  }

  TEST_CASE("byte counts: a NUL inside the text is not a unit") {
    const std::string text("1\0G", 3);
    CHECK_THROWS_AS(parse_byte_count(text, "--x"), Error);
    CHECK(parse_byte_count(std::string("1G"), "--x") == kGiB);
  }
}
