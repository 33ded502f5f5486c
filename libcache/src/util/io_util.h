// Small POSIX I/O helpers shared by the library's file code.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "dscache/error.h"

namespace dscache {
namespace detail {

// Reads exactly `size` bytes at `offset`, retrying short reads and EINTR. A premature end of
// file is Error(eof_kind, path): IOError for our own files, Corruption for files we validate.
inline void pread_all(int fd, void* out, size_t size, uint64_t offset, const std::string& path,
                      ErrorKind eof_kind) {
  auto* p = static_cast<unsigned char*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(path, "read");
    }
    if (n == 0) throw Error(eof_kind, path, "unexpected end of file");
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// Writes exactly `size` bytes at `offset`, retrying short writes and EINTR; failures are
// Error(IOError) naming `path`.
inline void pwrite_all(int fd, const void* data, size_t size, uint64_t offset,
                       const std::string& path) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(path, "write");
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// The directory part of a path ("." when there is none).
inline std::string dir_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace detail
}  // namespace dscache
