// AtomicFile: temp file + fsync + rename, with the checksum computed while writing.
#include "dscache/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "util/io_util.h"

namespace dscache {
namespace {

constexpr size_t kHashBlock = size_t{4} << 20;  // 4 MiB reads when hashing a file

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

struct AtomicFile::HashState {
  Xxh64 hash;
  uint64_t writeback_from = 0;  // bytes before this offset have had write-back started
};

namespace {
// Start write-back every this many bytes so that commit()'s fsync has little left to flush and
// a large shard does not stall its writer for a second at the end.
constexpr uint64_t kWritebackChunk = 32ull << 20;
}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_(path_ + ".tmp-" + std::to_string(::getpid())) {
  auto hash = std::make_unique<HashState>();
  fd_ = ::open(temp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno(temp_, "create");
  hash_ = hash.release();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
  delete hash_;
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw Error(ErrorKind::kInvalidArgument, path_, "write after commit");
  const auto* p = static_cast<const unsigned char*>(data);
  if (hash_valid_) hash_->hash.update(p, size);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(temp_, "write");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  size_ += size;
  if (size_ - hash_->writeback_from >= kWritebackChunk) {
    // Asynchronous: initiates write-back of the range and returns (Linux only; best effort).
    ::sync_file_range(fd_, static_cast<off_t>(hash_->writeback_from),
                      static_cast<off_t>(size_ - hash_->writeback_from), SYNC_FILE_RANGE_WRITE);
    hash_->writeback_from = size_;
  }
}

void AtomicFile::pwrite(const void* data, size_t size, uint64_t offset) {
  if (fd_ < 0) throw Error(ErrorKind::kInvalidArgument, path_, "write after commit");
  hash_valid_ = false;
  detail::pwrite_all(fd_, data, size, offset, temp_);
  if (offset + size > size_) size_ = offset + size;
}

FileEntry AtomicFile::commit() {
  if (fd_ < 0) throw Error(ErrorKind::kInvalidArgument, path_, "commit called twice");
  uint64_t digest;
  if (hash_valid_) {
    digest = hash_->hash.digest();
  } else {
    // pwrite() changed bytes already hashed: hash the file as it now is.
    Xxh64 h;
    std::vector<unsigned char> buf(static_cast<size_t>(std::min<uint64_t>(size_, kHashBlock)));
    for (uint64_t at = 0; at < size_;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(size_ - at, kHashBlock));
      detail::pread_all(fd_, buf.data(), n, at, temp_, ErrorKind::kIOError);
      h.update(buf.data(), n);
      at += n;
    }
    digest = h.digest();
  }
  if (::fsync(fd_) != 0) throw_errno(temp_, "fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_errno(temp_, "close");
  if (::rename(temp_.c_str(), path_.c_str()) != 0) throw_errno(path_, "rename " + temp_ + " to");
  temp_.clear();  // nothing left for the destructor to remove
  fsync_directory(detail::dir_name(path_));
  return FileEntry{base_name(path_), size_, digest};
}

FileEntry write_file_atomic(const std::string& path, const void* data, size_t size) {
  AtomicFile f(path);
  f.write(data, size);
  return f.commit();
}

FileEntry hash_file(const std::string& path) { return hash_file(File::open(path)); }

FileEntry hash_file(const File& file) {
  std::vector<unsigned char> buf(kHashBlock);
  Xxh64 h;
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(file.fd(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(file.path(), "read");
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  return FileEntry{base_name(file.path()), total, h.digest()};
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno(dir, "open directory");
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    ::close(fd);
    errno = err;
    throw_errno(dir, "fsync directory");
  }
  ::close(fd);
}

}  // namespace dscache
