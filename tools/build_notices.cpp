#include "build_notices.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace dscache {
namespace {

// How the libraries' warnings begin: libpng's default warning handler (OpenCV installs none),
// libjpeg's default output_message (OpenCV's JPEG decoder overrides only error_exit), OpenCV's
// own log.
const char* const kPrefixes[] = {
    "libpng warning:",
    "libpng error:",
    "Corrupt JPEG data",
    "Premature end of JPEG file",
    "Invalid SOS parameters",
    "Warning: unknown JFIF",
    "Warning: thumbnail image size",
    "Inconsistent progression sequence",
    "Unsupported marker type",
    "[ WARN:",
};

// `text` is the start of some prefix (so may still become a warning line once it is complete).
bool could_become_warning(const std::string& text) {
  for (const char* p : kPrefixes) {
    const std::string prefix(p);
    const size_t n = std::min(prefix.size(), text.size());
    if (text.compare(0, n, prefix, 0, n) == 0) return true;
  }
  return false;
}

void write_all_fd(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // stderr gone: nothing to tell anyone
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

bool is_library_warning(const std::string& line) {
  for (const char* p : kPrefixes) {
    if (line.rfind(p, 0) == 0) return true;
  }
  return false;
}

LibraryWarnings::LibraryWarnings() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  if (fds[0] <= STDERR_FILENO || fds[1] <= STDERR_FILENO) {  // stderr (or stdin) was closed
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  std::fflush(stderr);
  saved_ = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (saved_ < 0 || ::dup2(fds[1], STDERR_FILENO) < 0) {
    if (saved_ >= 0) ::close(saved_);
    saved_ = -1;
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  ::close(fds[1]);  // fd 2 is now the only write end: restoring it ends the thread's reads
  read_ = fds[0];
  thread_ = std::thread([this] { forward(); });
}

LibraryWarnings::~LibraryWarnings() { stop(); }

void LibraryWarnings::stop() {
  if (saved_ < 0) return;
  std::fflush(stderr);
  ::dup2(saved_, STDERR_FILENO);  // closes the pipe's last write end
  thread_.join();
  ::close(read_);
  ::close(saved_);
  saved_ = read_ = -1;
}

uint64_t LibraryWarnings::total() const {
  uint64_t n = 0;
  for (const auto& w : warnings_) n += w.second;
  return n;
}

void LibraryWarnings::forward() {
  std::string pending;
  char buf[4096];
  auto record = [&](const std::string& line) {
    for (auto& w : warnings_) {
      if (w.first == line) {
        ++w.second;
        return;
      }
    }
    warnings_.emplace_back(line, 1);
  };
  // Decoding threads interleave: libpng writes its message and its "\n" apart, so two warnings
  // can arrive as "libpng warning: Alibpng warning: B\n\n". Split at each prefix; the newlines
  // owed to the extra pieces are dropped when they come.
  size_t owed_newlines = 0;
  auto record_all = [&](const std::string& line) {
    size_t begin = 0;
    for (;;) {
      size_t next = std::string::npos;
      for (const char* p : kPrefixes) {
        const size_t at = line.find(p, begin + 1);
        if (at < next) next = at;
      }
      record(line.substr(begin, next == std::string::npos ? std::string::npos : next - begin));
      if (next == std::string::npos) break;
      begin = next;
      ++owed_newlines;
    }
  };
  auto drain = [&](bool eof) {
    // Whole segments (up to '\n' or '\r', which the progress bar uses) are passed on or counted;
    // a tail without its end is passed on at once unless it may be the start of a warning.
    size_t end;
    while ((end = pending.find_first_of("\r\n")) != std::string::npos) {
      const std::string line = pending.substr(0, end);
      if (is_library_warning(line)) {
        record_all(line);
      } else if (line.empty() && pending[end] == '\n' && owed_newlines > 0) {
        --owed_newlines;
      } else {
        write_all_fd(saved_, pending.data(), end + 1);
      }
      pending.erase(0, end + 1);
    }
    if (!pending.empty() && (eof || !could_become_warning(pending))) {
      if (eof && is_library_warning(pending)) {
        record_all(pending);
      } else {
        write_all_fd(saved_, pending.data(), pending.size());
      }
      pending.clear();
    }
  };
  for (;;) {
    const ssize_t n = ::read(read_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    drain(false);
  }
  drain(true);
}

}  // namespace dscache
