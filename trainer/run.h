// The training run behind run_training (train.h), shared by the files that implement it:
// train.cpp sets the run up, resumes it and finishes it; train_loop.cpp runs its step loop.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "amp.h"
#include "checkpoint.h"
#include "curves.h"
#include "data.h"
#include "device_input.h"
#include "distributed.h"
#include "grad_sync.h"
#include "metrics.h"
#include "models.h"
#include "options.h"
#include "progress_line.h"
#include "safety.h"
#include "segment.h"
#include "step.h"
#include "task.h"

namespace dscache {
namespace train {

// One training run. Owns everything it trains with; go() once, on one thread.
class Run {
 public:
  explicit Run(const TrainOptions& o) : o_(o) {}
  // 0 when the run is complete, 128 + N when signal N stopped it (after its checkpoint).
  int go();

 private:
  using Clock = std::chrono::steady_clock;

  // Where the current epoch is, and its clock (an epoch resumed mid-way counts its earlier time).
  struct EpochClock {
    uint64_t epoch = 0;         // 0-based
    uint64_t b = 0;             // the next batch of the epoch
    Clock::time_point start;    // when this process started (or resumed) the epoch
    double seconds_before = 0;  // the epoch's seconds before that (a checkpoint's)
    double wait_before = 0;     // and its data-wait seconds
    double wait = 0;            // data-wait seconds since `start`
  };
  // One accumulation window's totals over all ranks.
  struct Window {
    int64_t samples = 0;  // samples in the window
    double loss = 0;      // summed loss
    int64_t correct = 0;  // argmax hits
    // loss and correct per these: the samples, or for segment the labelled pixels' weight and
    // count
    double weight = 0;
    int64_t count = 0;
    int stop = 0;  // with several ranks: the signal all of them stop after (0 = none)
    std::vector<int64_t> per_source;  // a mixture: the window's samples from each source
  };

  // train.cpp: before and after the step loop.
  void setup();  // threads, device, ranks, precision, --output, data, model
  void set_up_device();
  void build_model();
  // --precision auto becomes what this device runs natively (precision.h); said once.
  void resolve_precision();
  // Rank 0 takes --output (creates it, locks it, refuses or clears a run there); every rank
  // learns the verdict, so all fail together with rank 0's exit code.
  void claim_output();
  void claim_output_on_main_rank();
  // --resume: loads the checkpoint (true when there was one) and opens metrics.jsonl; a fresh
  // run measures its normalization instead.
  bool resume();
  void report_resume(const LoadResult& r) const;
  // The checkpoint resumed from closed its epoch: its global cursor reached the epoch's length
  // (the one it recorded: a mixture's may change with --allow-mix-change).
  bool resumed_epoch_closed() const;
  // What a mixture's resume does with a position saved under other shares: continue with
  // --allow-mix-change (the checkpoint's load refused it otherwise).
  WeightChange weight_change() const {
    return o_.allow_mix_change ? WeightChange::kContinue : WeightChange::kRefuse;
  }
  // The batch converter, the gradient all-reduce and the accumulation windows (after resume(),
  // which may replace the parameters' data).
  void prepare_steps();
  // After the loop: the model, the stop message; returns go()'s exit status.
  int finish();
  std::string curves_path() const { return o_.output + "/curves.png"; }
  // OUTPUT/checkpoint.pt with this run's parts and settings (checkpoint.h).
  void write_checkpoint();
  LoadResult read_checkpoint();
  RunSettings settings() const {
    return run_settings(o_, data_.info, dist_.world_size, data_.train_loader->sampler_options());
  }

  // train_loop.cpp: the step loop.
  void run_epochs(bool resumed);
  EpochClock start_epoch(uint64_t epoch, bool resume);
  // The micro-batches of one window: forward and backward, the gradients all-reduced.
  Window run_window(EpochClock* ec);
  // The optimizer step of a window, its counters, logs, checkpoint and stop request.
  void apply_step(EpochClock* ec, const Window& w);
  // Unscales and checks the gradients; steps the optimizer when finite. Returns whether it did.
  bool step_optimizer(double window_loss, double lr);
  void log_step(uint64_t epoch, double lr);
  // A checkpoint inside the epoch, `secs` into this process's part of it.
  void checkpoint_in_epoch(const EpochClock& ec, double secs);
  // The epoch's line (validation included) in metrics.jsonl, and its checkpoint.
  void end_epoch(const EpochClock& ec);
  // Every --val's metrics into the epoch line (the first's under today's keys).
  void validate(nlohmann::json* line);
  // A mixture's sources by name with this epoch's samples from each, over all ranks.
  nlohmann::json samples_per_source() const;

  TrainOptions o_;
  DistEnv dist_;
  std::unique_ptr<Communicator> comm_;   // null for a single process
  AllReduceFn bn_allreduce_;             // --sync-bn: the model's BatchNorm all-reduce
  std::unique_ptr<GradSync> grad_sync_;  // with comm_: the gradient all-reduce
  bool main_rank_ = true;                // rank 0: the only one that logs and writes files
  std::string threads_note_;  // set_up_device: the default --threads when the CPUs are cut
  std::string elastic_note_;  // read_checkpoint: --accum-steps chosen for another geometry
  torch::Device device_{torch::kCPU};
  TrainData data_;
  std::shared_ptr<Classifier> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<GradScaler> scaler_;
  Normalization norm_;
  // --task multilabel/regress: data_.info.targets with --target-norm's statistics (measured on
  // a fresh run, the checkpoint's on resume)
  TargetSpec targets_;
  bool fields_task() const { return o_.task.kind != TaskKind::kClassify; }
  bool segment() const { return o_.task.kind == TaskKind::kSegment; }
  AmpConfig amp_;
  RunState st_;
  MetricsLog metrics_;
  TrainingCurves curves_;  // rank 0 with --output: every logged line, redrawn as curves.png
  std::unique_ptr<OutputLock> lock_;       // rank 0 with --output: held until the process ends
  bool keep_previous_ = true;              // false while checkpoint.pt is one that failed to verify
  uint64_t checkpoint_step_ = UINT64_MAX;  // global_step of the last checkpoint written

  // The step loop's state (prepare_steps() and run_epochs() set it).
  std::optional<ProgressLine> progress_;
  std::optional<BatchConverter> conv_;
  uint64_t batches_ = 0;          // batches per epoch on this rank
  std::vector<int64_t> windows_;  // samples per accumulation window of an epoch, this rank
  uint64_t total_steps_ = 0;      // optimizer steps of the whole run (the LR schedule's length)
  bool done_ = false;             // --max-steps reached, or a stop requested
  int stop_sig_ = 0;              // SIGINT/SIGTERM: every rank stops after the same step
  uint64_t stop_epoch_ = 0;       // the epoch it stopped in
  // since the last step line (or this process's start): samples and when (the loss's sums are
  // st_.log_loss / st_.log_weight, which a checkpoint keeps)
  int64_t log_samples_ = 0;
  Clock::time_point log_start_;
};

}  // namespace train
}  // namespace dscache
