// DirectRead: whether a Loader reads out-of-core windows with O_DIRECT, and kAuto's rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dscache/enum_table.h"

namespace dscache {

// LoaderOptions::direct_read. The O_DIRECT path itself applies only with the kWindowed
// shuffle, a Cache open in MemoryMode::kPread, the raw fixed layout and crop none; elsewhere
// every setting serves through the page cache.
enum class DirectRead {
  kOff,   // always through the page cache (WILLNEED, pread, DONTNEED)
  kOn,    // O_DIRECT wherever the path applies and the file system accepts it
  kAuto,  // kOn when the page cache cannot hold the cache (decide_direct_read), else kOff.
          // The default.
};

// "off", "on", "auto" (dscache bench's --direct-read and Python's direct_read= keyword).
extern const EnumTable<DirectRead> kDirectReadNames;

// What the page cache of this process has room for, as probe_page_cache_room() found it.
struct PageCacheRoom {
  uint64_t mem_available = UINT64_MAX;  // /proc/meminfo MemAvailable, bytes; UINT64_MAX: unknown
  uint64_t mem_total = UINT64_MAX;      // /proc/meminfo MemTotal, bytes; UINT64_MAX: unknown
  // The memory cgroup (v2 memory.max / memory.current, or v1 memory.limit_in_bytes /
  // memory.usage_in_bytes) of this process, or of an ancestor, whose limit leaves the least
  // room; nullopt: no limit ("max", or v1's huge "unlimited" number).
  std::optional<uint64_t> cgroup_limit;  // bytes
  std::optional<uint64_t> cgroup_usage;  // bytes; nullopt: unreadable (counted as 0)
  std::string cgroup;                    // that cgroup's directory under /sys/fs/cgroup
  // Test and benchmark hook: the environment variable DSCACHE_DIRECT_READ_BUDGET_BYTES, when
  // set, replaces MemAvailable and the cgroup in kAuto's rule (e.g. 1 forces O_DIRECT on a
  // small cache). nullopt: not set.
  std::optional<uint64_t> budget_override;
};

// Reads /proc/meminfo, /proc/self/cgroup and the cgroup files it names, and the hook variable.
// Files that cannot be read leave their fields unknown; a hook value that is not a decimal
// number of bytes is Error(kInvalidArgument) naming the variable.
PageCacheRoom probe_page_cache_room();

// A cgroup limit at or above this is "no limit" (cgroup v1 reports none as LONG_MAX rounded
// down to a page).
constexpr uint64_t kNoCgroupLimit = uint64_t{1} << 62;

// The bytes this process can still keep in page cache: budget_override when set, else the
// smaller of MemAvailable and the cgroup's limit - usage (0 when usage >= limit).
uint64_t page_cache_room_bytes(const PageCacheRoom& room);

struct DirectReadDecision {
  bool direct = false;  // read with O_DIRECT
  std::string reason;   // one line, e.g. "cache 1.2 GiB > 290 MiB available to this process's
                        // page cache (cgroup limit)"
};

// kAuto's rule, pure: O_DIRECT when `bytes_needed` (the bytes the epochs read: the whole
// cache's stored sample bytes, since over epochs a rank's windows visit every sample and ranks
// on one machine share its page cache) exceed page_cache_room_bytes(room); else the page
// cache, which then keeps the cache for the next epoch.
DirectReadDecision decide_direct_read(uint64_t bytes_needed, const PageCacheRoom& room);

}  // namespace dscache
