// Warnings that image libraries print on stderr while the build decodes (libpng via OpenCV:
// "libpng warning: iCCP: known incorrect sRGB profile"; libjpeg: "Corrupt JPEG data: 2 extraneous
// bytes before marker 0xd9"; OpenCV's "[ WARN:...]"). They are not errors (the sample decodes),
// but one line per file floods a --quiet build. LibraryWarnings takes them out of stderr and
// counts them; the build prints one summary line instead (none under --quiet).
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dscache {

// True for a line (without its line end) that an image library printed.
bool is_library_warning(const std::string& line);

// While alive, file descriptor 2 is a pipe read by a thread that passes everything through to
// the real stderr except library warning lines, which it counts. If the pipe cannot be made,
// nothing is captured (stderr stays as it was).
class LibraryWarnings {
 public:
  LibraryWarnings();
  ~LibraryWarnings();
  LibraryWarnings(const LibraryWarnings&) = delete;
  LibraryWarnings& operator=(const LibraryWarnings&) = delete;

  // Puts stderr back and waits until everything written so far has been passed on. Idempotent.
  void stop();

  // The distinct warnings, in the order first seen, with how often each came (after stop()).
  const std::vector<std::pair<std::string, uint64_t>>& warnings() const { return warnings_; }
  uint64_t total() const;

 private:
  void forward();  // the thread's body

  int saved_ = -1;  // the real stderr
  int read_ = -1;   // the pipe's read end
  std::thread thread_;
  std::vector<std::pair<std::string, uint64_t>> warnings_;
};

}  // namespace dscache
