// XXH64, written from the xxHash specification (doc/xxhash_spec.md, "XXH64 algorithm").
#include "dscache/checksum.h"

#include <cstring>

namespace dscache {
namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// The spec defines the input as little-endian words; assemble them bytewise so the result does
// not depend on host byte order or alignment.
inline uint64_t read64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint32_t read32(const unsigned char* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

inline uint64_t round(uint64_t acc, uint64_t lane) {
  acc += lane * kPrime2;
  acc = rotl(acc, 31);
  return acc * kPrime1;
}

inline uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round(0, val);
  return acc * kPrime1 + kPrime4;
}

inline void init_lanes(uint64_t* v, uint64_t seed) {
  v[0] = seed + kPrime1 + kPrime2;
  v[1] = seed + kPrime2;
  v[2] = seed;
  v[3] = seed - kPrime1;
}

// Consumes whole 32-byte stripes; returns the pointer past the last one.
inline const unsigned char* consume_stripes(uint64_t* v, const unsigned char* p,
                                            const unsigned char* end) {
  while (end - p >= 32) {
    v[0] = round(v[0], read64(p));
    v[1] = round(v[1], read64(p + 8));
    v[2] = round(v[2], read64(p + 16));
    v[3] = round(v[3], read64(p + 24));
    p += 32;
  }
  return p;
}

inline uint64_t converge(const uint64_t* v) {
  uint64_t acc = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
  acc = merge_round(acc, v[0]);
  acc = merge_round(acc, v[1]);
  acc = merge_round(acc, v[2]);
  acc = merge_round(acc, v[3]);
  return acc;
}

// Adds total length, consumes the < 32 remaining bytes and avalanches.
uint64_t finish(uint64_t acc, uint64_t total, const unsigned char* p, size_t len) {
  acc += total;
  while (len >= 8) {
    acc ^= round(0, read64(p));
    acc = rotl(acc, 27) * kPrime1 + kPrime4;
    p += 8;
    len -= 8;
  }
  if (len >= 4) {
    acc ^= uint64_t{read32(p)} * kPrime1;
    acc = rotl(acc, 23) * kPrime2 + kPrime3;
    p += 4;
    len -= 4;
  }
  while (len > 0) {
    acc ^= uint64_t{*p} * kPrime5;
    acc = rotl(acc, 11) * kPrime1;
    ++p;
    --len;
  }
  acc ^= acc >> 33;
  acc *= kPrime2;
  acc ^= acc >> 29;
  acc *= kPrime3;
  acc ^= acc >> 32;
  return acc;
}

}  // namespace

uint64_t xxh64(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* end = p + size;
  uint64_t acc;
  if (size >= 32) {
    uint64_t v[4];
    init_lanes(v, seed);
    p = consume_stripes(v, p, end);
    acc = converge(v);
  } else {
    acc = seed + kPrime5;
  }
  return finish(acc, size, p, static_cast<size_t>(end - p));
}

Xxh64::Xxh64(uint64_t seed) : seed_(seed) { init_lanes(v_, seed); }

void Xxh64::update(const void* data, size_t size) {
  if (size == 0) return;
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* end = p + size;
  total_ += size;
  if (buffered_ + size < 32) {
    std::memcpy(buf_ + buffered_, p, size);
    buffered_ += size;
    return;
  }
  if (buffered_ > 0) {
    const size_t fill = 32 - buffered_;
    std::memcpy(buf_ + buffered_, p, fill);
    consume_stripes(v_, buf_, buf_ + 32);
    p += fill;
    buffered_ = 0;
  }
  p = consume_stripes(v_, p, end);
  buffered_ = static_cast<size_t>(end - p);
  if (buffered_ > 0) std::memcpy(buf_, p, buffered_);
}

uint64_t Xxh64::digest() const {
  const uint64_t acc = total_ >= 32 ? converge(v_) : seed_ + kPrime5;
  return finish(acc, total_, buf_, buffered_);
}

std::string hex64(uint64_t v) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i) {
    s[static_cast<size_t>(i)] = kDigits[v & 0xF];
    v >>= 4;
  }
  return s;
}

}  // namespace dscache
