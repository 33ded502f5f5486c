// The open-file budget of a cache writer, which holds one file per field open while it writes a
// shard: checked before the first write rather than met as EMFILE midway. Internal to dscache.
#pragma once

#include <cstdint>
#include <string>

namespace dscache {

// The files a writer keeps open besides its field files (shard, lock, side files, the
// process's own descriptors), so a build that passes the check does not meet the limit later.
constexpr uint64_t kOpenFileReserve = 64;

// Throws Error(kUnsupported, path, ...) naming the field count and the limit when `fields`
// field files plus kOpenFileReserve exceed this process's open-file limit (RLIMIT_NOFILE, the
// soft limit: `ulimit -n`).
void check_field_file_budget(uint64_t fields, const std::string& path);

}  // namespace dscache
