// xxHash64 (XXH64), the checksum stored for every sample and every file of a cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dscache {

// One-shot XXH64 of `size` bytes; identical to the reference XXH64(data, size, seed).
uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

// The form manifests and reports write an XXH64 (or any 64-bit digest) in: 16 lowercase hex
// digits, zero-padded.
std::string hex64(uint64_t v);

// Streaming XXH64 for data that arrives in pieces (whole files). Not thread-safe; cheap to copy.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t size);
  uint64_t digest() const;

 private:
  uint64_t v_[4];
  uint64_t total_ = 0;
  uint64_t seed_;
  unsigned char buf_[32];
  size_t buffered_ = 0;
};

}  // namespace dscache
