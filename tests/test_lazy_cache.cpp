// LazyCache: decode once, serve from the file after; persistence, crash safety, threads, refusals.
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

namespace {

using dscache::DecodeFn;
using dscache::Error;
using dscache::ErrorKind;
using dscache::LazyCache;
using dscache::LazyCacheOptions;
using dscache::SampleShape;

using namespace dscache::test;

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// What the decode function produces for sample i: a hash pattern, different for every sample.
std::vector<uint8_t> expected(uint64_t i, uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint64_t state = i * 1000003 + 17;
  uint64_t word = 0;
  for (uint64_t k = 0; k < bytes; ++k) {
    if (k % 8 == 0) word = splitmix(state);
    v[k] = static_cast<uint8_t>(word >> (8 * (k % 8)));
  }
  return v;
}

int64_t label_of(uint64_t i) { return static_cast<int64_t>(i % 10); }

std::vector<int64_t> labels_for(uint64_t count) {
  std::vector<int64_t> l(count);
  for (uint64_t i = 0; i < count; ++i) l[i] = label_of(i);
  return l;
}

// A deterministic decode function that counts its calls and can fail, stall or kill its process.
struct Decoder {
  uint64_t bytes = 0;
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

std::shared_ptr<LazyCache> open_cache(const std::string& path, uint64_t count, SampleShape shape,
                                      const Decoder& dec, uint64_t digest = 42,
                                      bool verify = true) {
  LazyCacheOptions o;
  o.source_digest = digest;
  o.verify_hits = verify;
  return LazyCache::open(path, count, shape, labels_for(count), dec.fn(), o);
}

bool sample_ok(const LazyCache& c, uint64_t i) {
  std::vector<uint8_t> out(c.shape().bytes());
  c.copy_sample(i, out.data());
  return out == expected(i, out.size());
}

// ---- The file as docs/FORMAT.md describes it, read without the library. ----

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct RawLayout {
  uint64_t bitmap, checksums, slots, size;
};

RawLayout raw_layout(uint64_t count, SampleShape s) {
  RawLayout r;
  r.bitmap = 4096;
  r.checksums = r.bitmap + round_up((count + 7) / 8, 4096);
  r.slots = r.checksums + round_up(count * 8, 4096);
  r.size = r.slots + count * s.bytes();
  return r;
}

std::vector<uint8_t> read_range(const std::string& path, uint64_t offset, uint64_t n) {
  std::vector<uint8_t> v(n);
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, v.data(), n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
  ::close(fd);
  return v;
}

void write_range(const std::string& path, uint64_t offset, const void* data, uint64_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
  ::close(fd);
}

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}
uint32_t le32(const uint8_t* p) { return static_cast<uint32_t>(le64(p) & 0xffffffffu); }

bool bit_set(const std::vector<uint8_t>& bitmap, uint64_t i) {
  return (bitmap[i / 8] >> (i % 8)) & 1;
}

// Every slot whose bit is set holds exactly the expected bytes and their XXH64. Returns the
// number of set bits.
uint64_t check_set_slots_complete(const std::string& path, uint64_t count, SampleShape s) {
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
pid_t spawn(const std::function<int()>& body) {
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

int wait_status(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

const SampleShape kSmall{8, 8, 3};

}  // namespace

TEST_CASE("first pass decodes each sample once, second pass only hits, reopen starts warm") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 100;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  {
    auto c = open_cache(path, count, kSmall, dec);
    CHECK(c->size() == count);
    CHECK(c->layout() == dscache::Layout::kFixed);
    CHECK(c->shape().bytes() == kSmall.bytes());
    CHECK(c->locality_block() == count);
    CHECK(c->filled() == 0);
    for (uint64_t i = 0; i < count; ++i) CHECK(sample_ok(*c, i));
    CHECK(dec.n() == count);
    CHECK(c->misses() == count);
    CHECK(c->hits() == 0);
    CHECK(c->filled() == count);
    for (uint64_t i = 0; i < count; ++i) CHECK(sample_ok(*c, i));
    CHECK(dec.n() == count);
    CHECK(c->hits() == count);
  }
  Decoder again;  // a fresh counter: a warm start must not call it at all
  again.bytes = kSmall.bytes();
  auto c = open_cache(path, count, kSmall, again);
  CHECK(c->filled() == count);
  for (uint64_t i = 0; i < count; ++i) {
    CHECK(sample_ok(*c, i));
    const dscache::ImageView v = c->view(i);
    CHECK(std::memcmp(v.data, expected(i, kSmall.bytes()).data(), kSmall.bytes()) == 0);
    CHECK(v.height == 8);
    CHECK(v.width == 8);
    CHECK(v.channels == 3);
    CHECK(v.label == label_of(i));
    CHECK(c->label(i) == label_of(i));
  }
  CHECK(again.n() == 0);
  CHECK(c->misses() == 0);
  CHECK(c->hits() == 2 * count);
}

TEST_CASE("view fills a slot in place and the pointer stays valid") {
  TempDir dir;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  auto c = open_cache(dir.file("lazy.bin"), 10, kSmall, dec);
  const dscache::ImageView v = c->view(3);
  CHECK(dec.n() == 1);
  CHECK(c->filled() == 1);
  for (uint64_t i = 0; i < 10; ++i) CHECK(sample_ok(*c, i));
  CHECK(std::memcmp(v.data, expected(3, kSmall.bytes()).data(), kSmall.bytes()) == 0);
  CHECK(c->view(3).data == v.data);
  CHECK(dec.n() == 10);
}

TEST_CASE("the file is laid out byte for byte as docs/FORMAT.md says") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 100;
  const SampleShape shape{4, 5, 3};
  Decoder dec;
  dec.bytes = shape.bytes();
  {
    auto c = open_cache(path, count, shape, dec, 0x1122334455667788ULL);
    for (uint64_t i : {0, 7, 8, 99}) CHECK(sample_ok(*c, i));
  }
  const RawLayout r = raw_layout(count, shape);
  CHECK(r.checksums == 8192);
  CHECK(r.slots == 12288);
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_size) == r.size);

  const auto h = read_range(path, 0, 4096);
  CHECK(std::memcmp(h.data(), "DSCLAZY\0", 8) == 0);
  CHECK(le32(&h[8]) == 1);      // format version
  CHECK(le32(&h[12]) == 4096);  // header bytes
  CHECK(le64(&h[16]) == count);
  CHECK(le32(&h[24]) == 4);
  CHECK(le32(&h[28]) == 5);
  CHECK(le32(&h[32]) == 3);
  CHECK(le32(&h[36]) == 0);
  CHECK(le64(&h[40]) == 60);
  CHECK(le64(&h[48]) == 0x1122334455667788ULL);
  CHECK(le64(&h[56]) == r.bitmap);
  CHECK(le64(&h[64]) == r.checksums);
  CHECK(le64(&h[72]) == r.slots);
  CHECK(le64(&h[80]) == r.size);
  CHECK(le64(&h[88]) == dscache::xxh64(h.data(), 88));
  for (size_t k = 96; k < 4096; ++k) REQUIRE(h[k] == 0);

  const auto bitmap = read_range(path, r.bitmap, 4096);
  CHECK(bitmap[0] == 0x81);   // samples 0 and 7, least significant bit first
  CHECK(bitmap[1] == 0x01);   // sample 8
  CHECK(bitmap[12] == 0x08);  // sample 99
  uint64_t others = 0;
  for (size_t k = 0; k < bitmap.size(); ++k) {
    if (k != 0 && k != 1 && k != 12) others += bitmap[k];
  }
  CHECK(others == 0);
  CHECK(check_set_slots_complete(path, count, shape) == 4);
  // An unfilled slot and its checksum read as zeros.
  CHECK(read_range(path, r.slots + 50 * 60, 60) == std::vector<uint8_t>(60, 0));
  CHECK(le64(read_range(path, r.checksums + 50 * 8, 8).data()) == 0);
}

