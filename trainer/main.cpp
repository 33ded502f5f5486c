// dscache-train: parse the command line, run training (or launch and supervise ranks); errors
// become exit codes through run_command (dscache/exit_codes.h: the table dscache shares; 128 + N
// stopped by signal N).
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "distributed.h"
#include "dscache/exit_codes.h"
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

// "rank 1 of 2: " when this process is one rank of several (torchrun's variables, the launcher's,
// or a Slurm job step's); "" when alone or when the variables are malformed (said elsewhere).
std::string rank_prefix() {
  try {
    const dscache::train::DistEnv e = dscache::train::dist_env_from_environment();
    if (e.world_size <= 1) return "";
    return "rank " + std::to_string(e.rank) + " of " + std::to_string(e.world_size) + ": ";
  } catch (const std::exception&) {
    return "";
  }
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

// The run, with a failed collective said as such: a Gloo failure is a c10::Error naming Gloo's
// source file, which becomes a DistributedError explaining what happened.
int train_or_explain(const dscache::train::TrainOptions& options) {
  using namespace dscache::train;
  try {
    return run_training(options);
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    if (!is_gloo_failure(e.what())) throw;
    throw DistributedError(
        "a collective failed: another rank exited or stopped responding for "
        "--dist-timeout (" +
        std::to_string(options.dist_timeout) + " s); see its output above. Gloo: " + e.what());
  }
}

// Parses and validates the command line into `options`. Returns false when --help was asked
// for (and printed). Throws UsageError.
bool parse_command_line(const std::vector<std::string>& args,
                        dscache::train::TrainOptions* options) {
  using namespace dscache::train;
  bool help = false;
  std::string help_text;
  *options = parse_options(args, &help, &help_text);
  if (help) {
    std::fputs(help_text.c_str(), stdout);
    return false;
  }
  resolve_and_validate(options);
  if (options->nproc_per_node > 0) {
    const char* world = std::getenv("WORLD_SIZE");
    if (world && std::atoi(world) > 1) {
      throw dscache::UsageError("nproc-per-node: WORLD_SIZE=" + std::string(world) +
                                " is already set (started by torchrun or another launcher?); "
                                "use one or the other");
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dscache::train;
  using dscache::ExitCode;
  keep_freed_memory();
  std::vector<std::string> args(argv + 1, argv + argc);
  TrainOptions options;
  bool go = false;  // parsed, and not --help
  const int rc = dscache::run_command(
      "dscache-train",
      [&] {
        go = parse_command_line(args, &options);
        return 0;
      },
      [](const std::exception&, ExitCode code) {
        if (code == ExitCode::kUsage) std::fputs("(see dscache-train --help)\n", stderr);
      });
  if (!go) return rc;
  if (options.nproc_per_node > 0) {
    return dscache::run_command("dscache-train: launcher", [&] {
      return launch_local(static_cast<int>(options.nproc_per_node), strip_nproc_option(args));
    });
  }
  resume_on_restart(&options);
  const std::string rank = rank_prefix();  // "rank 1 of 2: " or ""
  install_stop_signals(rank);
  const std::string who = "dscache-train: " + rank;
  return dscache::run_command(
      who.substr(0, who.size() - 2),  // "dscache-train" or "dscache-train: rank 1 of 2"
      [&] { return train_or_explain(options); },
      [&](const std::exception& e, ExitCode) {
        if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
          std::fprintf(stderr, "%stry a smaller --batch or --prefetch\n", who.c_str());
        }
      });
}
