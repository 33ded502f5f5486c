// File: regular-file-only opening (see file.h).
#include "dscache/file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "dscache/error.h"

namespace dscache {

namespace {

constexpr int kOpenFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;

[[noreturn]] void throw_open_error(const std::string& shown, int err, FollowSymlinks follow) {
  if (err == ENOENT || err == ENOTDIR) throw Error(ErrorKind::kNotFound, shown, "no such file");
  if (err == ELOOP && follow == FollowSymlinks::kNo) {
    throw Error(ErrorKind::kCorruption, shown, "is a symlink (not allowed here)");
  }
  if (err == ENXIO) {  // a socket, or a FIFO opened for writing with no reader
    throw Error(ErrorKind::kCorruption, shown, "not a regular file");
  }
  errno = err;
  throw_errno(shown, "open");
}

// The path a descriptor refers to now, through /proc; empty when /proc is not mounted.
std::string proc_fd_target(int fd) {
  char buf[PATH_MAX + 1];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, PATH_MAX);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFLNK:
      return "a symlink";
  }
  return "of unknown type";
}

File::File(int fd, std::string path, uint64_t size)
    : fd_(fd), path_(std::move(path)), size_(size) {}

File::File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), size_(o.size_) {
  o.fd_ = -1;
  o.size_ = 0;
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    size_ = o.size_;
    o.fd_ = -1;
    o.size_ = 0;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

int File::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

namespace {

// fstat + S_ISREG on a freshly opened descriptor, then O_NONBLOCK off. Closes `fd` on error.
uint64_t check_regular(int fd, const std::string& shown) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    throw_errno(shown, "stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::kCorruption, shown,
                "not a regular file (" + file_type_name(st.st_mode) + ")");
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

File File::open(const std::string& path, FollowSymlinks follow) {
  if (path.empty()) throw Error(ErrorKind::kNotFound, path, "empty file name");
  const int flags = kOpenFlags | (follow == FollowSymlinks::kNo ? O_NOFOLLOW : 0);
  int fd;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_open_error(path, errno, follow);
  const uint64_t size = check_regular(fd, path);
  return File(fd, path, size);
}

File File::open_at(int dirfd, const std::string& name, const std::string& shown,
                   FollowSymlinks follow) {
  if (name.empty()) throw Error(ErrorKind::kNotFound, shown, "empty file name");
  const int flags = kOpenFlags | (follow == FollowSymlinks::kNo ? O_NOFOLLOW : 0);
  int fd;
  do {
    fd = ::openat(dirfd, name.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_open_error(shown, errno, follow);
  const uint64_t size = check_regular(fd, shown);
  return File(fd, shown, size);
}

File File::open_inside(int dirfd, const std::string& dir_real, const std::string& name,
                       const std::string& shown) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    throw Error(ErrorKind::kCorruption, shown, "not a plain file name");
  }
  int fd;
  do {
    fd = ::openat(dirfd, name.c_str(), kOpenFlags | O_NOFOLLOW);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0 && errno == ELOOP) {
    // A symlink: follow it, then ask the kernel where the descriptor really leads. O_NONBLOCK
    // keeps a link to a FIFO from blocking here.
    do {
      fd = ::openat(dirfd, name.c_str(), kOpenFlags);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) {
        throw Error(ErrorKind::kCorruption, shown, "symlink leads nowhere (dangling)");
      }
      throw_errno(shown, "open");
    }
    std::string target = proc_fd_target(fd);
    if (target.empty()) {  // no /proc: resolve the name instead (racy, but still checked)
      char* resolved = ::realpath((dir_real + "/" + name).c_str(), nullptr);
      if (resolved != nullptr) {
        target = resolved;
        std::free(resolved);
      }
    }
    const std::string inside = dir_real == "/" ? "/" : dir_real + "/";
    if (target.compare(0, inside.size(), inside) != 0) {
      ::close(fd);
      throw Error(ErrorKind::kCorruption, shown,
                  "symlink leads outside the cache directory (to " + target + ")");
    }
  } else if (fd < 0) {
    throw_open_error(shown, errno, FollowSymlinks::kYes);
  }
  const uint64_t size = check_regular(fd, shown);
  return File(fd, shown, size);
}

std::string File::fd_path() const {
  const std::string p = "/proc/self/fd/" + std::to_string(fd_);
  return ::access(p.c_str(), R_OK) == 0 ? p : path_;
}

void File::read_at(uint64_t offset, uint64_t n, void* out) const {
  auto* p = static_cast<unsigned char*>(out);
  const uint64_t start = offset, total = n;
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd_, p, want, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno(path_, "read");
    }
    if (got == 0) {
      throw Error(ErrorKind::kCorruption, path_,
                  "file ends at " + std::to_string(offset) + ", before the " +
                      std::to_string(total) + " bytes at " + std::to_string(start));
    }
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

std::string File::read_all(uint64_t max_bytes) const {
  if (size_ > max_bytes) {
    throw Error(ErrorKind::kCorruption, path_,
                "file holds " + std::to_string(size_) + " bytes, more than the " +
                    std::to_string(max_bytes) + " allowed");
  }
  std::string out(static_cast<size_t>(size_), '\0');
  if (size_ > 0) read_at(0, size_, &out[0]);
  return out;
}

}  // namespace dscache
