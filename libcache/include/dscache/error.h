// The one exception type thrown across the dscache library boundary.
#pragma once

#include <stdexcept>
#include <string>

namespace dscache {

// What went wrong, coarsely; callers map these to exit codes.
enum class ErrorKind {
  kNotFound,         // a file or directory that must exist does not
  kCorruption,       // a file exists but its bytes disagree with the format or the manifest
  kInvalidArgument,  // the caller asked for something impossible (bad option, index out of range)
  kIOError,          // the operating system refused a read, write, rename, mmap...
  kUnsupported,      // valid input this build cannot handle (e.g. HDF5 without HDF5 support)
  kBusy,             // another process holds the lock on the path (dscache/lock.h)
  kRemote,           // object storage (s3://, http(s)://) refused or failed after its retries;
                     // path() is the URL (never a credential), reason() the HTTP status or cause
};

const char* to_string(ErrorKind kind);

// what() reads "Corruption: images-00012.npy: header says 4096 samples, file holds 4095".
// Immutable after construction; safe to copy between threads.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string path, std::string reason);

  ErrorKind kind() const { return kind_; }
  const std::string& path() const { return path_; }
  const std::string& reason() const { return reason_; }

 private:
  ErrorKind kind_;
  std::string path_;
  std::string reason_;
};

// Throws Error(kIOError, path, "<what>: <strerror(errno)>"). Call right after a failed syscall.
[[noreturn]] void throw_errno(const std::string& path, const std::string& what);

}  // namespace dscache
