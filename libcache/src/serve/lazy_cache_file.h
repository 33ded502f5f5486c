// The lazy cache file's bytes (docs/FORMAT.md, "Lazy cache file"): where everything lies for a
// (count, shape), the header, and opening an existing file or creating a new one safely beside
// other processes. LazyCache (lazy_cache.cpp) maps what open_lazy_file returns.
#pragma once

#include <cstdint>
#include <string>

#include "dscache/shard.h"  // SampleShape

namespace dscache {
namespace detail {

// Where everything is, as a pure function of (count, shape). Offsets are what the header stores
// and what a reader recomputes to check it.
struct LazyGeometry {
  uint64_t count = 0;
  SampleShape shape;
  uint64_t slot_bytes = 0;
  uint64_t bitmap_offset = 0;
  uint64_t checksums_offset = 0;
  uint64_t slots_offset = 0;
  uint64_t file_bytes = 0;
};

// The geometry of `count` samples of `shape` (shape.bytes() > 0); InvalidArgument naming `path`
// when the file would not fit in 2^63 bytes.
LazyGeometry lazy_geometry(const std::string& path, uint64_t count, SampleShape shape);

// Opens the file at `path` read-write if it exists, checked against `g` and `digest`
// (Corruption for a file that is not a well-formed lazy cache or not a regular file,
// InvalidArgument for one made for another source or shape); else creates it complete under a
// temporary name and publishes it without replacing a file another process made meanwhile
// (whose file is then opened instead). Returns the open fd; the caller closes it.
int open_lazy_file(const std::string& path, const LazyGeometry& g, uint64_t digest);

}  // namespace detail
}  // namespace dscache
