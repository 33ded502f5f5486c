// Loader with direct_read: windows read with O_DIRECT into the Loader's buffers serve exactly
// the batches the page-cache path serves — runs across shard boundaries, short last blocks,
// samples that straddle 4 KiB blocks, file tails, rank padding, strides and resumes — and a
// shard cut short under the reader is an error naming it.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/loader.h"
#include "loader_fixtures.h"
#include "scoped_env.h"
#include "serve/direct_windows.h"
#include "test_util.h"

using namespace dscache::test;

namespace {

// Whether files in `dir` can be opened with O_DIRECT (tmpfs cannot): where not, direct_read
// must fall back to the page-cache path, and only that is checked.
bool direct_supported(const std::string& dir) {
  const std::string probe = dir + "/o_direct_probe";
  const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

struct Case {
  const char* name;
  uint32_t height, width;  // sample size: 6x5x3 = 90 bytes; 37x41x3 = 4551 (> 4 KiB)
  std::vector<uint64_t> shard_counts;
  uint64_t block, window_blocks;  // in samples and blocks
  uint32_t batch, world, rank, stride, offset;
  bool drop_last, flip;
  uint64_t cursor;  // restore() here (0: start_epoch)
  uint32_t buffers, depth, request_kib;
};

const std::vector<Case> kCases = {
    // block 8 of 20+20+13: blocks 2 and 4 span shard boundaries; the last block holds 5.
    {"runs across shards, short last block",
     6,
     5,
     {20, 20, 13},
     8,
     2,
     10,
     1,
     0,
     1,
     0,
     false,
     false,
     0,
     2,
     4,
     512},
    {"one block per window, flips, one request in flight",
     6,
     5,
     {20, 20, 13},
     8,
     1,
     7,
     1,
     0,
     1,
     0,
     false,
     true,
     0,
     2,
     1,
     4},
    {"whole cache one window",
     6,
     5,
     {20, 20, 13},
     53,
     1,
     16,
     1,
     0,
     1,
     0,
     false,
     false,
     0,
     2,
     4,
     512},
    {"rank 1 of 2, padded tail",
     6,
     5,
     {20, 20, 13},
     6,
     3,
     4,
     2,
     1,
     1,
     0,
     false,
     false,
     0,
     3,
     2,
     512},
    {"rank 0 of 3, drop_last, stride 2 offset 1",
     6,
     5,
     {20, 20, 13},
     5,
     2,
     3,
     3,
     0,
     2,
     1,
     true,
     false,
     0,
     2,
     4,
     512},
    {"resume inside the epoch",
     6,
     5,
     {20, 20, 13},
     8,
     2,
     5,
     1,
     0,
     1,
     0,
     false,
     false,
     4,
     2,
     4,
     512},
    // 4551-byte samples: every run starts and ends inside a 4 KiB block, 4 KiB requests cut
    // samples in two, and the last shard's tail is not a whole block.
    {"samples larger than a block, 4 KiB requests",
     37,
     41,
     {9, 7, 11},
     4,
     2,
     5,
     1,
     0,
     1,
     0,
     false,
     true,
     0,
     2,
     3,
     4},
    {"samples larger than a block, many windows held",
     37,
     41,
     {9, 7, 11},
     3,
     1,
     4,
     1,
     0,
     1,
     0,
     false,
     false,
     0,
     5,
     8,
     8},
};

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("direct_read serves the same batches as the page-cache path") {
    for (const Case& c : kCases) {
      for (const Storage storage : storages()) {
        CAPTURE(c.name);
        CAPTURE(static_cast<int>(storage));
        TempDir dir;
        Spec spec;
        spec.storage = storage;
        spec.height = c.height;
        spec.width = c.width;
        spec.shard_counts = c.shard_counts;
        const Built built = build_cache(dir.path(), spec);
        dscache::CacheOptions po;
        po.memory = dscache::MemoryMode::kPread;
        const auto pread = Cache::open(dir.path(), po);
        LoaderOptions o = small_options(c.batch);
        o.sampler.shuffle = Shuffle::kWindowed;
        o.sampler.block = c.block;
        o.sampler.window_blocks = c.window_blocks;
        o.sampler.world_size = c.world;
        o.sampler.rank = c.rank;
        o.batch_stride = c.stride;
        o.batch_offset = c.offset;
        o.drop_last = c.drop_last;
        o.transform.flip = c.flip;
        Loader reference(built.cache, o);  // mapped: the page cache's bytes
        o.direct_read = dscache::DirectRead::kOn;
        o.direct_buffers = c.buffers;
        o.direct_depth = c.depth;
        o.direct_request_kib = c.request_kib;
        Loader direct(pread, o);
        for (uint64_t epoch : {0, 1}) {
          if (c.cursor == 0) {
            reference.start_epoch(3, epoch);
            direct.start_epoch(3, epoch);
          } else {
            reference.restore({3, epoch, c.cursor});
            direct.restore({3, epoch, c.cursor});
          }
          CHECK(direct.reads_direct() == direct_supported(dir.path()));
          const auto want = drain(reference);
          REQUIRE(!want.empty());
          CHECK(drain(direct) == want);
        }
      }
    }
  }

  TEST_CASE("direct_read applies only to windowed, pread, uncropped serving, and says why") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    if (!direct_supported(dir.path())) return;
    dscache::CacheOptions po;
    po.memory = dscache::MemoryMode::kPread;
    const auto pread = Cache::open(dir.path(), po);
    ScopedEnv tiny("DSCACHE_DIRECT_READ_BUDGET_BYTES", "1");  // kAuto: the cache never fits
    using dscache::DirectRead;
    struct Row {
      const char* name;
      DirectRead mode;
      bool pread, windowed, crop, want;
      const char* reason;  // the start of direct_read_reason()
    };
    for (const Row& r : std::vector<Row>{
             {"pread, windowed", DirectRead::kOn, true, true, false, true, "on: direct_read on"},
             {"auto, pread, windowed", DirectRead::kAuto, true, true, false, true, "auto: cache "},
             {"off", DirectRead::kOff, true, true, false, false, "off: direct_read off"},
             {"mapped cache", DirectRead::kOn, false, true, false, false,
              "on: not applicable (O_DIRECT windows need a Cache open in pread memory mode)"},
             {"global shuffle", DirectRead::kAuto, true, false, false, false,
              "auto: not applicable (O_DIRECT windows need the windowed shuffle)"},
             {"center crop", DirectRead::kOn, true, true, true, false,
              "on: not applicable (O_DIRECT windows need the raw fixed layout and crop none)"}}) {
      CAPTURE(r.name);
      LoaderOptions o = small_options(8);
      o.sampler.shuffle = r.windowed ? Shuffle::kWindowed : Shuffle::kGlobal;
      o.sampler.block = 8;
      if (r.crop) {
        o.transform.crop = dscache::CropMode::kCenter;
        o.transform.height = 4;
        o.transform.width = 4;
      }
      o.direct_read = r.mode;
      Loader on(r.pread ? std::shared_ptr<Cache>(pread) : built.cache, o);
      o.direct_read = DirectRead::kOff;
      Loader off(built.cache, o);
      CHECK(!on.reads_direct());  // nothing started yet
      on.start_epoch(1, 0);
      off.start_epoch(1, 0);
      CHECK(on.reads_direct() == r.want);
      CAPTURE(on.direct_read_reason());
      CHECK(on.direct_read_reason().rfind(r.reason, 0) == 0);
      CHECK(drain(on) == drain(off));
    }
  }

