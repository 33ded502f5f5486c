// Private: read-only file mappings (no SIGBUS from a short file: the size is checked on the
// descriptor mapped, and a later truncation is an error, not a crash) and private anonymous
// copies. Which files may be mapped at all (no symlink out of the cache directory) is
// CacheDir's check, at open (cache_dir.h).
#pragma once

#include <cstdint>
#include <string>

namespace dscache {
namespace detail {

// One mmap()ed region, unmapped on destruction. Move-only. Const access is thread-safe; the
// bytes stay at the same address for the region's lifetime.
class MappedRegion {
 public:
  MappedRegion() = default;
  MappedRegion(MappedRegion&& o) noexcept;
  MappedRegion& operator=(MappedRegion&& o) noexcept;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;
  ~MappedRegion();

  // Maps the whole file open on `fd` read-only, MAP_SHARED (fd is not closed; the mapping
  // outlives it). The file must hold exactly `expected_bytes` (> 0) bytes, checked with fstat on
  // the descriptor that is mapped, so the mapping never reaches past the end of the file. Errors
  // name `path`: IOError / Corruption / Unsupported.
  static MappedRegion map_fd(int fd, const std::string& path, uint64_t expected_bytes);
  // Private anonymous memory of `bytes` (> 0), zero-filled and writable until
  // protect_read_only(). Throws IOError (naming `what`) when the kernel refuses.
  static MappedRegion anonymous(uint64_t bytes, const std::string& what);

  // madvise() over the whole region; best effort (a refused hint changes nothing we rely on).
  void advise(int advice) const;
  // Drops write permission: views handed out from a copy cannot be written through by mistake.
  void protect_read_only();

  uint8_t* data() { return static_cast<uint8_t*>(addr_); }
  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
  uint64_t size() const { return size_; }

 private:
  void reset();
  void* addr_ = nullptr;
  uint64_t size_ = 0;
};

// memcpy(dst, src, n) from a file mapping, turning the SIGBUS a file truncated under the mapping
// raises into Error(kCorruption, path, "file shrank while mapped (truncated by another
// process?)"). A SIGBUS elsewhere, or in a thread not inside guarded_copy, goes to the handler
// that was installed before ours (the default: the process dies, as it would without us).
void guarded_copy(void* dst, const void* src, size_t n, const std::string& path);

}  // namespace detail
}  // namespace dscache
