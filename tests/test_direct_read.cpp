// DirectRead::kAuto's rule (page cache room vs the cache's bytes) as a table, and the probe of
// this machine's /proc/meminfo and memory cgroup.
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "dscache/cache.h"
#include "dscache/direct_read.h"
#include "dscache/error.h"
#include "scoped_env.h"

namespace {

using dscache::PageCacheRoom;
using dscache::test::ScopedEnv;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr std::optional<uint64_t> kNone = std::nullopt;

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("direct_read auto: O_DIRECT exactly when the cache exceeds the page cache's room") {
    struct Case {
      const char* name;
      uint64_t bytes, mem_available;
      std::optional<uint64_t> limit, usage, budget;
      uint64_t room;  // page_cache_room_bytes
      bool direct;
      const char* reason;  // a part of the reason
    };
    const Case cases[] = {
        {"fits in MemAvailable", 900, 1000, kNone, kNone, kNone, 1000, false,
         "fits in 1000 B available to this process's page cache (MemAvailable)"},
        {"exactly fits", 1000, 1000, kNone, kNone, kNone, 1000, false, "fits in"},
        {"does not fit", 1001, 1000, kNone, kNone, kNone, 1000, true,
         "cache 1001 B > 1000 B available to this process's page cache (MemAvailable)"},
        {"cgroup tighter than MemAvailable", 500, 1000, 800, 400, kNone, 400, true,
         "(cgroup limit)"},
        {"cgroup looser than MemAvailable", 500, 400, 10000, 0, kNone, 400, true, "(MemAvailable)"},
        {"cgroup room fits", 300, 1000, 800, 400, kNone, 400, false, "fits in 400 B"},
        {"cgroup usage over its limit", 1, 1000, 100, 200, kNone, 0, true, "> 0 B"},
        {"cgroup usage unreadable: counted as 0", 700, 1000, 800, kNone, kNone, 800, false,
         "fits in 800 B"},
        {"no cgroup limit", 900, 1000, kNone, kNone, kNone, 1000, false, "(MemAvailable)"},
        {"cgroup v1 'unlimited' (LONG_MAX rounded to a page)", 900, 1000,
         uint64_t{9223372036854771712u}, 5, kNone, 1000, false, "(MemAvailable)"},
        {"the issue's cgroup: 1.17 GB vs 300 MiB limit, 10 MiB used", 1170000000, 20000 * kMiB,
         300 * kMiB, 10 * kMiB, kNone, 290 * kMiB, true,
         "cache 1.1 GiB > 290 MiB available to this process's page cache (cgroup limit)"},
        {"hook: a tiny budget", 100, UINT64_MAX, kNone, kNone, 1, 1, true,
         "(DSCACHE_DIRECT_READ_BUDGET_BYTES)"},
        {"hook: a huge budget over a tight cgroup", 5000, 1000, 800, 0, UINT64_MAX - 1,
         UINT64_MAX - 1, false, "(DSCACHE_DIRECT_READ_BUDGET_BYTES)"},
        {"nothing known", 1 << 30, UINT64_MAX, kNone, kNone, kNone, UINT64_MAX, false,
         "no memory limit known"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      PageCacheRoom room;
      room.mem_available = c.mem_available;
      room.cgroup_limit = c.limit;
      room.cgroup_usage = c.usage;
      room.budget_override = c.budget;
      CHECK(dscache::page_cache_room_bytes(room) == c.room);
      const dscache::DirectReadDecision d = dscache::decide_direct_read(c.bytes, room);
      CHECK(d.direct == c.direct);
      CAPTURE(d.reason);
      CHECK(d.reason.find(c.reason) != std::string::npos);
      CHECK(d.reason.find('\n') == std::string::npos);
    }
  }

  TEST_CASE("the page cache probe reads this machine's meminfo and memory cgroup") {
    ScopedEnv no_hook("DSCACHE_DIRECT_READ_BUDGET_BYTES", nullptr);
    const PageCacheRoom room = dscache::probe_page_cache_room();
    REQUIRE(room.mem_total != UINT64_MAX);
    REQUIRE(room.mem_available != UINT64_MAX);
    CHECK(room.mem_total >= 64 * kMiB);
    CHECK(room.mem_available > 0);
    CHECK(room.mem_available <= room.mem_total);
    CHECK(!room.budget_override);
    if (room.cgroup_limit) {  // a limit it found is a real one, in a cgroup it names
      CHECK(*room.cgroup_limit < dscache::kNoCgroupLimit);
      CHECK(room.cgroup.rfind("/sys/fs/cgroup", 0) == 0);
    }
    const uint64_t bytes = dscache::page_cache_room_bytes(room);
    CHECK(bytes <= room.mem_available);
    // What MemoryMode::kAuto compares with: the same probe without the hook (a moment later,
    // so allow for the machine's churn).
    const uint64_t again = dscache::available_memory_bytes();
    CHECK(again <= room.mem_total);
    CHECK((again > bytes ? again - bytes : bytes - again) < room.mem_total / 4);
  }

  TEST_CASE("the budget hook replaces the probe, and a malformed one is an error naming it") {
    {
      ScopedEnv hook("DSCACHE_DIRECT_READ_BUDGET_BYTES", "12345");
      const PageCacheRoom room = dscache::probe_page_cache_room();
      REQUIRE(room.budget_override);
      CHECK(*room.budget_override == 12345);
      CHECK(dscache::page_cache_room_bytes(room) == 12345);
      CHECK(dscache::available_memory_bytes() != 12345);  // the Cache's rule ignores the hook
    }
    for (const char* bad : {"", "12k", "-1", "99999999999999999999999"}) {
      CAPTURE(bad);
      ScopedEnv hook("DSCACHE_DIRECT_READ_BUDGET_BYTES", bad);
      try {
        dscache::probe_page_cache_room();
        FAIL("no error");
      } catch (const dscache::Error& e) {
        CHECK(e.kind() == dscache::ErrorKind::kInvalidArgument);
        CHECK(std::string(e.what()).find("DSCACHE_DIRECT_READ_BUDGET_BYTES") != std::string::npos);
      }
    }
  }
}  // TEST_SUITE
