// dscache-train's options: one plain struct, parsed from the command line and validated.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dscache/exit_codes.h"
#include "task_options.h"

namespace dscache {
namespace train {

enum class ModelKind { kCnn, kResnet18, kUnetSmall };
enum class Precision { kFp32, kBf16, kFp16, kAuto };  // kAuto: precision.h decides
enum class OptimizerKind { kSgd, kAdamW };
enum class ScheduleKind { kConstant, kCosine, kStep };
enum class DeviceKind { kCpu, kCuda };
enum class NormalizeKind {
  kDataset,  // per-channel mean/std measured on the training cache (up to 8192 samples)
  kHalf,     // mean 0.5, std 0.5 for every channel: x/255 maps to [-1, 1]
};
enum class LossScaling { kAuto, kOn, kOff };  // auto: on exactly for fp16
// --progress: auto draws the progress line when stderr is a terminal (kAuto first: {} is auto)
enum class ProgressMode { kAuto, kAlways, kNever };

const char* to_string(ModelKind v);
const char* to_string(Precision v);
const char* to_string(OptimizerKind v);
const char* to_string(ScheduleKind v);
const char* to_string(DeviceKind v);
const char* to_string(NormalizeKind v);
const char* to_string(ProgressMode v);

// Everything one training run needs. Defaults are what `dscache-train --train DIR` does.
struct TrainOptions {
  std::string train;  // training cache directory (required): the first --train
  std::string val;    // validation cache directory; "" = none: the first --val
  // Every --train and --val, in order (resolve_and_validate fills them from train/val when
  // empty). Several --train, or --mix/--mix-repeat, train on a mixture of the caches.
  std::vector<std::string> trains;
  std::vector<std::string> vals;
  // The mixture's shares, one per --train in order: --mix (weights) or --mix-repeat (passes per
  // epoch); both empty = repeat 1 each. docs/TRAINER.md "Mixing caches".
  std::vector<double> mix_weights;
  std::vector<double> mix_repeats;
  uint64_t mix_samples = 0;       // --mix-samples: samples per epoch; 0 = the sizes summed
  bool mix_stratified = false;    // --mix-batching stratified (each global batch holds the
                                  // shares); default random
  bool allow_mix_change = false;  // --resume under other mixture shares: the rest of the epoch
                                  // takes the new ones (refused without it, exit 2)
  // True when the run trains on a Mixture (several --train, or shares given).
  bool mixing() const { return trains.size() > 1 || !mix_weights.empty() || !mix_repeats.empty(); }
  // --train/--val on object storage (s3://, http(s)://): applied with set_remote_options
  std::string s3_endpoint;            // --s3-endpoint; "" = AWS_ENDPOINT_URL or AWS's own
  std::string local_cache;            // --local-cache; "" = DSCACHE_LOCAL_CACHE or ~/.cache
  uint64_t local_cache_size = 0;      // --local-cache-size; 0 = DSCACHE_LOCAL_CACHE_SIZE or 20GiB
  ModelKind model = ModelKind::kCnn;  // --model cnn|resnet18|unet-small; default cnn (segment:
                                      // unet-small)
  uint32_t epochs = 1;                // passes over the training cache; default 1
  uint64_t max_steps = 0;             // stop after this many optimizer steps; 0 = no limit
  uint32_t batch = 64;                // micro-batch: samples per forward/backward; default 64
  uint32_t accum_steps = 1;           // micro-batches per optimizer step (K); default 1
  uint64_t effective_batch = 0;       // if > 0: accum_steps = effective_batch / batch (must divide)
  Precision precision = Precision::kAuto;  // forward+loss precision under autocast; default auto:
                                           // bf16 where native, else fp32 (precision.h)
  LossScaling loss_scaling = LossScaling::kAuto;  // dynamic loss scaling; auto = fp16 only
  OptimizerKind optimizer = OptimizerKind::kSgd;  // default sgd
  double lr = -1;            // peak learning rate; < 0 = 0.05 for sgd, 1e-3 for adamw
  double momentum = 0.9;     // sgd momentum; default 0.9
  double weight_decay = -1;  // < 0 = 0 for sgd, 0.01 for adamw (decoupled)
  ScheduleKind schedule = ScheduleKind::kConstant;  // per optimizer step; default constant
  uint64_t warmup_steps = 0;  // linear warm-up over this many optimizer steps; default 0
  uint64_t step_size = 0;     // --schedule step: optimizer steps per decay; 0 = a third of the run
  double gamma = 0.1;         // --schedule step: LR multiplier per decay; default 0.1
  double clip_grad = 0;       // max global L2 norm of the gradients; 0 = no clipping
  uint64_t seed = 0;          // model init and shuffle seed; default 0
  uint32_t threads = 0;       // intra-op threads; 0 = all cores
  uint32_t workers = 2;       // Loader threads; default 2
  uint32_t prefetch = 4;      // Loader batches buffered ahead; default 4
  bool windowed = false;      // --shuffle windowed: blocks of neighbouring samples, shuffled
                              // within windows (caches larger than memory); default global
  uint64_t window_bytes = 0;  // --window-bytes: stored bytes per window; 0 = from free memory
  DeviceKind device = DeviceKind::kCpu;  // default cpu
  bool channels_last = false;            // NHWC memory format for activations and conv weights
  NormalizeKind normalize = NormalizeKind::kDataset;  // see NormalizeKind
  uint32_t image_size = 0;     // crop/resize side for ragged caches (required there); 0 = stored
  std::string lazy_cache;      // LazyCache file: --train is then an image folder or list, decoded
                               // on first use to image_size x image_size; "" = --train is a cache
  std::string val_lazy_cache;  // the same for --val: an image folder or list decoded into this
                               // file; "" = --val is a cache
  uint32_t channels = 3;       // --lazy-cache/--val-lazy-cache: 3 (RGB) or 1 (grey); default 3
  std::string output;          // the run's files: metrics.jsonl, tb/, checkpoints, model; "" = none
  bool resume = false;         // continue from OUTPUT/checkpoint.pt if it exists
  bool allow_data_change = false;  // --resume onto a --train whose samples differ from the
                                   // checkpoint's (refused without it, exit 2)
  bool force = false;       // start over in an --output that holds a run (its checkpoints, metrics
                            // and model are removed); without it, or --resume, such an output is
                            // refused (exit 4)
  uint64_t log_every = 50;  // optimizer steps between "step" lines in metrics.jsonl; 0 = none
  uint64_t checkpoint_every = 0;  // optimizer steps between checkpoints (plus every epoch end);
                                  // 0 = epoch ends only
  bool flush_denormal = true;     // CPU: flush denormal floats to zero (much faster); default on
  ProgressMode progress{};        // --progress (--no-progress: never); default kAuto, a line on
                                  // stderr when it is a TTY
  uint32_t dist_timeout = 600;    // seconds: rendezvous wait and Gloo collective timeout when
                                  // WORLD_SIZE > 1; default 600 (see README, "Timeouts")
  uint32_t nproc_per_node = 0;    // > 0: start that many ranks on this machine and supervise
                                  // them (launch.h); 0 = run as one process (default)
  double bucket_mb = 25;          // data parallel: MiB per gradient all-reduce bucket, started
                                  // during the last backward of a window; 0 = one flat buffer
                                  // after it; default 25 (PyTorch DDP's)
  bool sync_bn = false;           // data parallel: BatchNorm statistics over all ranks' batches
  TaskOptions task;               // --task, --targets, --loss, --target-norm (task_options.h);
                                  // default classify on the cache's labels
};

// A bad command line or option value (ExitCode::kUsage): the one type both programs throw.
using dscache::UsageError;

// Parses argv (without argv[0]) into options. Throws UsageError naming the option. Sets
// `help` and returns defaults when --help was given; `help_text` receives the option list.
TrainOptions parse_options(const std::vector<std::string>& args, bool* help,
                           std::string* help_text);

// Resolves the derived defaults (lr, weight decay, accum_steps from effective_batch) and checks
// every field; throws UsageError naming the field.
void resolve_and_validate(TrainOptions* options);

}  // namespace train
}  // namespace dscache
