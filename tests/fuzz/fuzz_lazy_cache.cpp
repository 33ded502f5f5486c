// Fuzz target: a LazyCache file's header, fill bitmap and slot checksums. A valid file (5 slots
// of 3x4x3, two filled) is overwritten from offset 0 with the input, then opened with the
// arguments it was made for and read. Input: byte 0 = flags (bit 0: recompute the header's
// XXH64 so mutations get past it; bit 1: verify_hits), the rest = the file's new first bytes
// (a longer input replaces the whole file).
// Seeds: the valid file, whole and header only (written with DSCACHE_FUZZ_SEEDS set).
#include <endian.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "dscache/lazy_cache.h"
#include "fuzz_util.h"

namespace {

constexpr uint64_t kCount = 5;
constexpr uint64_t kDigest = 0xfeed;
const dscache::SampleShape kShape{3, 4, 3};

bool decode(uint64_t i, uint8_t* out, std::string* reason) {
  for (uint64_t b = 0; b < kShape.bytes(); ++b) out[b] = static_cast<uint8_t>(i * 31 + b);
  return true;
}

std::shared_ptr<dscache::LazyCache> open(const std::string& path, bool verify_hits) {
  dscache::LazyCacheOptions opt;
  opt.source_digest = kDigest;
  opt.verify_hits = verify_hits;
  return dscache::LazyCache::open(path, kCount, kShape, {0, 1, 0, 1, 1}, decode, opt);
}

dscache::fuzz::TempDir& temp_dir() {
  static dscache::fuzz::TempDir dir;
  return dir;
}

// The valid file, made on the first call (from LLVMFuzzerInitialize).
const std::vector<uint8_t>& valid_file() {
  static const std::vector<uint8_t> valid = [] {
    const std::string path = temp_dir().file("valid.lazy");
    {
      auto lazy = open(path, true);
      std::vector<uint8_t> buf(kShape.bytes());
      lazy->copy_sample(0, buf.data());
      lazy->copy_sample(2, buf.data());
    }
    std::vector<uint8_t> bytes = dscache::fuzz::read_bytes(path);
    std::vector<uint8_t> seed = {1};
    seed.insert(seed.end(), bytes.begin(), bytes.end());
    dscache::fuzz::write_seed("valid-whole", seed);
    seed.resize(1 + 4096);
    dscache::fuzz::write_seed("valid-header", seed);
    return bytes;
  }();
  return valid;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  valid_file();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t>& valid = valid_file();
  const dscache::fuzz::TempDir& dir = temp_dir();
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  if (file.size() < valid.size()) file.insert(file.end(), valid.begin() + file.size(), valid.end());
  if ((flags & 1) && file.size() >= 96) {
    const uint64_t sum = htole64(dscache::xxh64(file.data(), 88));
    std::memcpy(file.data() + 88, &sum, 8);
  }
  const std::string path = dir.file("fuzz.lazy");
  dscache::fuzz::write_bytes(path, file.data(), file.size());
  std::shared_ptr<dscache::LazyCache> lazy;
  try {
    lazy = open(path, (flags & 2) != 0);
  } catch (const dscache::Error&) {
    return 0;
  }
  FUZZ_CHECK(lazy->filled() <= kCount);
  dscache::fuzz::read_everything(*lazy);
  // Whatever the bitmap said, every sample now reads as the decode function makes it.
  std::vector<uint8_t> got(kShape.bytes()), want(kShape.bytes());
  for (uint64_t i = 0; i < kCount; ++i) {
    if (!(flags & 2)) break;  // without verify_hits, a slot whose bytes were altered is served
    lazy->copy_sample(i, got.data());
    std::string reason;
    decode(i, want.data(), &reason);
    FUZZ_CHECK(got == want);
  }
  return 0;
}
