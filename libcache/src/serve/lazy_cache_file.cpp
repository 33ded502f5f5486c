// The lazy cache file's bytes: geometry, header, validation, and race-safe creation
// (lazy_cache_file.h; docs/FORMAT.md, "Lazy cache file").
#include "serve/lazy_cache_file.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "util/io_util.h"

namespace dscache {
namespace detail {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'C', 'L', 'A', 'Z', 'Y', '\0'};
constexpr uint32_t kFormatVersion = 1;  // stored; never renumber
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kAlign = 4096;          // bitmap and checksum array are padded to this
constexpr size_t kHeaderHashedBytes = 88;  // header bytes [0, 88) are covered by its XXH64

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

LazyGeometry lazy_geometry(const std::string& path, uint64_t count, SampleShape shape) {
  LazyGeometry g;
  g.count = count;
  g.shape = shape;
  g.slot_bytes = shape.bytes();
  g.bitmap_offset = kHeaderBytes;
  g.checksums_offset = g.bitmap_offset + round_up((count + 7) / 8, kAlign);
  // count * 8 cannot overflow for any count whose slots fit in 64 bits (checked next).
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max() / 2;
  if (count > kMax / 8 || count > kMax / g.slot_bytes) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "count " + std::to_string(count) + " of " + std::to_string(g.slot_bytes) +
                    "-byte samples does not fit in a 64-bit file size");
  }
  g.slots_offset = g.checksums_offset + round_up(count * 8, kAlign);
  if (count * g.slot_bytes > kMax - g.slots_offset) {
    throw Error(ErrorKind::kInvalidArgument, path, "count: cache file would exceed 2^63 bytes");
  }
  g.file_bytes = g.slots_offset + count * g.slot_bytes;
  return g;
}

namespace {

void put32(unsigned char* p, uint32_t v) {
  v = htole32(v);
  std::memcpy(p, &v, 4);
}
void put64(unsigned char* p, uint64_t v) {
  v = htole64(v);
  std::memcpy(p, &v, 8);
}
uint32_t get32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}
uint64_t get64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return le64toh(v);
}

// The 4096-byte header; field offsets are the spec's (docs/FORMAT.md).
void encode_header(const LazyGeometry& g, uint64_t digest, unsigned char* h) {
  std::memset(h, 0, kHeaderBytes);
  std::memcpy(h + 0, kMagic, 8);
  put32(h + 8, kFormatVersion);
  put32(h + 12, static_cast<uint32_t>(kHeaderBytes));
  put64(h + 16, g.count);
  put32(h + 24, g.shape.height);
  put32(h + 28, g.shape.width);
  put32(h + 32, g.shape.channels);
  put32(h + 36, 0);  // reserved
  put64(h + 40, g.slot_bytes);
  put64(h + 48, digest);
  put64(h + 56, g.bitmap_offset);
  put64(h + 64, g.checksums_offset);
  put64(h + 72, g.slots_offset);
  put64(h + 80, g.file_bytes);
  put64(h + 88, xxh64(h, kHeaderHashedBytes));
}

std::string describe(uint64_t count, SampleShape s, uint64_t digest) {
  std::ostringstream o;
  o << "count " << count << ", shape " << s.height << "x" << s.width << "x" << s.channels
    << ", source_digest 0x" << std::hex << digest;
  return o.str();
}

// Checks an existing file against the caller's (count, shape, digest). Throws Corruption for a
// file that is not a well-formed lazy cache, InvalidArgument for one made for something else.
void validate_existing(int fd, const std::string& path, const LazyGeometry& want, uint64_t digest) {
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno(path, "stat");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(size) + " bytes, less than the " +
                    std::to_string(kHeaderBytes) + "-byte lazy cache header");
  }
  unsigned char h[kHeaderBytes];
  detail::pread_all(fd, h, kHeaderBytes, 0, path, ErrorKind::kCorruption);
  if (std::memcmp(h, kMagic, 8) != 0) {
    throw Error(ErrorKind::kCorruption, path, "not a lazy cache file (bad magic)");
  }
  const uint32_t version = get32(h + 8);
  if (version > kFormatVersion) {
    throw Error(ErrorKind::kUnsupported, path,
                "lazy cache format version " + std::to_string(version) +
                    " is newer than this library's " + std::to_string(kFormatVersion));
  }
  if (get64(h + 88) != xxh64(h, kHeaderHashedBytes)) {
    throw Error(ErrorKind::kCorruption, path, "header checksum mismatch");
  }
  if (version == 0 || get32(h + 12) != kHeaderBytes) {
    throw Error(ErrorKind::kCorruption, path, "bad header (version or header size)");
  }
  const uint64_t count = get64(h + 16);
  const SampleShape shape{get32(h + 24), get32(h + 28), get32(h + 32)};
  const uint64_t file_digest = get64(h + 48);
  // The header must be self-consistent before its sizes are trusted (lazy_geometry divides by
  // the slot size: a zero side must be refused first).
  if (shape.bytes() == 0) {
    throw Error(ErrorKind::kCorruption, path, "header describes an impossible file");
  }
  LazyGeometry have;
  try {
    have = lazy_geometry(path, count, shape);
  } catch (const Error&) {
    throw Error(ErrorKind::kCorruption, path, "header describes an impossible file");
  }
  if (get64(h + 40) != have.slot_bytes || get64(h + 56) != have.bitmap_offset ||
      get64(h + 64) != have.checksums_offset || get64(h + 72) != have.slots_offset ||
      get64(h + 80) != have.file_bytes) {
    throw Error(ErrorKind::kCorruption, path, "header offsets disagree with its count and shape");
  }
  if (size != have.file_bytes) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(size) + " bytes, header says " +
                    std::to_string(have.file_bytes) + " (truncated or extended)");
  }
  if (count != want.count || shape.height != want.shape.height || shape.width != want.shape.width ||
      shape.channels != want.shape.channels || file_digest != digest) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "made for another source or shape (file: " + describe(count, shape, file_digest) +
                    "; asked: " + describe(want.count, want.shape, digest) +
                    "); delete it or use another path");
  }
}

