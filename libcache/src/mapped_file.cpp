// Private mmap/file helpers for the Cache: see mapped_file.h.
#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <limits>

#include "dscache/error.h"

namespace dscache {
namespace detail {

MappedRegion::MappedRegion(MappedRegion&& o) noexcept : addr_(o.addr_), size_(o.size_) {
  o.addr_ = nullptr;
  o.size_ = 0;
}

MappedRegion& MappedRegion::operator=(MappedRegion&& o) noexcept {
  if (this != &o) {
    reset();
    addr_ = o.addr_;
    size_ = o.size_;
    o.addr_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedRegion::~MappedRegion() { reset(); }

void MappedRegion::reset() {
  if (addr_ != nullptr) ::munmap(addr_, static_cast<size_t>(size_));
  addr_ = nullptr;
  size_ = 0;
}

MappedRegion MappedRegion::map_file(const std::string& path, uint64_t expected_bytes) {
  if (expected_bytes == 0) {
    throw Error(ErrorKind::kInvalidArgument, path, "refusing to map an empty file");
  }
  if (expected_bytes > std::numeric_limits<size_t>::max()) {
    throw Error(ErrorKind::kUnsupported, path, "file is larger than the address space");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw Error(ErrorKind::kNotFound, path, "no such file");
    throw_errno(path, "open");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    throw_errno(path, "stat");
  }
  // Checked again on the very descriptor we map: the file may have changed since the lstat.
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != expected_bytes) {
    ::close(fd);
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(st.st_size) + " bytes, manifest says " +
                    std::to_string(expected_bytes));
  }
  void* addr = ::mmap(nullptr, static_cast<size_t>(expected_bytes), PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file (and its pages) alive, even after a rename/unlink
  if (addr == MAP_FAILED) {
    errno = err;
    throw_errno(path, "mmap");
  }
  MappedRegion r;
  r.addr_ = addr;
  r.size_ = expected_bytes;
  return r;
}

MappedRegion MappedRegion::anonymous(uint64_t bytes, const std::string& what) {
  if (bytes == 0) throw Error(ErrorKind::kInvalidArgument, what, "refusing to map 0 bytes");
  if (bytes > std::numeric_limits<size_t>::max()) {
    throw Error(ErrorKind::kUnsupported, what, "copy is larger than the address space");
  }
  void* addr = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) throw_errno(what, "mmap " + std::to_string(bytes) + " private bytes");
  MappedRegion r;
  r.addr_ = addr;
  r.size_ = bytes;
  return r;
}

void MappedRegion::advise(int advice) const {
  if (addr_ != nullptr) ::madvise(addr_, static_cast<size_t>(size_), advice);
}

void MappedRegion::protect_read_only() {
  if (addr_ != nullptr) ::mprotect(addr_, static_cast<size_t>(size_), PROT_READ);
}

std::string real_path(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR)
      throw Error(ErrorKind::kNotFound, path, "no such file");
    throw_errno(path, "realpath");
  }
  std::string s(resolved);
  std::free(resolved);
  return s;
}

void check_cache_file(const std::string& dir, const std::string& dir_real, const std::string& name,
                      uint64_t expected_bytes) {
  const std::string path = dir + "/" + name;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      throw Error(ErrorKind::kNotFound, path, "no such file (the manifest names it)");
    }
    throw_errno(path, "lstat");
  }
  if (S_ISLNK(st.st_mode)) {
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (resolved == nullptr) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) {
        throw Error(ErrorKind::kCorruption, path, "symlink leads nowhere (dangling)");
      }
      throw_errno(path, "realpath");
    }
    const std::string target(resolved);
    std::free(resolved);
    const std::string inside = dir_real == "/" ? "/" : dir_real + "/";
    if (target.compare(0, inside.size(), inside) != 0) {
      throw Error(ErrorKind::kCorruption, path,
                  "symlink leads outside the cache directory (to " + target + ")");
    }
    if (::stat(path.c_str(), &st) != 0) throw_errno(path, "stat");
  }
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::kCorruption, path, "not a regular file");
  if (static_cast<uint64_t>(st.st_size) != expected_bytes) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(st.st_size) + " bytes, manifest says " +
                    std::to_string(expected_bytes));
  }
}

}  // namespace detail
}  // namespace dscache
