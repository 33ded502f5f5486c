// Opening the files a user or a manifest names: regular files only, never a FIFO or a device.
#pragma once

#include <cstdint>
#include <string>

namespace dscache {

// Whether opening follows a symlink at the last component of the name.
enum class FollowSymlinks {
  kYes,  // a symlink is followed (a path the user typed); the target must be a regular file
  kNo,   // a symlink is refused (O_NOFOLLOW): Error(kCorruption, path, "is a symlink")
};

// A read-only descriptor of a regular file, with the size fstat saw when it was opened.
// Move-only; closes the descriptor on destruction. Const methods are thread-safe (pread).
//
// Every open uses O_RDONLY | O_NONBLOCK | O_CLOEXEC, so opening a FIFO cannot block waiting for
// a writer; fstat then refuses anything that is not S_ISREG (FIFO, socket, character or block
// device such as /dev/zero, directory) before a byte is read, and O_NONBLOCK is cleared again
// (reads of a regular file ignore it; clearing it keeps the descriptor ordinary for callers
// that hand it to other libraries).
class File {
 public:
  File() = default;
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  // Opens `path`. Errors name `path`: NotFound (no such file), Corruption ("not a regular file
  // (a FIFO)", "is a symlink" with kNo), IOError (any other refusal, with strerror).
  static File open(const std::string& path, FollowSymlinks follow = FollowSymlinks::kYes);
  // Opens `name` relative to the directory descriptor `dirfd` (openat). `shown` is the path
  // errors name (e.g. "DIR/name").
  static File open_at(int dirfd, const std::string& name, const std::string& shown,
                      FollowSymlinks follow = FollowSymlinks::kNo);
  // Opens the plain name `name` (no '/') inside the directory open as `dirfd`, whose resolved
  // path is `dir_real`: a symlink is followed only when the file it leads to lies inside
  // `dir_real` ("symlink leads outside the cache directory (to /etc/passwd)", "symlink leads
  // nowhere (dangling)": Corruption). A missing file is NotFound. Errors name `shown`.
  static File open_inside(int dirfd, const std::string& dir_real, const std::string& name,
                          const std::string& shown);

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }  // as errors name it
  uint64_t size() const { return size_; }            // st_size at open
  // "/proc/self/fd/N": a name that reopens this very file (for libraries that open by name,
  // such as HDF5) while /proc is mounted; path() otherwise.
  std::string fd_path() const;

  // Reads exactly `n` bytes at `offset`; a file that ends first is Corruption naming path()
  // ("file ends at X, before the N bytes at Y"); read errors are IOError.
  void read_at(uint64_t offset, uint64_t n, void* out) const;
  // The whole file as a string. Corruption when it holds more than `max_bytes`, checked against
  // size() before anything is allocated; a file that grows while read is cut at size().
  std::string read_all(uint64_t max_bytes) const;
  // Gives up ownership of the descriptor (the caller closes it).
  int release();

 private:
  File(int fd, std::string path, uint64_t size);
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

// "a FIFO", "a directory", "a character device", ... for `st_mode` (for messages).
std::string file_type_name(unsigned mode);

}  // namespace dscache
