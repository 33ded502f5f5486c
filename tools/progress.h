// Build progress on stderr: a redrawn bar on a TTY, a plain line every few seconds otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dscache {

// Called from one thread only (the pipeline's serial writer stage). Cheap when nothing prints.
class Progress {
 public:
  Progress(uint64_t total, bool quiet);
  void update(uint64_t done, uint64_t skipped);  // done counts built + skipped entries
  void finish(uint64_t done, uint64_t skipped);  // final line (TTY) / nothing (plain)

 private:
  void print(uint64_t done, uint64_t skipped, bool final);

  uint64_t total_;
  bool quiet_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
  uint64_t start_done_ = UINT64_MAX;
};

}  // namespace dscache
