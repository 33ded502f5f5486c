// Private: this machine's physical memory, the bound the Loader checks what it would allocate
// against up front (its ring of batch buffers, a mixture's epoch order).
#pragma once

#include <unistd.h>

#include <cstdint>

namespace dscache {
namespace detail {

// Bytes of physical memory (UINT64_MAX when unknown): nothing larger can ever be allocated, so
// options that need more are refused by name instead of failing an allocation.
inline uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  uint64_t bytes = 0;
  if (pages <= 0 || page <= 0 || __builtin_mul_overflow(uint64_t(pages), uint64_t(page), &bytes)) {
    return UINT64_MAX;
  }
  return bytes;
}

}  // namespace detail
}  // namespace dscache
