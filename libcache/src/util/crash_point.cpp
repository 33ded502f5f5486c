#include "dscache/crash_point.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dscache {
namespace {

struct HookConfig {
  std::string trace;                // DSCACHE_TEST_CRASH_TRACE
  unsigned long long at = 0;        // DSCACHE_TEST_CRASH_AT; 0 = never
  std::string kill_name;            // DSCACHE_TEST_KILL_AT=NAME:K
  unsigned long long kill_nth = 0;  // K; 0 = never
  unsigned long long kill_seen = 0;
  std::string pause;  // DSCACHE_TEST_PAUSE_AT
  bool paused = false;
  unsigned long long passed = 0;
  bool any() const { return !trace.empty() || at != 0 || kill_nth != 0 || !pause.empty(); }
};

HookConfig& config() {
  static HookConfig c = [] {
    HookConfig h{};
    const char* v = std::getenv("DSCACHE_TEST_CRASH_TRACE");
    if (v != nullptr) h.trace = v;
    v = std::getenv("DSCACHE_TEST_CRASH_AT");
    h.at = v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
    v = std::getenv("DSCACHE_TEST_KILL_AT");
    if (v != nullptr && std::strchr(v, ':') != nullptr) {
      const char* colon = std::strrchr(v, ':');
      h.kill_name.assign(v, colon);
      h.kill_nth = std::strtoull(colon + 1, nullptr, 10);
    }
    v = std::getenv("DSCACHE_TEST_PAUSE_AT");
    if (v != nullptr) h.pause = v;
    return h;
  }();
  return c;
}

}  // namespace

void crash_point(const char* name) {
  HookConfig& c = config();
  if (!c.any()) return;
  ++c.passed;
  if (!c.trace.empty()) {
    if (FILE* f = std::fopen(c.trace.c_str(), "a")) {
      std::fprintf(f, "%llu %s\n", c.passed, name);
      std::fclose(f);
    }
  }
  if (c.at != 0 && c.passed == c.at) std::raise(SIGKILL);
  if (c.kill_nth != 0 && c.kill_name == name && ++c.kill_seen == c.kill_nth) std::raise(SIGKILL);
  if (!c.paused && !c.pause.empty() && c.pause == name) {
    c.paused = true;
    std::raise(SIGSTOP);
  }
}

}  // namespace dscache