  TEST_CASE("direct_read auto: a budget below the cache reads directly, one above does not") {
    TempDir dir;  // TMPDIR's file system: a real disk, not tmpfs, where O_DIRECT works
    const Built built = build_cache(dir.path(), Spec{});
    dscache::CacheOptions po;
    po.memory = dscache::MemoryMode::kPread;
    const auto pread = Cache::open(dir.path(), po);
    const uint64_t bytes = pread->stored_bytes();
    REQUIRE(bytes > 1);
    LoaderOptions o = small_options(8);
    o.sampler.shuffle = Shuffle::kWindowed;
    o.sampler.block = 8;
    o.direct_read = dscache::DirectRead::kOff;
    Loader reference(built.cache, o);
    reference.start_epoch(5, 2);
    const auto want = drain(reference);
    o.direct_read = dscache::DirectRead::kAuto;  // the default
    CHECK(LoaderOptions{}.direct_read == dscache::DirectRead::kAuto);
    struct Row {
      std::string budget;
      bool direct;
      const char* reason;
    };
    for (const Row& r : std::vector<Row>{{std::to_string(bytes - 1), true, " > "},
                                         {std::to_string(bytes), false, " fits in "},
                                         {"1000000000000000", false, " fits in "}}) {
      CAPTURE(r.budget);
      ScopedEnv budget("DSCACHE_DIRECT_READ_BUDGET_BYTES", r.budget.c_str());
      Loader loader(pread, o);
      loader.start_epoch(5, 2);
      const bool refused = !direct_supported(dir.path());
      CHECK(loader.reads_direct() == (r.direct && !refused));
      const std::string reason = loader.direct_read_reason();
      CAPTURE(reason);
      CHECK(reason.rfind("auto: cache ", 0) == 0);
      CHECK(reason.find(r.reason) != std::string::npos);
      CHECK(reason.find("(DSCACHE_DIRECT_READ_BUDGET_BYTES)") != std::string::npos);
      CHECK((reason.find("refused O_DIRECT") != std::string::npos) == (r.direct && refused));
      CHECK(drain(loader) == want);
    }
  }