TEST_CASE("a new file is sparse: slots take disk space only once filled") {
  TempDir dir;
  const std::string path = dir.file("big.bin");
  const uint64_t count = 200000;
  const SampleShape shape{64, 64, 3};  // 2.4 GB of slots if preallocated
  Decoder dec;
  dec.bytes = shape.bytes();
  auto c = open_cache(path, count, shape, dec);
  CHECK(sample_ok(*c, count - 1));
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_size) == raw_layout(count, shape).size);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 < (uint64_t{16} << 20));
  CHECK(c->locality_block() == (uint64_t{1} << 30) / shape.bytes());
  CHECK(c->filled() == 1);
}

TEST_CASE("fills made by another process persist") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 64;
  Decoder child_dec;
  child_dec.bytes = kSmall.bytes();
  const pid_t pid = spawn([&] {
    auto c = open_cache(path, count, kSmall, child_dec);
    std::vector<uint8_t> out(kSmall.bytes());
    for (uint64_t i = 0; i < count; i += 2) c->copy_sample(i, out.data());
    return c->filled() == count / 2 ? 0 : 3;
  });
  const int status = wait_status(pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  Decoder dec;
  dec.bytes = kSmall.bytes();
  auto c = open_cache(path, count, kSmall, dec);
  CHECK(c->filled() == count / 2);
  for (uint64_t i = 0; i < count; i += 2) CHECK(sample_ok(*c, i));
  CHECK(dec.n() == 0);
  for (uint64_t i = 1; i < count; i += 2) CHECK(sample_ok(*c, i));
  CHECK(dec.n() == count / 2);
  CHECK(c->filled() == count);
}