// Removes the temp file unless released; closes its fd unless taken.
class TempGuard {
 public:
  explicit TempGuard(std::string path) : path_(std::move(path)) {}
  ~TempGuard() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempGuard(const TempGuard&) = delete;
  TempGuard& operator=(const TempGuard&) = delete;
  const std::string& path() const { return path_; }
  int fd_ = -1;
  void unlink_now() {
    ::unlink(path_.c_str());
    path_.clear();
  }
  int take_fd() { return std::exchange(fd_, -1); }

 private:
  std::string path_;
};

// Publishes `temp` as `path` only when `path` does not exist. Returns false when another
// process got there first (its file is left untouched).
bool publish_no_replace(const std::string& temp, const std::string& path) {
  if (::link(temp.c_str(), path.c_str()) == 0) return true;
  if (errno == EEXIST) return false;
  // Filesystems without hard links (vfat, some FUSE): an atomic no-replace rename if the kernel
  // and filesystem have one, else a plain rename guarded by an existence check (a narrow window
  // in which a simultaneous creator's file could be replaced; its process keeps serving from
  // its own mapping and only that process's fills are lost).
  if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != ENOSYS &&
      errno != EMLINK) {
    throw_errno(path, "link " + temp + " to");
  }
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
    return true;
  }
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS) throw_errno(path, "rename " + temp + " to");
  if (::access(path.c_str(), F_OK) == 0) return false;
  if (::rename(temp.c_str(), path.c_str()) != 0) throw_errno(path, "rename " + temp + " to");
  return true;
}

// Creates the file under a temporary name, complete (header written, metadata areas
// allocated, slots sparse), and publishes it. Returns an open read-write fd, or -1 when another
// creator won the race (the caller then opens the winner's file).
int create_file(const std::string& path, const LazyGeometry& g, uint64_t digest) {
  const auto tid = static_cast<long>(::syscall(SYS_gettid));
  TempGuard temp(path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(tid));
  temp.fd_ = ::open(temp.path().c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (temp.fd_ < 0) throw_errno(temp.path(), "create");
  // Sparse: the slot area takes disk space only as samples are filled.
  if (::ftruncate(temp.fd_, static_cast<off_t>(g.file_bytes)) != 0) {
    throw_errno(temp.path(), "truncate to " + std::to_string(g.file_bytes) + " bytes");
  }
  // Header, bitmap and checksum array are written through the mapping: allocate them now so a
  // full disk fails here with an error instead of a SIGBUS later. Slots are written with
  // pwrite(), which reports ENOSPC.
  const int rc = ::posix_fallocate(temp.fd_, 0, static_cast<off_t>(g.slots_offset));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    errno = rc;
    throw_errno(temp.path(), "allocate header, bitmap and checksums");
  }
  unsigned char header[kHeaderBytes];
  encode_header(g, digest, header);
  detail::pwrite_all(temp.fd_, header, kHeaderBytes, 0, temp.path());
  if (::fsync(temp.fd_) != 0) throw_errno(temp.path(), "fsync");
  if (!publish_no_replace(temp.path(), path)) return -1;
  temp.unlink_now();  // after link(): drop the temp name; after a rename it is already gone
  try {
    fsync_directory(detail::dir_name(path));
  } catch (const Error&) {
    // The file itself is synced; a lost directory entry only means a cold start next time.
  }
  return temp.take_fd();
}

// An existing file, opened O_NONBLOCK (a FIFO must not block the open): a regular file, then
// blocking again, then validate_existing.
void check_opened(int fd, const std::string& path, const LazyGeometry& g, uint64_t digest) {
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno(path, "stat");
  if (!S_ISREG(st.st_mode)) {  // a FIFO or device: never map or wait on it
    throw Error(ErrorKind::kCorruption, path,
                "not a regular file (" + file_type_name(st.st_mode) + ")");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  validate_existing(fd, path, g, digest);
}

}  // namespace

int open_lazy_file(const std::string& path, const LazyGeometry& g, uint64_t digest) {
  // A lost creation race falls back to opening the winner's file (complete before it got its
  // name).
  for (int attempt = 0;; ++attempt) {
    if (attempt == 8) throw Error(ErrorKind::kIOError, path, "file keeps appearing and vanishing");
    const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      try {
        check_opened(fd, path, g, digest);
      } catch (...) {
        ::close(fd);
        throw;
      }
      return fd;
    }
    if (errno != ENOENT) throw_errno(path, "open");
    const int created = create_file(path, g, digest);
    if (created >= 0) return created;
  }
}

}  // namespace detail
}  // namespace dscache
