// stderr's width and its open progress line.
#include "terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace dscache {
namespace train {

namespace {

std::atomic<bool> g_line_open{false};
static_assert(std::atomic<bool>::is_always_lock_free, "end_progress_line must be signal-safe");

}  // namespace

int stderr_columns() {
  if (const char* env = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v < 100000) return static_cast<int>(v);
  }
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

void mark_progress_line_open() { g_line_open.store(true); }

void end_progress_line() {
  if (g_line_open.exchange(false)) (void)!::write(STDERR_FILENO, "\n", 1);
}

}  // namespace train
}  // namespace dscache
