// LazyCache: decode once, serve from the file after; its layout on disk, threads, refusals.
// Other processes, crashes and torn slots are in test_lazy_cache_processes.cpp.
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

TEST_CASE_FIXTURE(
    LazyFile, "first pass decodes each sample once, second pass only hits, reopen starts warm") {
  const uint64_t count = 100;
  Decoder dec;
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

TEST_CASE_FIXTURE(LazyFile, "view fills a slot in place and the pointer stays valid") {
  Decoder dec;
  auto c = open_cache(path, 10, kSmall, dec);
  const dscache::ImageView v = c->view(3);
  CHECK(dec.n() == 1);
  CHECK(c->filled() == 1);
  for (uint64_t i = 0; i < 10; ++i) CHECK(sample_ok(*c, i));
  CHECK(std::memcmp(v.data, expected(3, kSmall.bytes()).data(), kSmall.bytes()) == 0);
  CHECK(c->view(3).data == v.data);
  CHECK(dec.n() == 10);
}

TEST_CASE_FIXTURE(LazyFile, "the file is laid out byte for byte as docs/FORMAT.md says") {
  const uint64_t count = 100;
  const SampleShape shape{4, 5, 3};
  Decoder dec(shape.bytes());
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
  Decoder dec(shape.bytes());
  auto c = open_cache(path, count, shape, dec);
  CHECK(sample_ok(*c, count - 1));
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_size) == raw_layout(count, shape).size);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 < (uint64_t{16} << 20));
  CHECK(c->locality_block() == (uint64_t{1} << 30) / shape.bytes());
  CHECK(c->filled() == 1);
}

TEST_CASE_FIXTURE(
    LazyFile, "four threads over random indices get the right bytes; each sample decoded once") {
  const uint64_t count = 2000;
  Decoder dec;
  auto c = open_cache(path, count, kSmall, dec);
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

TEST_CASE_FIXTURE(LazyFile, "a file made for another source or shape is refused, naming the path") {
  const uint64_t count = 50;
  Decoder dec;
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
    Decoder d(k.shape.bytes());
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

TEST_CASE_FIXTURE(LazyFile, "filled() ignores stray bits past count in the bitmap's padding") {
  const uint64_t count = 20;  // bits 20..23 of byte 2 and all later bytes are padding
  Decoder dec;
  open_cache(path, count, kSmall, dec);
  const uint8_t stray[2] = {0xF0, 0xFF};
  write_range(path, raw_layout(count, kSmall).bitmap + 2, stray, 2);
  auto c = open_cache(path, count, kSmall, dec);
  CHECK(c->filled() == 0);
  CHECK(sample_ok(*c, 19));
  CHECK(c->filled() == 1);
}

TEST_CASE_FIXTURE(LazyFile, "impossible arguments are InvalidArgument") {
  Decoder dec;
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

TEST_CASE_FIXTURE(
    LazyFile, "a failing decode throws Corruption naming the sample and leaves its slot unfilled") {
  const uint64_t count = 20;
  const uint64_t j = 7;
  Decoder dec;
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

TEST_CASE_FIXTURE(LazyFile, "a Loader serves one epoch from a LazyCache") {
  const uint64_t count = 103;
  Decoder dec;
  std::shared_ptr<const dscache::SampleSource> source = open_cache(path, count, kSmall, dec);
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
