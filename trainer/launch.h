// dscache-train --nproc-per-node N: start N ranks on this machine as torchrun would and
// supervise them.
#pragma once

#include <string>
#include <vector>

namespace dscache {
namespace train {

// `args` without argv[0] with every --nproc-per-node removed (the ranks must not launch again).
std::vector<std::string> strip_nproc_option(const std::vector<std::string>& args);

// Re-executes this program (/proc/self/exe) `nproc` times with `child_args` and the variables
// torchrun sets for a single node: RANK = LOCAL_RANK = ROLE_RANK = i, WORLD_SIZE =
// LOCAL_WORLD_SIZE = ROLE_WORLD_SIZE = nproc, GROUP_RANK = 0, GROUP_WORLD_SIZE = 1,
// ROLE_NAME = default, MASTER_ADDR = 127.0.0.1, MASTER_PORT = a free port,
// TORCHELASTIC_RUN_ID = a random id, TORCHELASTIC_RESTART_COUNT = 0,
// TORCHELASTIC_MAX_RESTARTS = 0, TORCHELASTIC_USE_AGENT_STORE = False, and OMP_NUM_THREADS = 1
// when unset. The ranks share stdout and stderr (no prefixes). When a rank fails (non-zero exit
// or a signal) the others get SIGTERM and, after `grace_seconds`, SIGKILL; the result is the
// first failed rank's code (128 + signal number when it was killed). When this process gets
// SIGINT or SIGTERM (SIGHUP: SIGTERM) it forwards it to every rank, which stop after the same
// step and checkpoint; it waits `stop_grace_seconds` for them (then SIGKILL), and returns the
// first non-zero code a rank exits with (128 + N after a clean stop). A second signal at least
// 1 s after the first kills the ranks at once. 0 when every rank exited 0. Throws
// std::runtime_error when a rank cannot be started. Not thread-safe (signal handlers).
int launch_local(int nproc, const std::vector<std::string>& child_args, int grace_seconds = 10,
                 int stop_grace_seconds = 60);

}  // namespace train
}  // namespace dscache