TEST_CASE("a process killed at a random moment leaves only complete slots marked filled") {
  TempDir dir;
  const uint64_t count = 64;
  const SampleShape shape{32, 32, 3};
  std::mt19937 rng(20240611);
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    const std::string path = dir.file("lazy-" + std::to_string(round) + ".bin");
    int opened[2];
    REQUIRE(::pipe(opened) == 0);
    Decoder slow;
    slow.bytes = shape.bytes();
    slow.sleep_us = 500;  // the whole pass takes about 32 ms
    const pid_t pid = spawn([&] {
      ::close(opened[0]);
      auto c = open_cache(path, count, shape, slow);
      const char b = 1;
      if (::write(opened[1], &b, 1) != 1) return 5;
      std::vector<uint8_t> out(shape.bytes());
      // Scattered order so bits land in several bitmap bytes.
      for (uint64_t k = 0; k < count; ++k) c->copy_sample((k * 37) % count, out.data());
      return 0;
    });
    ::close(opened[1]);
    // Most rounds kill while slots are being filled; every fourth may kill while the file is
    // still being created.
    if (round % 4 != 3) {
      char b;
      REQUIRE(::read(opened[0], &b, 1) == 1);
    }
    ::close(opened[0]);
    ::usleep(std::uniform_int_distribution<unsigned>(0, 40000)(rng));
    ::kill(pid, SIGKILL);
    wait_status(pid);

    // Killed before the file got its name: nothing to check but a clean start.
    if (::access(path.c_str(), F_OK) == 0) check_set_slots_complete(path, count, shape);
    Decoder dec;
    dec.bytes = shape.bytes();
    auto c = open_cache(path, count, shape, dec);
    const uint64_t before = c->filled();
    for (uint64_t i = 0; i < count; ++i) REQUIRE(sample_ok(*c, i));
    CHECK(dec.n() == count - before);
    CHECK(c->filled() == count);
  }
}

TEST_CASE(
    "a decode that kills its process on sample k leaves bit k clear and earlier slots whole") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 40;
  const uint64_t k = 23;
  Decoder killer;
  killer.bytes = kSmall.bytes();
  killer.kill_at = static_cast<int64_t>(k);
  const pid_t pid = spawn([&] {
    auto c = open_cache(path, count, kSmall, killer);
    std::vector<uint8_t> out(kSmall.bytes());
    for (uint64_t i = 0; i < count; ++i) c->copy_sample(i, out.data());
    return 0;
  });
  const int status = wait_status(pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  CHECK(check_set_slots_complete(path, count, kSmall) == k);
  const auto bitmap = read_range(path, raw_layout(count, kSmall).bitmap, (count + 7) / 8);
  for (uint64_t i = 0; i < count; ++i) CHECK(bit_set(bitmap, i) == (i < k));

  Decoder dec;
  dec.bytes = kSmall.bytes();
  auto c = open_cache(path, count, kSmall, dec);
  CHECK(c->filled() == k);
  for (uint64_t i = 0; i < count; ++i) CHECK(sample_ok(*c, i));
  CHECK(dec.n() == count - k);
}

