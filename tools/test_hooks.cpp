#include "test_hooks.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dscache {
namespace {

struct HookConfig {
  std::string trace;      // DSCACHE_TEST_CRASH_TRACE
  unsigned long long at;  // DSCACHE_TEST_CRASH_AT; 0 = never
  std::string pause;      // DSCACHE_TEST_PAUSE_AT
  bool paused = false;
  unsigned long long passed = 0;
};

HookConfig& config() {
  static HookConfig c = [] {
    HookConfig h{};
    const char* v = std::getenv("DSCACHE_TEST_CRASH_TRACE");
    if (v != nullptr) h.trace = v;
    v = std::getenv("DSCACHE_TEST_CRASH_AT");
    h.at = v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
    v = std::getenv("DSCACHE_TEST_PAUSE_AT");
    if (v != nullptr) h.pause = v;
    return h;
  }();
  return c;
}

}  // namespace

void crash_point(const char* name) {
  HookConfig& c = config();
  if (c.trace.empty() && c.at == 0 && c.pause.empty()) return;
  ++c.passed;
  if (!c.trace.empty()) {
    if (FILE* f = std::fopen(c.trace.c_str(), "a")) {
      std::fprintf(f, "%llu %s\n", c.passed, name);
      std::fclose(f);
    }
  }
  if (c.at != 0 && c.passed == c.at) std::raise(SIGKILL);
  if (!c.paused && !c.pause.empty() && c.pause == name) {
    c.paused = true;
    std::raise(SIGSTOP);
  }
}

}  // namespace dscache
