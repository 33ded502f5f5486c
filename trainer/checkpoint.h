// OUTPUT/checkpoint.pt (and the one before it, checkpoint.prev.pt) and OUTPUT/model.pt: what a
// resumable checkpoint holds, the settings it must agree with, its checksum, atomic save, and
// load with fallback to the older checkpoint.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "amp.h"
#include "data.h"
#include "dscache/loader.h"
#include "elastic.h"
#include "models.h"
#include "options.h"

namespace dscache {
namespace train {

// Everything a checkpoint holds besides model, optimizer, scaler and normalization.
struct RunState {
  uint64_t global_step = 0;  // optimizer steps attempted (windows done), skipped ones included
  uint64_t sched_step = 0;   // optimizer steps taken: what the LR schedule counts
  int64_t nonfinite_run = 0;
  LoaderPosition position;  // this rank's, after the last finished window (archived as
                            // loader_cursor too, which older dscache-train versions read)
  // All ranks' global cursor after the last finished window: what a resume continues from, on
  // any number of ranks (sample == the epoch's length: the epoch is finished). Checkpoints from
  // before it derive sample from loader_cursor x their batch x world size, which can exceed
  // the epoch's length for a finished epoch.
  EpochPosition epoch_position;
  // The current epoch's running totals, so a resumed epoch reports the whole epoch.
  double epoch_loss = 0;
  int64_t epoch_correct = 0, epoch_samples = 0, epoch_skipped = 0;
  // What epoch_loss and epoch_correct are divided by: the samples, except for --task segment,
  // where they are the labelled pixels' loss weight and count.
  double epoch_weight = 0;
  int64_t epoch_count = 0;
  // Since the last step line: summed loss and what it is divided by (Window::weight), so the
  // first step line after a resume averages the same steps as the uninterrupted run's.
  double log_loss = 0, log_weight = 0;
  double epoch_seconds = 0, epoch_wait = 0;
  uint64_t metrics_bytes = 0;  // metrics.jsonl length when the checkpoint was taken
  uint64_t samples_seen = 0;   // training samples in the windows done, over all ranks and epochs
  // A mixture: the current epoch's samples from each source so far, over all ranks (its epoch
  // line's samples_per_source); empty for one cache.
  std::vector<int64_t> epoch_source_samples;
  // The epoch length (Loader::epoch_length) when the checkpoint was taken; 0 = not recorded
  // (older checkpoints): a resume under other mixture shares tells a finished epoch by it.
  uint64_t epoch_length = 0;
};

// The fixed setting an elastic resume keeps, and the keys of its three factors (RunSettings).
constexpr const char* kGlobalBatch = "global batch (batch x accum-steps x world size)";
constexpr const char* kBatch = "batch";
constexpr const char* kAccumSteps = "accum-steps";
constexpr const char* kWorldSize = "world-size (WORLD_SIZE)";

// Settings as (option, value) in the form the user gives them.
using Fingerprint = std::vector<std::pair<std::string, std::string>>;

// What a checkpoint records of the options it was made with (all of it covered by its checksum).
// `fixed`: options that change the run's meaning; resuming with another value is refused.
// `elastic`: --batch, --accum-steps and the world size, recorded (under their old keys among
// the fixed ones) so a resume can keep their product, the global batch, which is fixed
// (elastic.h).
// `adjustable`: options whose new value may take effect from the resumed step on; a resume names
// each one that differs. Options absent from both (threads, workers, log-every...) change neither
// the result's meaning nor its numbers beyond rounding.
struct RunSettings {
  Fingerprint fixed;
  Fingerprint elastic;
  Fingerprint adjustable;
  // The training data's identity (DataIdentity): a checkpoint made on other samples (content
  // digest differs) is refused unless allow_data_change, since its Loader position, weights and
  // normalization would silently continue on different data.
  DataIdentity data;
  bool allow_data_change = false;
  // A mixture: the order's fingerprint (Mixture::fingerprint of the shares in force, 0 for one
  // cache) and the shares in words; a checkpoint made under another fingerprint is refused
  // naming both unless allow_mix_change (the rest of its epoch then takes the new shares).
  uint64_t mix_fingerprint = 0;
  std::string mix_shares;
  bool allow_mix_change = false;
};
// `sampler` is the training Loader's, resolved (Loader::sampler_options()): a windowed order
// depends on its block and window, which an auto-sized window takes from free memory.
RunSettings run_settings(const TrainOptions& options, const DataInfo& train, int world_size,
                         const SamplerOptions& sampler);

// The run's parts a checkpoint saves and restores in place. The run owns them; this only
// borrows them for one call.
struct CheckpointParts {
  Classifier& model;
  torch::optim::Optimizer& optimizer;
  GradScaler* scaler;  // null: no loss scaling (a checkpoint records which)
  RunState& state;
  Normalization& norm;
  TargetSpec* targets = nullptr;  // --task multilabel/regress: its --target-norm mean and std
};

constexpr const char* kCheckpointName = "checkpoint.pt";
constexpr const char* kPreviousCheckpointName = "checkpoint.prev.pt";

// Writes `parts`, `settings` and the CPU generator's state to DIR/checkpoint.pt atomically (temp
// file, fsync, rename, fsync of the directory), as a 32-byte header (magic, format, payload
// size, XXH64 of the payload) and the LibTorch archive. With `keep_previous` the checkpoint it
// replaces becomes DIR/checkpoint.prev.pt first, so a kill at any moment leaves at least one
// complete checkpoint. Throws dscache::Error (e.g. IOError "File too large").
void save_checkpoint(const std::string& dir, const RunSettings& settings,
                     const CheckpointParts& parts, bool keep_previous);

struct LoadResult {
  bool found = false;        // false: neither checkpoint exists (parts untouched)
  std::string path;          // the checkpoint restored
  std::string fallback;      // non-empty when checkpoint.pt was unusable: why, in words
  bool current_bad = false;  // checkpoint.pt exists but is unusable: do not keep it as previous
  std::vector<std::string> adjusted;  // "--lr 0.1 (checkpoint: 0.05)" for each adjustable change
  std::string data_note;  // non-empty: the data changed (allowed) or the checkpoint predates the
                          // record of its data; one line saying which
  StepGeometry saved;     // the checkpoint's --batch, --accum-steps and world size
  std::string mix_note;   // non-empty: --allow-mix-change continues under other shares; says so
};

// This run's settings for a checkpoint made with `saved` (its --batch, --accum-steps and world
// size): an elastic resume picks its --accum-steps from them first (plan_elastic), and may
// refuse with UsageError.
using SettingsFor = std::function<RunSettings(const StepGeometry& saved)>;

// Restores `parts` and the CPU generator from DIR/checkpoint.pt, or from checkpoint.prev.pt when
// the newer one is missing or does not verify; tensors loaded onto `device`; the settings to
// compare come from `settings_for` called with the checkpoint's geometry. A checkpoint is
// opened only when it is a regular file (no FIFO or device can block) and used only when its
// header and checksum verify. Throws UsageError listing every fixed option that differs (or loss
// scaling on/off), CheckpointError when checkpoints exist but none verifies.
LoadResult load_checkpoint(const std::string& dir, const SettingsFor& settings_for,
                           torch::Device device, const CheckpointParts& parts);

// The bytes of a checkpoint file when its header and checksum verify; throws CheckpointError
// saying what is wrong (for tests and inspection).
std::string verified_checkpoint_payload(const std::string& path);

// model.pt's buffers beside the model's own: the input normalization, float32, one per channel.
constexpr const char* kNormMeanBuffer = "dscache_norm_mean";
constexpr const char* kNormStdBuffer = "dscache_norm_std";

// The trained weights (torch::nn::Module::save's archive, which torch.jit.load opens) and the
// buffers kNormMeanBuffer and kNormStdBuffer holding `norm`, written atomically.
void save_model(const Classifier& model, const Normalization& norm, const std::string& path);

}  // namespace train
}  // namespace dscache
