// dscache::Error: the one exception type at the library boundary.
#include "dscache/error.h"

#include <cerrno>
#include <cstring>

namespace dscache {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNotFound:
      return "NotFound";
    case ErrorKind::kCorruption:
      return "Corruption";
    case ErrorKind::kInvalidArgument:
      return "InvalidArgument";
    case ErrorKind::kIOError:
      return "IOError";
    case ErrorKind::kUnsupported:
      return "Unsupported";
    case ErrorKind::kBusy:
      return "Busy";
    case ErrorKind::kRemote:
      return "Remote";
  }
  return "Unknown";
}

namespace {

std::string format_message(ErrorKind kind, const std::string& path, const std::string& reason) {
  std::string msg = to_string(kind);
  msg += ": ";
  if (!path.empty()) {
    msg += path;
    msg += ": ";
  }
  msg += reason;
  return msg;
}

}  // namespace

Error::Error(ErrorKind kind, std::string path, std::string reason)
    : std::runtime_error(format_message(kind, path, reason)),
      kind_(kind),
      path_(std::move(path)),
      reason_(std::move(reason)) {}

void throw_errno(const std::string& path, const std::string& what) {
  const int err = errno;
  throw Error(ErrorKind::kIOError, path, what + ": " + std::strerror(err));
}

}  // namespace dscache
