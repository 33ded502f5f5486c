// Fixtures of the LazyCache tests (test_lazy_cache*.cpp): seeded samples and a counting decoder,
// the file's raw layout and bitmap, and child processes to kill.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/lazy_cache.h"
#include "dscache/loader.h"
#include "test_util.h"

namespace dscache::test {

// The library's names the test files use unqualified: they take them, with the fixtures,
// by `using namespace dscache::test`.
using dscache::DecodeFn;
using dscache::Error;
using dscache::ErrorKind;
using dscache::LazyCache;
using dscache::LazyCacheOptions;
using dscache::SampleShape;

inline uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// What the decode function produces for sample i: a hash pattern, different for every sample.
inline std::vector<uint8_t> expected(uint64_t i, uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint64_t state = i * 1000003 + 17;
  uint64_t word = 0;
  for (uint64_t k = 0; k < bytes; ++k) {
    if (k % 8 == 0) word = splitmix(state);
    v[k] = static_cast<uint8_t>(word >> (8 * (k % 8)));
  }
  return v;
}

inline int64_t label_of(uint64_t i) { return static_cast<int64_t>(i % 10); }

inline std::vector<int64_t> labels_for(uint64_t count) {
  std::vector<int64_t> l(count);
  for (uint64_t i = 0; i < count; ++i) l[i] = label_of(i);
  return l;
}

const SampleShape kSmall{8, 8, 3};

// A deterministic decode function that counts its calls and can fail, stall or kill its process.
struct Decoder {
  explicit Decoder(uint64_t sample_bytes = kSmall.bytes()) : bytes(sample_bytes) {}

  uint64_t bytes;         // of one decoded sample
  int64_t fail_at = -1;   // returns false for this sample
  int64_t kill_at = -1;   // raise(SIGKILL) on this sample
  unsigned sleep_us = 0;  // per call
  std::shared_ptr<std::atomic<uint64_t>> calls = std::make_shared<std::atomic<uint64_t>>(0);

  DecodeFn fn() const {
    const Decoder d = *this;
    return [d](uint64_t i, uint8_t* out, std::string* reason) {
      d.calls->fetch_add(1);
      if (d.sleep_us > 0) ::usleep(d.sleep_us);
      if (static_cast<int64_t>(i) == d.kill_at) ::raise(SIGKILL);
      if (static_cast<int64_t>(i) == d.fail_at) {
        *reason = "cannot decode: premature end of JPEG file";
        return false;
      }
      const std::vector<uint8_t> v = expected(i, d.bytes);
      std::memcpy(out, v.data(), v.size());
      return true;
    };
  }
  uint64_t n() const { return calls->load(); }
};

inline std::shared_ptr<LazyCache> open_cache(const std::string& path, uint64_t count,
                                             SampleShape shape, const Decoder& dec,
                                             uint64_t digest = 42, bool verify = true) {
  LazyCacheOptions o;
  o.source_digest = digest;
  o.verify_hits = verify;
  return LazyCache::open(path, count, shape, labels_for(count), dec.fn(), o);
}

// A fresh temp dir and the cache file's path in it: the fixture of most LazyCache tests.
struct LazyFile {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
};

inline bool sample_ok(const LazyCache& c, uint64_t i) {
  std::vector<uint8_t> out(c.shape().bytes());
  c.copy_sample(i, out.data());
  return out == expected(i, out.size());
}

// ---- The file as docs/FORMAT.md describes it, read without the library. ----

inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct RawLayout {
  uint64_t bitmap, checksums, slots, size;
};

inline RawLayout raw_layout(uint64_t count, SampleShape s) {
  RawLayout r;
  r.bitmap = 4096;
  r.checksums = r.bitmap + round_up((count + 7) / 8, 4096);
  r.slots = r.checksums + round_up(count * 8, 4096);
  r.size = r.slots + count * s.bytes();
  return r;
}

inline std::vector<uint8_t> read_range(const std::string& path, uint64_t offset, uint64_t n) {
  std::vector<uint8_t> v(n);
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, v.data(), n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
  ::close(fd);
  return v;
}

inline void write_range(const std::string& path, uint64_t offset, const void* data, uint64_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
  ::close(fd);
}

inline uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}
inline uint32_t le32(const uint8_t* p) { return static_cast<uint32_t>(le64(p) & 0xffffffffu); }

inline bool bit_set(const std::vector<uint8_t>& bitmap, uint64_t i) {
  return (bitmap[i / 8] >> (i % 8)) & 1;
}

// Every slot whose bit is set holds exactly the expected bytes and their XXH64. Returns the
// number of set bits.
inline uint64_t check_set_slots_complete(const std::string& path, uint64_t count, SampleShape s) {
  const RawLayout r = raw_layout(count, s);
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  REQUIRE(static_cast<uint64_t>(st.st_size) == r.size);
  const auto bitmap = read_range(path, r.bitmap, (count + 7) / 8);
  const auto sums = read_range(path, r.checksums, count * 8);
  uint64_t set = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!bit_set(bitmap, i)) continue;
    ++set;
    const auto want = expected(i, s.bytes());
    const auto slot = read_range(path, r.slots + i * s.bytes(), s.bytes());
    CHECK_MESSAGE(slot == want, "slot " << i << " is marked filled but holds other bytes");
    CHECK(le64(&sums[i * 8]) == dscache::xxh64(want.data(), want.size()));
  }
  return set;
}

// Runs `body` in a child process; returns its pid. The child never returns into doctest.
inline pid_t spawn(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  return pid;
}

inline int wait_status(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace dscache::test
