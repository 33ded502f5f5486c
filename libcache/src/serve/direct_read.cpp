// LoaderOptions::direct_read: kAuto's rule (page cache room vs the cache's bytes) and the
// Loader's choice, with the one-line reason Loader::direct_read_reason() reports.
#include "dscache/direct_read.h"

#include <cstdio>
#include <memory>
#include <string>

#include "dscache/cache.h"
#include "dscache/loader.h"
#include "serve/direct_windows.h"

namespace dscache {
namespace {

// "1.2 GiB", "290 MiB", "17 B": for reasons a person reads.
std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
  }
  return buf;
}

}  // namespace

DirectReadDecision decide_direct_read(uint64_t bytes_needed, const PageCacheRoom& room) {
  const uint64_t avail = page_cache_room_bytes(room);
  const char* what = "MemAvailable";
  if (room.budget_override) {
    what = "DSCACHE_DIRECT_READ_BUDGET_BYTES";
  } else if (room.cgroup_limit && *room.cgroup_limit < kNoCgroupLimit &&
             avail < room.mem_available) {
    what = "cgroup limit";
  }
  if (avail == UINT64_MAX && !room.budget_override) {
    return {false, "cache " + human_bytes(bytes_needed) +
                       ": no memory limit known (MemAvailable unreadable, no cgroup limit)"};
  }
  const std::string tail = " available to this process's page cache (" + std::string(what) + ")";
  if (bytes_needed > avail) {
    return {true, "cache " + human_bytes(bytes_needed) + " > " + human_bytes(avail) + tail};
  }
  return {false, "cache " + human_bytes(bytes_needed) + " fits in " + human_bytes(avail) + tail};
}

namespace detail {

DirectReadDecision choose_direct_read(const SampleSource& source, const LoaderOptions& o,
                                      bool plain_copy) {
  const std::string setting = kDirectReadNames.to_string(o.direct_read);
  if (o.direct_read == DirectRead::kOff) return {false, "off: direct_read off"};
  const auto* cache = dynamic_cast<const Cache*>(&source);
  const char* missing = nullptr;
  if (o.sampler.shuffle != Shuffle::kWindowed) {
    missing = "the windowed shuffle";
  } else if (cache == nullptr || cache->memory_mode() != MemoryMode::kPread) {
    missing = "a Cache open in pread memory mode";
  } else if (cache->streaming_budget() != 0) {
    missing = "a cache on local disk (this one streams from object storage)";
  } else if (!plain_copy || source.encoded()) {
    missing = "the raw fixed layout and crop none";
  }
  if (missing != nullptr) {
    return {false, setting + ": not applicable (O_DIRECT windows need " + missing + ")"};
  }
  if (o.direct_read == DirectRead::kOn) return {true, "on: direct_read on"};
  DirectReadDecision d = decide_direct_read(source.stored_bytes(), probe_page_cache_room());
  d.reason = "auto: " + d.reason;
  return d;
}

std::string describe(const DirectReadDecision& choice, bool refused) {
  return refused ? choice.reason + "; the file system refused O_DIRECT: page cache" : choice.reason;
}

}  // namespace detail
}  // namespace dscache
