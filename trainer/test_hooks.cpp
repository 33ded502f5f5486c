#include "test_hooks.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace dscache {
namespace train {
namespace {

struct HookConfig {
  uint64_t kill_after = 0;    // DSCACHE_TEST_KILL_AFTER_STEPS; 0 = never
  bool any_rank = true;       // DSCACHE_TEST_KILL_RANK unset
  int rank = 0;               // DSCACHE_TEST_KILL_RANK
  bool has_signal = false;    // DSCACHE_TEST_KILL_SIGNAL set
  int signal = 0;             // its value
  bool stop_instead = false;  // DSCACHE_TEST_STOP_INSTEAD
  bool twice = false;         // DSCACHE_TEST_SIGNAL_TWICE
  std::string sample_log;     // DSCACHE_TEST_SAMPLE_LOG; "" = none
};

const HookConfig& config() {
  static const HookConfig c = [] {
    HookConfig h;
    if (const char* v = std::getenv("DSCACHE_TEST_KILL_AFTER_STEPS")) {
      h.kill_after = std::strtoull(v, nullptr, 10);
    }
    if (const char* v = std::getenv("DSCACHE_TEST_KILL_RANK")) {
      h.any_rank = false;
      h.rank = std::atoi(v);
    }
    if (const char* v = std::getenv("DSCACHE_TEST_KILL_SIGNAL")) {
      h.has_signal = true;
      h.signal = std::atoi(v);
    }
    h.stop_instead = std::getenv("DSCACHE_TEST_STOP_INSTEAD") != nullptr;
    h.twice = std::getenv("DSCACHE_TEST_SIGNAL_TWICE") != nullptr;
    if (const char* v = std::getenv("DSCACHE_TEST_SAMPLE_LOG")) h.sample_log = v;
    return h;
  }();
  return c;
}

}  // namespace

void step_hook(uint64_t step, int rank) {
  const HookConfig& c = config();
  if (c.kill_after == 0 || step != c.kill_after || (!c.any_rank && c.rank != rank)) return;
  std::raise(c.has_signal ? c.signal : c.stop_instead ? SIGSTOP : SIGKILL);
  if (c.has_signal && c.twice) {  // a second one while the first is being handled
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    std::raise(c.signal);
  }
}

void batch_hook(uint64_t epoch, uint64_t step, int rank, const uint64_t* indices,
                const uint32_t* sources, uint32_t size) {
  const HookConfig& c = config();
  if (c.sample_log.empty()) return;
  std::string line =
      std::to_string(epoch) + " " + std::to_string(step) + " " + std::to_string(rank);
  for (uint32_t i = 0; i < size; ++i) {
    line += " " + (sources ? std::to_string(sources[i]) + ":" : std::string()) +
            std::to_string(indices[i]);
  }
  line += "\n";
  const int fd = ::open(c.sample_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const bool ok =
      fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("DSCACHE_TEST_SAMPLE_LOG: cannot append to " + c.sample_log);
}

}  // namespace train
}  // namespace dscache