TEST_CASE("a torn slot (bit set, bytes wrong, as after a power loss)") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 16;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  {
    auto c = open_cache(path, count, kSmall, dec);
    for (uint64_t i = 0; i < count; ++i) REQUIRE(sample_ok(*c, i));
  }
  const RawLayout r = raw_layout(count, kSmall);
  const std::vector<uint8_t> garbage(kSmall.bytes(), 0xA5);
  write_range(path, r.slots + 5 * kSmall.bytes(), garbage.data(), garbage.size());
  write_range(path, r.slots + 9 * kSmall.bytes(), garbage.data(), garbage.size());

  SUBCASE("verify_hits refills it, through copy_sample and view") {
    Decoder fresh;
    fresh.bytes = kSmall.bytes();
    {
      auto c = open_cache(path, count, kSmall, fresh, 42, /*verify=*/true);
      CHECK(c->filled() == count);
      CHECK(sample_ok(*c, 5));
      const dscache::ImageView v = c->view(9);
      CHECK(std::memcmp(v.data, expected(9, kSmall.bytes()).data(), kSmall.bytes()) == 0);
      CHECK(fresh.n() == 2);
      CHECK(c->misses() == 2);
      for (uint64_t i = 0; i < count; ++i) CHECK(sample_ok(*c, i));
      CHECK(fresh.n() == 2);
    }
    CHECK(check_set_slots_complete(path, count, kSmall) == count);
  }
  SUBCASE("without verify_hits the stored bytes are served as they are") {
    Decoder fresh;
    fresh.bytes = kSmall.bytes();
    auto c = open_cache(path, count, kSmall, fresh, 42, /*verify=*/false);
    std::vector<uint8_t> out(kSmall.bytes());
    c->copy_sample(5, out.data());
    CHECK(out == garbage);
    CHECK(fresh.n() == 0);
  }
}

TEST_CASE("four threads over random indices get the right bytes; each sample decoded once") {
  TempDir dir;
  const uint64_t count = 2000;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  auto c = open_cache(dir.file("lazy.bin"), count, kSmall, dec);
  const int kThreads = 4;
  const int kOps = 4000;
  std::atomic<uint64_t> wrong{0};
  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      std::vector<uint8_t> out(kSmall.bytes());
      try {
        for (int op = 0; op < kOps; ++op) {
          const uint64_t i = rng() % count;
          const auto want = expected(i, kSmall.bytes());
          if (op % 3 == 0) {
            const dscache::ImageView v = c->view(i);
            if (std::memcmp(v.data, want.data(), want.size()) != 0 || v.label != label_of(i)) {
              ++wrong;
            }
          } else {
            c->copy_sample(i, out.data());
            if (out != want) ++wrong;
          }
        }
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0);
  CHECK(errors.load() == 0);
  for (uint64_t i = 0; i < count; ++i) REQUIRE(sample_ok(*c, i));
  CHECK(c->filled() == count);
  // Threads of one process never decode the same sample twice (they wait for each other).
  CHECK(dec.n() == count);
  CHECK(c->misses() == count);
  CHECK(c->hits() + c->misses() == uint64_t{kThreads} * kOps + count);
}

TEST_CASE("processes creating the same file at once end up sharing one file") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 400;
  const int kProcs = 4;
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    Decoder dec;
    dec.bytes = kSmall.bytes();
    pids.push_back(spawn([&, p, dec] {
      ::close(gate[1]);
      char b;
      while (::read(gate[0], &b, 1) > 0) {
      }  // released together when the parent closes its end
      auto c = open_cache(path, count, kSmall, dec);
      std::vector<uint8_t> out(kSmall.bytes());
      for (uint64_t i = static_cast<uint64_t>(p); i < count; i += kProcs) {
        c->copy_sample(i, out.data());
        if (out != expected(i, out.size())) return 4;
      }
      return 0;
    }));
  }
  ::close(gate[0]);
  ::close(gate[1]);
  for (pid_t pid : pids) {
    const int status = wait_status(pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(list_dir(dir.path()) == std::vector<std::string>{"lazy.bin"});  // no temp files left
  CHECK(check_set_slots_complete(path, count, kSmall) == count);
  Decoder dec;
  dec.bytes = kSmall.bytes();
  auto c = open_cache(path, count, kSmall, dec);
  CHECK(c->filled() == count);
  for (uint64_t i = 0; i < count; ++i) CHECK(sample_ok(*c, i));
  CHECK(dec.n() == 0);
}

TEST_CASE("a file made for another source or shape is refused, naming the path") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 50;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  open_cache(path, count, kSmall, dec, 42);

  struct Case {
    const char* name;
    uint64_t count;
    SampleShape shape;
    uint64_t digest;
  };
  const Case cases[] = {
      {"count", count + 1, kSmall, 42}, {"height", count, {9, 8, 3}, 42},
      {"width", count, {8, 7, 3}, 42},  {"channels", count, {8, 8, 1}, 42},
      {"digest", count, kSmall, 43},
  };
  for (const Case& k : cases) {
    CAPTURE(k.name);
    Decoder d;
    d.bytes = k.shape.bytes();
    try {
      open_cache(path, k.count, k.shape, d, k.digest);
      FAIL("opened a file made for something else");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK(e.path() == path);
      const std::string what = e.what();
      CHECK(what.find("made for another source or shape") != std::string::npos);
      CHECK(what.find("delete it or use another path") != std::string::npos);
    }
  }
  // The refused opens left the file alone.
  auto c = open_cache(path, count, kSmall, dec, 42);
  CHECK(c->size() == count);
}

