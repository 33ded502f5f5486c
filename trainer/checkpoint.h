// OUTPUT/checkpoint.pt and OUTPUT/model.pt: what a resumable checkpoint holds, the settings it
// must agree with, and their atomic save and load.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "amp.h"
#include "data.h"
#include "dscache/loader.h"
#include "models.h"
#include "options.h"

namespace dscache {
namespace train {

// Everything a checkpoint holds besides model, optimizer, scaler and normalization.
struct RunState {
  uint64_t global_step = 0;  // optimizer steps attempted (windows done), skipped ones included
  uint64_t sched_step = 0;   // optimizer steps taken: what the LR schedule counts
  int64_t nonfinite_run = 0;
  LoaderPosition position;  // after the last finished window
  // The current epoch's running totals, so a resumed epoch reports the whole epoch.
  double epoch_loss = 0;
  int64_t epoch_correct = 0, epoch_samples = 0, epoch_skipped = 0;
  double epoch_seconds = 0, epoch_wait = 0;
  uint64_t metrics_bytes = 0;  // metrics.jsonl length when the checkpoint was taken
};

// The settings a checkpoint must agree with to be resumed, as (option, value).
using Fingerprint = std::vector<std::pair<std::string, std::string>>;
// `sampler` is the training Loader's, resolved (Loader::sampler_options()): a windowed order
// depends on its block and window, which an auto-sized window takes from free memory.
Fingerprint fingerprint(const TrainOptions& options, const DataInfo& train, int world_size,
                        const SamplerOptions& sampler);

// The run's parts a checkpoint saves and restores in place. The run owns them; this only
// borrows them for one call.
struct CheckpointParts {
  Classifier& model;
  torch::optim::Optimizer& optimizer;
  GradScaler* scaler;  // null: no loss scaling (a checkpoint records which)
  RunState& state;
  Normalization& norm;
};

// Writes `parts`, `fp` and the CPU generator's state to `path` atomically (temp file, fsync,
// rename), so a kill mid-write leaves the previous checkpoint. Throws dscache::Error.
void save_checkpoint(const std::string& path, const Fingerprint& fp, const CheckpointParts& parts);

// False when `path` does not exist. Otherwise restores `parts` and the CPU generator, tensors
// loaded onto `device`; throws UsageError when the checkpoint was made with other settings
// (`fp`, or loss scaling on/off), std::runtime_error for another checkpoint format.
bool load_checkpoint(const std::string& path, const Fingerprint& fp, torch::Device device,
                     const CheckpointParts& parts);

// The trained weights alone (torch::nn::Module::save's archive), written atomically.
void save_model(const Classifier& model, const std::string& path);

}  // namespace train
}  // namespace dscache
