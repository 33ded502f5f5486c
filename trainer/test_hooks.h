// Test hooks of dscache-train: a point after each step where a test can kill, stop or signal the
// process, so the resume and stop tests (tests/trainer/) hit a chosen step deterministically, and
// one per batch that logs the samples each step took.
#pragma once

#include <cstdint>

namespace dscache {
namespace train {

// Called once after every optimizer step, with the run's global step count (1 after the first
// step) and this process's rank, once that step's checkpoint (if any) is written. Does nothing
// unless the environment asks for it (read once, at the first call):
//   DSCACHE_TEST_KILL_AFTER_STEPS=N  raises SIGKILL in this process after step N (0 = never);
//   DSCACHE_TEST_KILL_RANK=R         only on rank R (default: every rank);
//   DSCACHE_TEST_KILL_SIGNAL=S       raises signal S instead (15: the SIGTERM stop path);
//   DSCACHE_TEST_STOP_INSTEAD        set: raises SIGSTOP instead of SIGKILL (the test sends
//                                    SIGCONT or SIGKILL); KILL_SIGNAL takes precedence;
//   DSCACHE_TEST_SIGNAL_TWICE        set, with KILL_SIGNAL: raises S again 1.2 s later.
// Called from the training thread only.
void step_hook(uint64_t step, int rank);

// Called for every training batch the step loop takes, before its forward pass, with the epoch
// (0-based), the optimizer step it belongs to (1-based, over the run), this process's rank and
// the batch's sample indices (and, for a mixture, their sources; null otherwise). With
// DSCACHE_TEST_SAMPLE_LOG=FILE set, appends one line to FILE: "EPOCH STEP RANK INDEX..." (a
// mixture: "EPOCH STEP RANK SOURCE:INDEX...") in a single O_APPEND write, so ranks can share the
// file (the elastic resume tests compare the samples of every step). Otherwise does nothing.
void batch_hook(uint64_t epoch, uint64_t step, int rank, const uint64_t* indices,
                const uint32_t* sources, uint32_t size);

}  // namespace train
}  // namespace dscache
