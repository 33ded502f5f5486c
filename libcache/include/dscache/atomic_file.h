// A file written under a temporary name and renamed into place only when complete.
#pragma once

#include <cstdint>
#include <string>

#include "dscache/manifest.h"

namespace dscache {

class File;

// Owns `<path>.tmp-<pid>` until commit() renames it to `path`; the destructor removes an
// uncommitted temp file, so a failed write leaves nothing behind. Not thread-safe.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates/truncates the temp file; throws IOError
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);  // appends; updates size and checksum
  void pwrite(const void* data, size_t size, uint64_t offset);  // overwrite; invalidates checksum
  uint64_t size() const { return size_; }
  // fsync, rename into place, fsync the directory. Returns name (basename), size, XXH64 of the
  // file's final bytes (re-read if pwrite() was used).
  FileEntry commit();
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool hash_valid_ = true;
  struct HashState;
  HashState* hash_;  // owned; opaque so the header stays small
};

// Writes a whole file atomically.
FileEntry write_file_atomic(const std::string& path, const void* data, size_t size);

// Makes renames inside `dir` durable (fsync of the directory). Filesystems that refuse to
// fsync a directory (EINVAL, EROFS) are tolerated; anything else throws IOError.
void fsync_directory(const std::string& dir);

// XXH64 and size of a file on disk, read sequentially. Throws NotFound/IOError, and Corruption
// for anything but a regular file (a FIFO would block forever, /dev/zero never ends).
FileEntry hash_file(const std::string& path);
// The same on an open file, read from its current position (a fresh File: the whole file).
FileEntry hash_file(const File& file);

}  // namespace dscache
