// LazyCache across processes: fills made by another process persist, a process killed at any
// moment (or by its own decode) leaves only whole slots marked, a torn slot is caught, and
// processes creating one file at once share it.
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
#include "lazy_cache_fixtures.h"
#include "test_util.h"

// The library's names the tests use unqualified come with lazy_cache_fixtures.h.
using namespace dscache::test;

TEST_CASE_FIXTURE(LazyFile, "fills made by another process persist") {
  const uint64_t count = 64;
  Decoder child_dec;
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
    Decoder slow(shape.bytes());
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
    Decoder dec(shape.bytes());
    auto c = open_cache(path, count, shape, dec);
    const uint64_t before = c->filled();
    for (uint64_t i = 0; i < count; ++i) REQUIRE(sample_ok(*c, i));
    CHECK(dec.n() == count - before);
    CHECK(c->filled() == count);
  }
}

TEST_CASE_FIXTURE(
    LazyFile,
    "a decode that kills its process on sample k leaves bit k clear and earlier slots whole") {
  const uint64_t count = 40;
  const uint64_t k = 23;
  Decoder killer;
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
  auto c = open_cache(path, count, kSmall, dec);
  CHECK(c->filled() == k);
  for (uint64_t i = 0; i < count; ++i) CHECK(sample_ok(*c, i));
  CHECK(dec.n() == count - k);
}

TEST_CASE_FIXTURE(LazyFile, "a torn slot (bit set, bytes wrong, as after a power loss)") {
  const uint64_t count = 16;
  Decoder dec;
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
    auto c = open_cache(path, count, kSmall, fresh, 42, /*verify=*/false);
    std::vector<uint8_t> out(kSmall.bytes());
    c->copy_sample(5, out.data());
    CHECK(out == garbage);
    CHECK(fresh.n() == 0);
  }
}

TEST_CASE_FIXTURE(LazyFile, "processes creating the same file at once end up sharing one file") {
  const uint64_t count = 400;
  const int kProcs = 4;
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    Decoder dec;
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
  auto c = open_cache(path, count, kSmall, dec);
  CHECK(c->filled() == count);
  for (uint64_t i = 0; i < count; ++i) CHECK(sample_ok(*c, i));
  CHECK(dec.n() == 0);
}
