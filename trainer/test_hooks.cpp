#include "test_hooks.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
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

}  // namespace train
}  // namespace dscache
