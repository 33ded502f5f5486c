// Free space where a cache will be written, and the build's decision on it (`dscache build`
// refuses to start a write its estimate says cannot fit; docs/BUILD.md "Dry run and space check").
#pragma once

#include <cstdint>
#include <string>

namespace dscache {

// What statvfs says about the filesystem a path is (or will be) written on. Plain value type.
struct FreeSpace {
  std::string probed;  // the path asked about: the path itself or its nearest existing ancestor
  std::string mount_point;  // the top of that filesystem (the highest ancestor on the same device)
  uint64_t available = 0;   // bytes an unprivileged writer may still use (f_bavail * f_frsize)
  uint64_t block = 0;       // the allocation unit (f_frsize): a file occupies whole blocks
};

// Free space of the filesystem `path` will be on: statvfs of `path`, or of its nearest existing
// ancestor when it does not exist yet (a relative path is taken from the working directory).
// Throws Error(kIOError, path, reason) when no ancestor can be asked (never for a missing path).
FreeSpace free_space_for(const std::string& path);

// The space check of a write estimated at `estimate` bytes, of which `existing` bytes are already
// on disk (a resumed build's kept shards), on a filesystem with `available` bytes free. Pure.
struct SpaceDecision {
  uint64_t needed = 0;  // what is left to write: estimate - existing, 0 when existing covers it
  bool fits = true;     // needed <= available
};
SpaceDecision decide_space(uint64_t estimate, uint64_t existing, uint64_t available);

// Bytes the regular files under `dir` occupy (allocated blocks, st_blocks * 512; recursively,
// symlinks not followed); 0 when `dir` does not exist. What a resumed write already holds.
uint64_t bytes_under(const std::string& dir);

}  // namespace dscache
