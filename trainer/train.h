// dscache-train's entry point: one training run described by TrainOptions (no torch types).
#pragma once

#include "options.h"

namespace dscache {
namespace train {

// Trains (and validates, checkpoints, logs) as `options` says; options must have passed
// resolve_and_validate(). Throws UsageError for an inconsistent request found only now (a
// checkpoint from other settings, a validation cache of another shape, cuda without CUDA),
// dscache::Error for a bad cache, the errors of safety.h (OutputInUseError, OutputLockedError,
// CheckpointError, DivergedError), DistributedError, ExitCodeError (rank 0's verdict on --output,
// for the other ranks), std::runtime_error for everything else (torch errors included, their
// backtrace dropped). dscache::exit_code_for() gives each its exit code.
// Returns 0 when the run is complete, or 128 + N when signal N (SIGINT/SIGTERM) stopped it after
// its checkpoint was written (install_stop_signals() first, or signals keep their defaults).
int run_training(const TrainOptions& options);

}  // namespace train
}  // namespace dscache
