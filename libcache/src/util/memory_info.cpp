// How much memory a cache may use, and MemoryMode::kAuto's choice between mmap and pread: the
// probe of /proc/meminfo and the memory cgroup behind available_memory_bytes() and
// probe_page_cache_room().
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "dscache/cache.h"
#include "dscache/direct_read.h"
#include "dscache/error.h"

namespace dscache {
namespace {

// The first whitespace-separated token of a small file; empty when it cannot be read.
std::string first_token(const std::string& path) {
  std::ifstream in(path);
  std::string t;
  if (in) in >> t;
  return t;
}

// A decimal number; nullopt for "max", an empty string or anything else.
std::optional<uint64_t> decimal(const std::string& t) {
  if (t.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char ch : t) {
    if (ch < '0' || ch > '9') return std::nullopt;
    const uint64_t d = static_cast<uint64_t>(ch - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

uint64_t room_under(uint64_t limit, std::optional<uint64_t> usage) {
  const uint64_t used = usage.value_or(0);
  return used >= limit ? 0 : limit - used;
}

// The limit of `rel` (a /proc/self/cgroup path) or of an ancestor up to `root` that leaves the
// least room; `*out` keeps the tightest seen so far (across hierarchies).
void tightest_cgroup(const std::string& root, std::string rel, const char* limit_file,
                     const char* usage_file, PageCacheRoom* out) {
  while (true) {
    const std::string dir = root + rel;
    const std::optional<uint64_t> limit = decimal(first_token(dir + "/" + limit_file));
    if (limit && *limit < kNoCgroupLimit) {
      const std::optional<uint64_t> usage = decimal(first_token(dir + "/" + usage_file));
      if (!out->cgroup_limit ||
          room_under(*limit, usage) < room_under(*out->cgroup_limit, out->cgroup_usage)) {
        out->cgroup_limit = limit;
        out->cgroup_usage = usage;
        out->cgroup = dir;
      }
    }
    if (rel.empty() || rel == "/") break;
    const size_t slash = rel.find_last_of('/');
    rel = slash == std::string::npos || slash == 0 ? std::string() : rel.substr(0, slash);
  }
}

// MemAvailable and MemTotal from /proc/meminfo (UINT64_MAX where missing).
void read_meminfo(PageCacheRoom* out) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") out->mem_available = kib * 1024;
    if (key == "MemTotal:") out->mem_total = kib * 1024;
  }
}

// Memory and cgroup only: no hook (what available_memory_bytes() reports).
PageCacheRoom probe_memory() {
  PageCacheRoom room;
  read_meminfo(&room);
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-id:controller-list:path"; v2 is "0::path".
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controllers.empty()) {
      tightest_cgroup("/sys/fs/cgroup", path, "memory.max", "memory.current", &room);
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      tightest_cgroup("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                      "memory.usage_in_bytes", &room);
    }
  }
  return room;
}

}  // namespace

PageCacheRoom probe_page_cache_room() {
  PageCacheRoom room = probe_memory();
  if (const char* hook = std::getenv("DSCACHE_DIRECT_READ_BUDGET_BYTES"); hook != nullptr) {
    room.budget_override = decimal(hook);
    if (!room.budget_override) {
      throw Error(ErrorKind::kInvalidArgument, "",
                  std::string("DSCACHE_DIRECT_READ_BUDGET_BYTES '") + hook +
                      "' is not a decimal number of bytes");
    }
  }
  return room;
}

uint64_t page_cache_room_bytes(const PageCacheRoom& room) {
  if (room.budget_override) return *room.budget_override;
  uint64_t bytes = room.mem_available;
  if (room.cgroup_limit && *room.cgroup_limit < kNoCgroupLimit) {
    const uint64_t left = room_under(*room.cgroup_limit, room.cgroup_usage);
    if (left < bytes) bytes = left;
  }
  return bytes;
}

uint64_t available_memory_bytes() { return page_cache_room_bytes(probe_memory()); }

MemoryMode choose_memory_mode(uint64_t data_bytes, uint64_t available, Layout layout, Codec codec) {
  if (layout == Layout::kRagged && codec == Codec::kRaw) return MemoryMode::kPageCache;
  return data_bytes <= available ? MemoryMode::kPageCache : MemoryMode::kPread;
}

}  // namespace dscache