TEST_CASE("damaged files are refused as Corruption (or Unsupported), naming the path") {
  TempDir dir;
  const uint64_t count = 50;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  const std::string good = dir.file("good.bin");
  {
    auto c = open_cache(good, count, kSmall, dec);
    REQUIRE(sample_ok(*c, 0));
  }
  const uint64_t size = raw_layout(count, kSmall).size;

  struct Case {
    const char* name;
    std::function<void(const std::string&)> damage;
    ErrorKind kind;
  };
  const Case cases[] = {
      {"truncated by one byte",
       [&](const std::string& p) { REQUIRE(::truncate(p.c_str(), size - 1) == 0); },
       ErrorKind::kCorruption},
      {"truncated inside the header",
       [](const std::string& p) { REQUIRE(::truncate(p.c_str(), 100) == 0); },
       ErrorKind::kCorruption},
      {"zero bytes", [](const std::string& p) { REQUIRE(::truncate(p.c_str(), 0) == 0); },
       ErrorKind::kCorruption},
      {"extended", [&](const std::string& p) { REQUIRE(::truncate(p.c_str(), size + 4096) == 0); },
       ErrorKind::kCorruption},
      {"garbage header",
       [](const std::string& p) {
         std::vector<uint8_t> junk(4096);
         std::mt19937 rng(7);
         for (auto& b : junk) b = static_cast<uint8_t>(rng());
         write_range(p, 0, junk.data(), junk.size());
       },
       ErrorKind::kCorruption},
      {"header field changed (checksum no longer matches)",
       [](const std::string& p) {
         const uint8_t b = 0x7f;
         write_range(p, 16, &b, 1);  // count
       },
       ErrorKind::kCorruption},
      {"newer format version",
       [](const std::string& p) {
         auto h = read_range(p, 0, 96);
         h[8] = 2;
         const uint64_t sum = dscache::xxh64(h.data(), 88);
         for (int k = 0; k < 8; ++k) h[88 + k] = static_cast<uint8_t>(sum >> (8 * k));
         write_range(p, 0, h.data(), h.size());
       },
       ErrorKind::kUnsupported},
      // fuzz (tests/fuzz/corpus/lazy_cache/crash-045a...): a zero side with a valid header
      // checksum divided by the zero slot size before the shape was checked.
      {"a zero height, width or channel count with a valid header checksum",
       [](const std::string& p) {
         auto h = read_range(p, 0, 96);
         for (int k = 0; k < 4; ++k) h[28 + k] = 0;  // width
         const uint64_t sum = dscache::xxh64(h.data(), 88);
         for (int k = 0; k < 8; ++k) h[88 + k] = static_cast<uint8_t>(sum >> (8 * k));
         write_range(p, 0, h.data(), h.size());
       },
       ErrorKind::kCorruption},
  };
  int n = 0;
  for (const Case& k : cases) {
    CAPTURE(k.name);
    const std::string path = dir.file("bad-" + std::to_string(n++) + ".bin");
    REQUIRE(std::system(("cp '" + good + "' '" + path + "'").c_str()) == 0);
    k.damage(path);
    try {
      open_cache(path, count, kSmall, dec);
      FAIL("opened a damaged file");
    } catch (const Error& e) {
      CHECK(e.kind() == k.kind);
      CHECK(e.path() == path);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
  }
}

TEST_CASE("filled() ignores stray bits past count in the bitmap's padding") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 20;  // bits 20..23 of byte 2 and all later bytes are padding
  Decoder dec;
  dec.bytes = kSmall.bytes();
  open_cache(path, count, kSmall, dec);
  const uint8_t stray[2] = {0xF0, 0xFF};
  write_range(path, raw_layout(count, kSmall).bitmap + 2, stray, 2);
  auto c = open_cache(path, count, kSmall, dec);
  CHECK(c->filled() == 0);
  CHECK(sample_ok(*c, 19));
  CHECK(c->filled() == 1);
}

