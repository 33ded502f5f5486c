// dscache-train: parse the command line, run training, map errors to exit codes
// (0 ok, 1 error, 2 usage).
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "options.h"
#include "train.h"

namespace {

// LibTorch on CPU has no caching allocator: every activation and gradient is malloc'd and freed
// each micro-step. With glibc's defaults, freeing them shrinks the heap (brk) or unmaps them, and
// the next step faults the same pages back in: 19% of cnn's time was in the kernel here and bf16
// ran 25-35% slower than the same loop in Python (whose heap is pinned by its own objects).
// Keep freed memory for reuse: mmap only above 32 MiB (glibc's maximum) and trim the heap only
// beyond 512 MiB free. RSS stays at the working set's peak. A user's GLIBC_TUNABLES or
// MALLOC_*_ settings win.
void keep_freed_memory() {
#ifdef __GLIBC__
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables && std::strstr(tunables, "glibc.malloc.")) ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    return;
  }
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dscache::train;
  keep_freed_memory();
  std::vector<std::string> args(argv + 1, argv + argc);
  TrainOptions options;
  try {
    bool help = false;
    std::string help_text;
    options = parse_options(args, &help, &help_text);
    if (help) {
      std::fputs(help_text.c_str(), stdout);
      return 0;
    }
    resolve_and_validate(&options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache-train: %s\n(see dscache-train --help)\n", e.what());
    return 2;
  }
  try {
    run_training(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache-train: %s\n", e.what());
    return 2;
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "dscache-train: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dscache-train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
