// The process-wide remote options and is_remote_location (dscache/remote.h); in every build,
// with or without libcurl, so callers need no #ifdef.
#include "dscache/remote.h"

#include <cctype>
#include <mutex>

namespace dscache {

namespace {

std::mutex& options_mutex() {
  static std::mutex m;
  return m;
}

RemoteOptions& stored_options() {
  static RemoteOptions options;
  return options;
}

bool starts_with_nocase(const std::string& s, const char* prefix) {
  size_t i = 0;
  for (; prefix[i] != '\0'; ++i) {
    if (i >= s.size() ||
        std::tolower(static_cast<unsigned char>(s[i])) != static_cast<unsigned char>(prefix[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool is_remote_location(const std::string& path) {
  return starts_with_nocase(path, "s3://") || starts_with_nocase(path, "http://") ||
         starts_with_nocase(path, "https://");
}

void set_remote_options(const RemoteOptions& options) {
  std::lock_guard<std::mutex> lock(options_mutex());
  stored_options() = options;
}

RemoteOptions remote_options() {
  std::lock_guard<std::mutex> lock(options_mutex());
  return stored_options();
}

}  // namespace dscache