TEST_CASE("impossible arguments are InvalidArgument") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  Decoder dec;
  dec.bytes = kSmall.bytes();
  struct Case {
    const char* name;
    uint64_t count;
    SampleShape shape;
    size_t labels;
    bool decode;
  };
  const Case cases[] = {
      {"count 0", 0, kSmall, 0, true},           {"height 0", 10, {0, 8, 3}, 10, true},
      {"channels 0", 10, {8, 8, 0}, 10, true},   {"channels 2", 10, {8, 8, 2}, 10, true},
      {"labels too short", 10, kSmall, 9, true}, {"no decode function", 10, kSmall, 10, false},
  };
  for (const Case& k : cases) {
    CAPTURE(k.name);
    try {
      LazyCache::open(path, k.count, k.shape, std::vector<int64_t>(k.labels),
                      k.decode ? dec.fn() : DecodeFn());
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
    }
  }
  CHECK(::access(path.c_str(), F_OK) != 0);  // nothing was created

  auto c = open_cache(path, 10, kSmall, dec);
  std::vector<uint8_t> out(kSmall.bytes());
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { c->copy_sample(10, out.data()); }, [&] { c->view(10); }, [&] { c->label(10); }}) {
    try {
      call();
      FAIL("index 10 of 10 accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
    }
  }
}

TEST_CASE("a failing decode throws Corruption naming the sample and leaves its slot unfilled") {
  TempDir dir;
  const std::string path = dir.file("lazy.bin");
  const uint64_t count = 20;
  const uint64_t j = 7;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  dec.fail_at = static_cast<int64_t>(j);
  auto c = open_cache(path, count, kSmall, dec);
  std::vector<uint8_t> out(kSmall.bytes());
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      c->copy_sample(j, out.data());
      FAIL("decode failure not reported");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kCorruption);
      const std::string what = e.what();
      CHECK(what.find("sample 7") != std::string::npos);
      CHECK(what.find("premature end of JPEG file") != std::string::npos);
    }
  }
  CHECK(dec.n() == 2);  // a failure is not remembered: the next request tries again
  CHECK_THROWS_AS(c->view(j), Error);
  CHECK(c->filled() == 0);
  for (uint64_t i = 0; i < count; ++i) {
    if (i != j) CHECK(sample_ok(*c, i));
  }
  CHECK(c->filled() == count - 1);
  const auto bitmap = read_range(path, raw_layout(count, kSmall).bitmap, (count + 7) / 8);
  CHECK_FALSE(bit_set(bitmap, j));
  CHECK(check_set_slots_complete(path, count, kSmall) == count - 1);
}

TEST_CASE("a Loader serves one epoch from a LazyCache") {
  TempDir dir;
  const uint64_t count = 103;
  Decoder dec;
  dec.bytes = kSmall.bytes();
  std::shared_ptr<const dscache::SampleSource> source =
      open_cache(dir.file("lazy.bin"), count, kSmall, dec);
  dscache::LoaderOptions o;
  o.batch_size = 16;
  o.workers = 2;
  o.prefetch = 2;
  dscache::Loader loader(source, o);
  loader.start_epoch(/*seed=*/5, /*epoch=*/0);
  std::set<uint64_t> seen;
  uint64_t batches = 0;
  while (const dscache::Batch* b = loader.next()) {
    ++batches;
    REQUIRE(b->height == kSmall.height);
    REQUIRE(b->width == kSmall.width);
    REQUIRE(b->channels == kSmall.channels);
    for (uint32_t k = 0; k < b->size; ++k) {
      const uint64_t i = b->indices[k];
      const auto want = expected(i, kSmall.bytes());
      CHECK(std::memcmp(b->images + k * kSmall.bytes(), want.data(), want.size()) == 0);
      CHECK(b->labels[k] == label_of(i));
      seen.insert(i);
    }
  }
  CHECK(batches == (count + 15) / 16);
  CHECK(seen.size() == count);
  CHECK(dec.n() == count);
}
