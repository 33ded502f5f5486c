// How much memory a cache may use, and MemoryMode::kAuto's choice between mmap and pread.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "dscache/cache.h"

namespace dscache {
namespace {

// The first whitespace-separated token of a small file; empty when it cannot be read.
std::string first_token(const std::string& path) {
  std::ifstream in(path);
  std::string t;
  if (in) in >> t;
  return t;
}

// A decimal number, or UINT64_MAX for "max" / anything unreadable (no limit known).
uint64_t number_or_max(const std::string& t) {
  if (t.empty() || t == "max") return UINT64_MAX;
  uint64_t v = 0;
  for (char ch : t) {
    if (ch < '0' || ch > '9') return UINT64_MAX;
    const uint64_t d = static_cast<uint64_t>(ch - '0');
    if (v > (UINT64_MAX - d) / 10) return UINT64_MAX;
    v = v * 10 + d;
  }
  return v;
}

// The room left under the limits of `dir` and each of its ancestors up to `root`: limit - usage
// of the tightest, UINT64_MAX when none is limited.
uint64_t cgroup_room(const std::string& root, std::string rel, const char* limit_file,
                     const char* usage_file) {
  uint64_t room = UINT64_MAX;
  while (true) {
    const std::string dir = root + rel;
    const uint64_t limit = number_or_max(first_token(dir + "/" + limit_file));
    // cgroup v1 reports "no limit" as a huge page-aligned number (LONG_MAX rounded down).
    if (limit < (uint64_t{1} << 62)) {
      const uint64_t usage = number_or_max(first_token(dir + "/" + usage_file));
      const uint64_t left = usage == UINT64_MAX ? 0 : (usage >= limit ? 0 : limit - usage);
      if (left < room) room = left;
    }
    if (rel.empty() || rel == "/") break;
    const size_t slash = rel.find_last_of('/');
    rel = slash == std::string::npos || slash == 0 ? std::string() : rel.substr(0, slash);
  }
  return room;
}

uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return UINT64_MAX;
}

}  // namespace

uint64_t available_memory_bytes() {
  uint64_t avail = mem_available();
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-id:controller-list:path"; v2 is "0::path".
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    uint64_t room = UINT64_MAX;
    if (controllers.empty()) {
      room = cgroup_room("/sys/fs/cgroup", path, "memory.max", "memory.current");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      room = cgroup_room("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                         "memory.usage_in_bytes");
    }
    if (room < avail) avail = room;
  }
  return avail;
}

MemoryMode choose_memory_mode(uint64_t data_bytes, uint64_t available, Layout layout, Codec codec) {
  if (layout == Layout::kRagged && codec == Codec::kRaw) return MemoryMode::kPageCache;
  return data_bytes <= available ? MemoryMode::kPageCache : MemoryMode::kPread;
}

}  // namespace dscache