  TEST_CASE("direct_read: a shard cut short after open is an error naming it") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    if (!direct_supported(dir.path())) return;
    dscache::CacheOptions po;
    po.memory = dscache::MemoryMode::kPread;
    const auto pread = Cache::open(dir.path(), po);
    const std::string last = pread->manifest().shards.back().file;
    LoaderOptions o = small_options(8);
    o.sampler.shuffle = Shuffle::kWindowed;
    o.sampler.block = 53;  // one window: every batch needs the cut shard
    o.direct_read = dscache::DirectRead::kOn;
    Loader loader(pread, o);
    REQUIRE(::truncate((dir.path() + "/" + last).c_str(), 200) == 0);
    loader.start_epoch(0, 0);
    REQUIRE(loader.reads_direct());
    try {
      drain(loader);
      FAIL("no error from a truncated shard");
    } catch (const dscache::Error& e) {
      CHECK(e.kind() == dscache::ErrorKind::kCorruption);
      CHECK(std::string(e.what()).find(last) != std::string::npos);
      CHECK(std::string(e.what()).find("unexpected end of file") != std::string::npos);
    }
  }

  TEST_CASE("direct_read: restarting or destroying a Loader mid-epoch stops its reader") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    dscache::CacheOptions po;
    po.memory = dscache::MemoryMode::kPread;
    const auto pread = Cache::open(dir.path(), po);
    LoaderOptions o = small_options(4);
    o.sampler.shuffle = Shuffle::kWindowed;
    o.sampler.block = 4;
    o.sampler.window_blocks = 1;  // 14 windows: the reader is mid-epoch when we stop
    o.workers = 1;
    o.prefetch = 1;
    Loader reference(built.cache, o);
    o.direct_read = dscache::DirectRead::kOn;
    for (int restarts : {1, 3}) {
      Loader direct(pread, o);
      for (int k = 0; k < restarts; ++k) {
        direct.start_epoch(9, 0);
        CHECK(drain(direct, 2).size() == 2);
      }
      direct.start_epoch(9, 1);
      reference.start_epoch(9, 1);
      CHECK(drain(direct) == drain(reference));
      direct.start_epoch(9, 2);
      CHECK(drain(direct, 1).size() == 1);
    }  // destroyed with windows left unread: must return, not hang
  }

  TEST_CASE("a direct read request stops at the file's tail and wants only its bytes") {
    TempDir dir;
    const std::string path = dir.path() + "/tail.bin";
    const std::vector<uint8_t> bytes(5000, 7);  // 4096 + 904: the tail is not a whole block
    {
      const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      REQUIRE(fd >= 0);
      REQUIRE(::write(fd, bytes.data(), bytes.size()) == 5000);
      ::close(fd);
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // short reads behave alike
    REQUIRE(fd >= 0);
    struct Row {
      uint64_t offset, bytes, need;
      bool ok;
    };
    for (const Row& r : std::vector<Row>{{0, 8192, 5000, true},      // tail inside the request
                                         {4096, 4096, 904, true},    // only the tail
                                         {0, 8192, 5001, false},     // wants a byte past the end
                                         {8192, 4096, 1, false}}) {  // starts past the end
      CAPTURE(r.offset);
      CAPTURE(r.need);
      std::vector<uint8_t> buf(16384, 0);
      const dscache::detail::DirectWindows::Request q{fd, &path, r.offset, r.bytes, r.need, 4096};
      if (r.ok) {
        dscache::detail::read_request(q, buf.data());
        CHECK(buf[4096] == 7);
        CHECK(buf[4096 + r.need - 1] == 7);
        CHECK(buf[4096 + (5000 - r.offset)] == 0);  // nothing past the file's end
      } else {
        try {
          dscache::detail::read_request(q, buf.data());
          FAIL("no error");
        } catch (const dscache::Error& e) {
          CHECK(e.kind() == dscache::ErrorKind::kCorruption);
          CHECK(std::string(e.what()).find("tail.bin") != std::string::npos);
        }
      }
    }
    ::close(fd);
  }

  TEST_CASE("direct_read options are validated by name") {
    TempDir dir;
    const Built built = build_cache(dir.path(), Spec{});
    struct Row {
      const char* field;
      uint32_t buffers, depth, kib;
    };
    for (const Row& r : std::vector<Row>{{"loader.direct_buffers", 1, 4, 512},
                                         {"loader.direct_buffers", 65, 4, 512},
                                         {"loader.direct_depth", 2, 0, 512},
                                         {"loader.direct_depth", 2, 65, 512},
                                         {"loader.direct_request_kib", 2, 4, 6},
                                         {"loader.direct_request_kib", 2, 4, 0}}) {
      LoaderOptions o = small_options(8);
      o.direct_buffers = r.buffers;
      o.direct_depth = r.depth;
      o.direct_request_kib = r.kib;
      const std::string reason = invalid_argument_message([&] { Loader(built.cache, o); });
      CHECK(reason.find(r.field) != std::string::npos);
    }
  }
}  // TEST_SUITE
