// dscache-train: parse the command line, run training (or launch and supervise ranks), map errors
// to exit codes (safety.h: 0 ok, 1 error, 2 usage, 3 distributed: a rank missing, gone or silent,
// 4 output in use, 5 no checkpoint verifies, 128 + N stopped by signal N).
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "distributed.h"
#include "dscache/error.h"
#include "launch.h"
#include "options.h"
#include "safety.h"
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

// "rank 1 of 2: " when this process is one rank of several (set by torchrun or the launcher).
std::string rank_prefix() {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (!rank || !world || std::atoi(world) <= 1) return "";
  return std::string("rank ") + rank + " of " + world + ": ";
}

// torchrun --max-restarts restarts every rank with TORCHELASTIC_RESTART_COUNT > 0: continue from
// the last checkpoint as --resume does (which starts afresh, saying so, when there is none).
void resume_on_restart(dscache::train::TrainOptions* o) {
  const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (!count || std::atoi(count) <= 0 || o->resume) return;
  o->force = false;  // --force started the first attempt over; a restart continues it
  if (o->output.empty()) {
    std::fprintf(stderr,
                 "dscache-train: %sTORCHELASTIC_RESTART_COUNT=%s but no --output: nothing to "
                 "resume from, starting afresh\n",
                 rank_prefix().c_str(), count);
    return;
  }
  std::fprintf(stderr,
               "dscache-train: %sTORCHELASTIC_RESTART_COUNT=%s: restarted by the launcher, "
               "resuming from %s/checkpoint.pt (as --resume)\n",
               rank_prefix().c_str(), count, o->output.c_str());
  o->resume = true;
}

// A Gloo failure inside a collective (a peer closed the connection, or stayed silent past the
// timeout) surfaces as a c10::Error whose message names Gloo's source file.
bool is_gloo_failure(const std::string& what) {
  return !rank_prefix().empty() && what.find("gloo") != std::string::npos;
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
    if (options.nproc_per_node > 0) {
      const char* world = std::getenv("WORLD_SIZE");
      if (world && std::atoi(world) > 1) {
        throw UsageError("nproc-per-node: WORLD_SIZE=" + std::string(world) +
                         " is already set (started by torchrun or another launcher?); "
                         "use one or the other");
      }
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache-train: %s\n(see dscache-train --help)\n", e.what());
    return 2;
  }
  if (options.nproc_per_node > 0) {
    try {
      return launch_local(static_cast<int>(options.nproc_per_node), strip_nproc_option(args));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dscache-train: launcher: %s\n", e.what());
      return 1;
    }
  }
  resume_on_restart(&options);
  const std::string who = rank_prefix();
  install_stop_signals(who);
  try {
    return run_training(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache-train: %s%s\n", who.c_str(), e.what());
    return kExitUsage;
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "dscache-train: %s%s\n", who.c_str(), e.what());
    return kExitError;
  } catch (const DistributedError& e) {
    std::fprintf(stderr, "dscache-train: %s%s\n", who.c_str(), e.what());
    return kExitDistributed;
  } catch (const OutputInUseError& e) {
    std::fprintf(stderr, "dscache-train: %s%s\n", who.c_str(), e.what());
    return kExitOutputInUse;
  } catch (const CheckpointError& e) {
    std::fprintf(stderr, "dscache-train: %s%s\n", who.c_str(), e.what());
    return kExitCheckpoint;
  } catch (const std::filesystem::filesystem_error& e) {
    // std's text reads "filesystem error: cannot create directories: Permission denied [p]".
    std::fprintf(stderr, "dscache-train: %s%s: %s\n", who.c_str(), e.path1().c_str(),
                 e.code().message().c_str());
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "dscache-train: %sout of memory (try a smaller --batch or --prefetch)\n",
                 who.c_str());
    return kExitError;
  } catch (const std::exception& e) {
    if (is_gloo_failure(e.what())) {
      std::fprintf(stderr,
                   "dscache-train: %sa collective failed: another rank exited or stopped "
                   "responding for --dist-timeout (%u s); see its output above. Gloo: %s\n",
                   who.c_str(), options.dist_timeout, e.what());
      return kExitDistributed;
    }
    std::fprintf(stderr, "dscache-train: %serror: %s\n", who.c_str(), e.what());
    return kExitError;
  }
}
