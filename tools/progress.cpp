#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace dscache {
namespace {

std::string format_duration(double s) {
  if (s < 0 || s > 360000) return "--:--";
  char buf[32];
  auto t = static_cast<long>(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

}  // namespace

Progress::Progress(uint64_t total, bool quiet)
    : total_(total),
      quiet_(quiet),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::update(uint64_t done, uint64_t skipped) {
  if (quiet_) return;
  if (start_done_ == UINT64_MAX) start_done_ = done > 0 ? done - 1 : 0;  // resumed builds
  auto now = std::chrono::steady_clock::now();
  auto interval = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  if (now - last_ < interval) return;
  last_ = now;
  print(done, skipped, false);
}

void Progress::finish(uint64_t done, uint64_t skipped) {
  if (quiet_ || !tty_) return;
  print(done, skipped, true);
  std::fputc('\n', stderr);
}

void Progress::print(uint64_t done, uint64_t skipped, bool final) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  uint64_t fresh = done - (start_done_ == UINT64_MAX ? 0 : start_done_);
  double rate = elapsed > 0 ? fresh / elapsed : 0;
  double eta = rate > 0 ? (total_ - done) / rate : -1;
  double frac = total_ ? static_cast<double>(done) / total_ : 1.0;
  if (tty_) {
    constexpr int kWidth = 30;
    int filled = static_cast<int>(frac * kWidth);
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r[%s] %llu/%llu %5.1f%%  %.0f img/s  ETA %s  skipped %llu \x1b[K",
                 bar.c_str(), static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total_), frac * 100, rate,
                 final ? "00:00" : format_duration(eta).c_str(),
                 static_cast<unsigned long long>(skipped));
  } else {
    std::fprintf(stderr, "progress: %llu/%llu (%.1f%%), %.0f images/s, ETA %s, %llu skipped\n",
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                 frac * 100, rate, format_duration(eta).c_str(),
                 static_cast<unsigned long long>(skipped));
  }
  std::fflush(stderr);
}

}  // namespace dscache
