// XXH64: published vectors, agreement with libxxhash, streaming == one-shot.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dscache/checksum.h"

#ifdef DSCACHE_TEST_HAVE_LIBXXHASH
#include <xxhash.h>
#endif

namespace {

struct Vector {
  const char* input;
  uint64_t seed;
  uint64_t expected;
};

// Reference values of XXH64 (xxHash 0.8.1); lengths cover the < 4, < 8, < 32 and >= 32 paths.
const Vector kVectors[] = {
    {"", 0, 0xEF46DB3751D8E999ULL},
    {"", 1, 0xD5AFBA1336A3BE4BULL},
    {"", 0x9E3779B185EBCA87ULL, 0x6EC6D05F61C7E7A7ULL},
    {"a", 0, 0xD24EC4F1A98C6E5BULL},
    {"a", 1, 0xDEC2BC81C3CD46C6ULL},
    {"a", 0x9E3779B185EBCA87ULL, 0x727C10E0D238E188ULL},
    {"abc", 0, 0x44BC2CF5AD770999ULL},
    {"abc", 1, 0xBEA9CA8199328908ULL},
    {"abc", 0x9E3779B185EBCA87ULL, 0xA7CB2AAC405E36C7ULL},
    {"message digest", 0, 0x066ED728FCEEB3BEULL},
    {"message digest", 1, 0xCBA434B6417DD0FDULL},
    {"message digest", 0x9E3779B185EBCA87ULL, 0xD35E8898F3FB053BULL},
    {"abcdefghijklmnopqrstuvwxyz", 0, 0xCFE1F278FA89835CULL},
    {"abcdefghijklmnopqrstuvwxyz", 1, 0x58058C6EC112E95EULL},
    {"abcdefghijklmnopqrstuvwxyz", 0x9E3779B185EBCA87ULL, 0x45AF4D06F72114D8ULL},
    {"12345678901234567890123456789012345678901234567890123456789012345678901234567890", 0,
     0xE04A477F19EE145DULL},
    {"12345678901234567890123456789012345678901234567890123456789012345678901234567890", 1,
     0x0B795E8B945F7051ULL},
    {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
     0x9E3779B185EBCA87ULL, 0x81B75E52A1092B10ULL},
    {"The quick brown fox jumps over the lazy dog", 0, 0x0B242D361FDA71BCULL},
    {"The quick brown fox jumps over the lazy dog", 1, 0xDF5091B6DAD2C6DBULL},
    {"The quick brown fox jumps over the lazy dog", 0x9E3779B185EBCA87ULL, 0xB8A8089ADD7E03D9ULL},
};

std::vector<unsigned char> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// Feeds `data` to a streaming hasher in random piece sizes (including empty pieces).
uint64_t streamed(std::mt19937_64& rng, const std::vector<unsigned char>& data, uint64_t seed) {
  dscache::Xxh64 h(seed);
  size_t at = 0;
  while (at < data.size()) {
    const size_t piece = std::min<size_t>(data.size() - at, rng() % 70);
    h.update(data.data() + at, piece);
    at += piece;
  }
  h.update(nullptr, 0);
  return h.digest();
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("xxh64 matches published vectors, one-shot and streaming") {
    for (const Vector& v : kVectors) {
      CAPTURE(v.input);
      CAPTURE(v.seed);
      const size_t n = std::strlen(v.input);
      CHECK(dscache::xxh64(v.input, n, v.seed) == v.expected);
      dscache::Xxh64 byte_at_a_time(v.seed);
      for (size_t i = 0; i < n; ++i) byte_at_a_time.update(v.input + i, 1);
      CHECK(byte_at_a_time.digest() == v.expected);
    }
  }

  TEST_CASE("xxh64 default seed is 0 and digest does not consume the state") {
    const std::string s = "The quick brown fox jumps over the lazy dog";
    CHECK(dscache::xxh64(s.data(), s.size()) == 0x0B242D361FDA71BCULL);
    dscache::Xxh64 h;
    h.update(s.data(), 10);
    const uint64_t partial = h.digest();
    CHECK(partial == dscache::xxh64(s.data(), 10));
    CHECK(h.digest() == partial);  // digest() is const: asking twice gives the same answer
    dscache::Xxh64 copy = h;       // copies continue independently
    h.update(s.data() + 10, s.size() - 10);
    CHECK(h.digest() == 0x0B242D361FDA71BCULL);
    CHECK(copy.digest() == partial);
  }

  TEST_CASE("streaming in random pieces equals one-shot for every length 0..1000") {
    std::mt19937_64 rng(12345);
    for (size_t len = 0; len <= 1000; ++len) {
      const auto data = random_bytes(rng, len);
      const uint64_t seed = (len % 3 == 0) ? 0 : rng();
      CAPTURE(len);
      CHECK(streamed(rng, data, seed) == dscache::xxh64(data.data(), data.size(), seed));
    }
  }

  TEST_CASE("hex64: 16 lowercase, zero-padded hex digits") {
    CHECK(dscache::hex64(0) == "0000000000000000");
    CHECK(dscache::hex64(0xef46db3751d8e999ULL) == "ef46db3751d8e999");
    CHECK(dscache::hex64(0x00000000000000abULL) == "00000000000000ab");
    CHECK(dscache::hex64(UINT64_MAX) == "ffffffffffffffff");
  }

  TEST_CASE("a single flipped bit changes the hash") {
    std::mt19937_64 rng(7);
    auto data = random_bytes(rng, 4096);
    const uint64_t base = dscache::xxh64(data.data(), data.size());
    for (size_t bit : {size_t{0}, size_t{8 * 31}, size_t{8 * 32}, size_t{8 * 4095 + 7}}) {
      data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      CHECK(dscache::xxh64(data.data(), data.size()) != base);
      data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    CHECK(dscache::xxh64(data.data(), data.size()) == base);
  }

#ifdef DSCACHE_TEST_HAVE_LIBXXHASH
  TEST_CASE("xxh64 agrees with libxxhash on random buffers, lengths 0..1000, many seeds") {
    std::mt19937_64 rng(20240601);
    const uint64_t seeds[] = {0, 1, 0xFFFFFFFFFFFFFFFFULL, 0x9E3779B185EBCA87ULL};
    for (size_t len = 0; len <= 1000; ++len) {
      // Unaligned starts too: the implementation must not assume alignment.
      const auto buf = random_bytes(rng, len + 7);
      const unsigned char* data = buf.data() + (len % 8 == 7 ? 0 : len % 8);
      for (uint64_t seed : {seeds[len % 4], rng()}) {
        CAPTURE(len);
        CAPTURE(seed);
        const uint64_t ref = XXH64(data, len, seed);
        CHECK(dscache::xxh64(data, len, seed) == ref);
        std::vector<unsigned char> copy(data, data + len);
        CHECK(streamed(rng, copy, seed) == ref);
      }
    }
  }

  TEST_CASE("streaming agrees with libxxhash on a multi-megabyte buffer") {
    std::mt19937_64 rng(99);
    const auto data = random_bytes(rng, (size_t{3} << 20) + 13);
    const uint64_t ref = XXH64(data.data(), data.size(), 0);
    CHECK(dscache::xxh64(data.data(), data.size()) == ref);
    dscache::Xxh64 h;
    for (size_t at = 0; at < data.size(); at += 65537) {
      h.update(data.data() + at, std::min<size_t>(65537, data.size() - at));
    }
    CHECK(h.digest() == ref);
  }
#endif
}
