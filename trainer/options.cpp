// Command line → TrainOptions (Boost.Program_options), and the checks that name each field.
#include "options.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <iterator>
#include <optional>
#include <sstream>

#include "dscache/byte_count.h"
#include "dscache/error.h"
#include "option_names.h"

namespace po = boost::program_options;

namespace dscache {
namespace train {

namespace {

constexpr EnumName<ModelKind> kModel[] = {
    {ModelKind::kCnn, "cnn"},
    {ModelKind::kResnet18, "resnet18"},
    {ModelKind::kUnetSmall, "unet-small"},
};
constexpr EnumName<Precision> kPrecision[] = {
    {Precision::kAuto, "auto"},
    {Precision::kFp32, "fp32"},
    {Precision::kBf16, "bf16"},
    {Precision::kFp16, "fp16"},
};
constexpr EnumName<LossScaling> kLossScaling[] = {
    {LossScaling::kAuto, "auto"},
    {LossScaling::kOn, "on"},
    {LossScaling::kOff, "off"},
};
constexpr EnumName<OptimizerKind> kOptimizer[] = {
    {OptimizerKind::kSgd, "sgd"},
    {OptimizerKind::kAdamW, "adamw"},
};
constexpr EnumName<ScheduleKind> kSchedule[] = {
    {ScheduleKind::kConstant, "constant"},
    {ScheduleKind::kCosine, "cosine"},
    {ScheduleKind::kStep, "step"},
};
constexpr EnumName<DeviceKind> kDevice[] = {
    {DeviceKind::kCpu, "cpu"},
    {DeviceKind::kCuda, "cuda"},
};
constexpr EnumName<NormalizeKind> kNormalize[] = {
    {NormalizeKind::kDataset, "dataset"},
    {NormalizeKind::kHalf, "half"},
};
constexpr EnumName<ProgressMode> kProgress[] = {
    {ProgressMode::kAuto, "auto"},
    {ProgressMode::kAlways, "always"},
    {ProgressMode::kNever, "never"},
};
constexpr EnumName<Shuffle> kTrainShuffle[] = {
    {Shuffle::kGlobal, "global"},
    {Shuffle::kWindowed, "windowed"},
};

}  // namespace

constexpr EnumTable<ModelKind> kModelNames(kModel);
constexpr EnumTable<Precision> kPrecisionNames(kPrecision);
constexpr EnumTable<LossScaling> kLossScalingNames(kLossScaling);
constexpr EnumTable<OptimizerKind> kOptimizerNames(kOptimizer);
constexpr EnumTable<ScheduleKind> kScheduleNames(kSchedule);
constexpr EnumTable<DeviceKind> kDeviceNames(kDevice);
constexpr EnumTable<NormalizeKind> kNormalizeNames(kNormalize);
constexpr EnumTable<ProgressMode> kProgressNames(kProgress);
constexpr EnumTable<Shuffle> kTrainShuffleNames(kTrainShuffle);

const char* to_string(ModelKind v) { return kModelNames.to_string(v); }
const char* to_string(Precision v) { return kPrecisionNames.to_string(v); }
const char* to_string(OptimizerKind v) { return kOptimizerNames.to_string(v); }
const char* to_string(ScheduleKind v) { return kScheduleNames.to_string(v); }
const char* to_string(DeviceKind v) { return kDeviceNames.to_string(v); }
const char* to_string(NormalizeKind v) { return kNormalizeNames.to_string(v); }
const char* to_string(ProgressMode v) { return kProgressNames.to_string(v); }

namespace {

// The value `table` names `value`; otherwise UsageError naming --option and listing the names.
template <typename E>
E pick(const EnumTable<E>& table, const std::string& option, const std::string& value) {
  if (std::optional<E> v = table.find(value)) return *v;
  throw UsageError(table.unknown(value, "--" + option));
}

// dscache/byte_count.h's grammar, as a usage error.
uint64_t byte_count(const std::string& option, const std::string& text) {
  try {
    return parse_byte_count(text, option);
  } catch (const Error& e) {
    throw UsageError(e.reason());
  }
}

// --model against --task: segment defaults to unet-small and refuses the cnn classifier; the
// dense unet-small is for segment only.
void check_model_for_task(TrainOptions* o, bool model_given) {
  const bool segment = o->task.kind == TaskKind::kSegment;
  if (segment && !model_given) o->model = ModelKind::kUnetSmall;
  if (segment && o->model == ModelKind::kCnn) {
    throw UsageError(
        "--model: cnn has no per-pixel output; --task segment trains unet-small or "
        "resnet18");
  }
  if (!segment && o->model == ModelKind::kUnetSmall) {
    throw UsageError("--model: unet-small predicts a class per pixel; it needs --task segment");
  }
}

// Boost reads "-3" for an unsigned option as 4294967293 (lexical_cast wraps): --batch -3 asked
// for four billion samples and ended in an out-of-memory error. Refuses a sign up front.
void refuse_signed_unsigned(const std::vector<std::string>& args,
                            const po::options_description& desc) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const po::option_description* d = desc.find_nothrow(name, false);
    if (!d || !d->semantic() || d->semantic()->max_tokens() == 0) continue;
    const std::string value =
        eq != std::string::npos ? a.substr(eq + 1) : (i + 1 < args.size() ? args[i + 1] : "");
    static const char* const kUnsigned[] = {
        "epochs",       "max-steps",      "batch",      "accum-steps", "effective-batch",
        "warmup-steps", "step-size",      "seed",       "threads",     "workers",
        "prefetch",     "image-size",     "channels",   "log-every",   "checkpoint-every",
        "dist-timeout", "nproc-per-node", "mix-samples"};
    const bool is_unsigned =
        std::find(std::begin(kUnsigned), std::end(kUnsigned), name) != std::end(kUnsigned);
    if (is_unsigned && !value.empty() && (value[0] == '-' || value[0] == '+')) {
      throw UsageError("--" + name + ": '" + value + "' is not a non-negative integer");
    }
  }
}

// "0.7,0.3": one finite number >= 0 per comma-separated item; UsageError naming --option.
std::vector<double> parse_shares(const std::string& option, const std::string& text) {
  std::vector<double> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || !std::isfinite(v) || v < 0) {
      throw UsageError("--" + option + ": '" + item + "' in '" + text +
                       "' is not a number >= 0 (give one per --train, comma-separated)");
    }
    out.push_back(v);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// --mix-batching's words: false = random, true = stratified (dscache/mix_order.h's names).
constexpr EnumName<bool> kMixBatchingWord[] = {{false, "random"}, {true, "stratified"}};
constexpr EnumTable<bool> kMixBatchingWords(kMixBatchingWord);

}  // namespace

namespace {

// The options given as words, before pick() turns them into enums.
struct OptionWords {
  std::string model = "cnn", precision = "auto", optimizer = "sgd", schedule = "constant",
              device = "cpu", normalize = "dataset", loss_scaling = "auto", shuffle = "global",
              window_bytes, task = "classify", targets, loss = "mse", progress = "auto",
              class_weights, local_cache_size, mix, mix_repeat, mix_batching = "random";
};

// Every option, bound to `o` or `words`, in groups by concern: --help lists them so, each once
// (tests/trainer/test_trainer_cli.cpp checks).
po::options_description describe_options(TrainOptions& o, OptionWords& words) {
  auto& [model, precision, optimizer, schedule, device, normalize, loss_scaling, shuffle,
         window_bytes, task, targets, loss, progress, class_weights, local_cache_size, mix,
         mix_repeat, mix_batching] = words;
  po::options_description data_group("Data");
  po::options_description task_group("Task and model");
  po::options_description optimisation_group("Optimisation");
  po::options_description precision_group("Precision and device");
  po::options_description output_group("Output and resume");
  po::options_description distributed_group("Distributed");
  po::options_description other_group("Other");
  // clang-format off
  data_group.add_options()
    ("train", po::value(&o.trains)->composing(), "training cache directory (required); give it again to train on a mixture of caches")
    ("val", po::value(&o.vals)->composing(), "validation cache directory; several: each validated on its own")
    ("mix", po::value(&mix), "W,W,...: the mixture's weights, one per --train in order: shares of each epoch's samples")
    ("mix-repeat", po::value(&mix_repeat), "R,R,...: passes over each --train per epoch, instead of --mix (default 1 each)")
    ("mix-samples", po::value(&o.mix_samples), "--mix: samples per epoch (default: the caches' sizes summed)")
    ("mix-batching", po::value(&mix_batching), "random | stratified: stratified gives every global batch each cache's share (default random)")
    ("s3-endpoint", po::value(&o.s3_endpoint), "URL: S3 endpoint for s3:// caches (default AWS_ENDPOINT_URL)")
    ("local-cache", po::value(&o.local_cache), "DIR: verified local copies of remote caches, shared on the node (default DSCACHE_LOCAL_CACHE, ~/.cache/dscache)")
    ("local-cache-size", po::value(&local_cache_size), "most bytes of local copies, e.g. 50G (default 20GiB)")
    ("lazy-cache", po::value(&o.lazy_cache), "FILE: --train is an image folder/list, decoded on first use into FILE")
    ("val-lazy-cache", po::value(&o.val_lazy_cache), "FILE: --val is an image folder/list, decoded on first use into FILE")
    ("channels", po::value(&o.channels), "--lazy-cache, --val-lazy-cache: 3 (RGB, default) or 1 (grey)")
    ("image-size", po::value(&o.image_size), "crop side for ragged caches")
    ("normalize", po::value(&normalize), "dataset | half: per-channel mean/std (default dataset)")
    ("shuffle", po::value(&shuffle), "global | windowed: windowed reads blocks of neighbouring samples (caches larger than memory)")
    ("window-bytes", po::value(&window_bytes), "--shuffle windowed: bytes per window, e.g. 512M, 2G, 64KiB (default: a quarter of free memory)")
    ("workers", po::value(&o.workers), "loader threads (default 2)")
    ("prefetch", po::value(&o.prefetch), "loader batches buffered ahead (default 4)");
  task_group.add_options()
    ("task", po::value(&task), "classify | multilabel | regress | segment (default classify: the cache's labels)")
    ("targets", po::value(&targets), "COL[,COL...]: the fields to predict (multilabel: 0/1 int64 scalars or one multi-hot array; regress: numeric scalars, integers read as float32; segment: one mask field, default the cache's only one)")
    ("loss", po::value(&loss), "--task regress: mse | l1 | huber (default mse)")
    ("target-norm", po::bool_switch(&o.task.target_norm), "--task regress: standardise targets with the training set's mean/std")
    ("ignore-index", po::value(&o.task.ignore_index), "--task segment: the mask value that counts in no loss or metric (default 255)")
    ("class-weights", po::value(&class_weights), "--task segment: w0,w1,...: per-class weights of the pixel loss (default all 1)")
    ("model", po::value(&model), "cnn | resnet18 | unet-small (default cnn; --task segment: unet-small, or resnet18 as an encoder with an upsampling head)");
  optimisation_group.add_options()
    ("epochs", po::value(&o.epochs), "passes over the training cache (default 1)")
    ("max-steps", po::value(&o.max_steps), "stop after N optimizer steps (0 = no limit)")
    ("batch", po::value(&o.batch), "micro-batch size (default 64)")
    ("accum-steps", po::value(&o.accum_steps), "micro-batches per optimizer step (default 1)")
    ("effective-batch", po::value(&o.effective_batch), "samples per optimizer step; sets --accum-steps")
    ("optimizer", po::value(&optimizer), "sgd | adamw (default sgd)")
    ("lr", po::value(&o.lr), "peak learning rate (default 0.05 sgd, 1e-3 adamw)")
    ("momentum", po::value(&o.momentum), "sgd momentum (default 0.9)")
    ("weight-decay", po::value(&o.weight_decay), "weight decay (default 0 sgd, 0.01 adamw)")
    ("schedule", po::value(&schedule), "constant | cosine | step, per optimizer step")
    ("warmup-steps", po::value(&o.warmup_steps), "linear warm-up steps (default 0)")
    ("step-size", po::value(&o.step_size), "--schedule step: steps per decay (default: a third)")
    ("gamma", po::value(&o.gamma), "--schedule step: decay factor (default 0.1)")
    ("clip-grad", po::value(&o.clip_grad), "max gradient L2 norm (0 = off)")
    ("seed", po::value(&o.seed), "init and shuffle seed (default 0)");
  precision_group.add_options()
    ("precision", po::value(&precision), "auto | fp32 | bf16 | fp16 (default auto: bf16 where the CPU/GPU has it natively, fp16 on older GPUs, else fp32; fp16: CUDA only)")
    ("loss-scaling", po::value(&loss_scaling), "auto | on | off: dynamic loss scaling (auto: fp16)")
    ("device", po::value(&device), "cpu | cuda (default cpu)")
    ("channels-last", po::bool_switch(&o.channels_last), "NHWC memory format")
    ("threads", po::value(&o.threads), "intra-op threads (default: the CPUs this process may use: affinity mask, cgroup CPU quota, SLURM_CPUS_PER_TASK)")
    ("keep-denormals", "CPU: do not flush denormal floats to zero (slower)");
  output_group.add_options()
    ("output", po::value(&o.output), "directory for metrics.jsonl, tb/ (TensorBoard), checkpoint.pt, model.pt (one trainer at a time: dscache-train.lock)")
    ("resume", po::bool_switch(&o.resume), "continue from OUTPUT/checkpoint.pt (or the older checkpoint.prev.pt when it does not verify)")
    ("allow-data-change", po::bool_switch(&o.allow_data_change), "with --resume: continue even though --train holds other samples than the checkpoint was made on (refused without it)")
    ("allow-mix-change", po::bool_switch(&o.allow_mix_change), "with --resume: continue the epoch under other --mix/--mix-repeat/--mix-samples/--mix-batching than the checkpoint's")
    ("force", po::bool_switch(&o.force), "start over in an --output that holds a run (removes its checkpoints, metrics, tb/ and model)")
    ("log-every", po::value(&o.log_every), "optimizer steps per metrics line (default 50)")
    ("checkpoint-every", po::value(&o.checkpoint_every), "optimizer steps per checkpoint (0 = epoch ends)")
    ("progress", po::value(&progress), "auto | always | never: the progress line on stderr (default auto: when it is a terminal)")
    ("no-progress", "no progress line (as --progress never)");
  distributed_group.add_options()
    ("nproc-per-node", po::value(&o.nproc_per_node), "start N ranks on this machine, as torchrun does, and supervise them")
    ("dist-timeout", po::value(&o.dist_timeout), "seconds to wait for all ranks to join and for any collective (default 600)")
    ("bucket-mb", po::value(&o.bucket_mb), "data parallel: MiB per gradient all-reduce bucket, overlapped with the last backward of a window (default 25; 0 = one flat buffer after it)")
    ("sync-bn", po::bool_switch(&o.sync_bn), "data parallel: BatchNorm statistics over the global batch (SyncBatchNorm)");
  other_group.add_options()
    ("help,h", "show this help");
  // clang-format on
  po::options_description desc("dscache-train --train CACHE [--val CACHE] [options]");
  desc.add(data_group).add(task_group).add(optimisation_group).add(precision_group);
  desc.add(output_group).add(distributed_group).add(other_group);
  return desc;
}

}  // namespace

TrainOptions parse_options(const std::vector<std::string>& args, bool* help,
                           std::string* help_text) {
  TrainOptions o;
  OptionWords words;
  const po::options_description desc = describe_options(o, words);
  const auto& [model, precision, optimizer, schedule, device, normalize, loss_scaling, shuffle,
               window_bytes, task, targets, loss, progress, class_weights, local_cache_size, mix,
               mix_repeat, mix_batching] = words;
  std::ostringstream text;
  text << desc;
  if (help_text) *help_text = text.str();
  refuse_signed_unsigned(args, desc);
  po::variables_map vm;
  try {
    std::vector<std::string> copy = args;
    po::store(po::command_line_parser(copy).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  *help = vm.count("help") > 0;
  if (*help) return o;
  if (!o.trains.empty()) o.train = o.trains.front();
  if (!o.vals.empty()) o.val = o.vals.front();
  if (vm.count("mix")) o.mix_weights = parse_shares("mix", mix);
  if (vm.count("mix-repeat")) o.mix_repeats = parse_shares("mix-repeat", mix_repeat);
  o.mix_stratified = pick(kMixBatchingWords, "mix-batching", mix_batching);
  if (vm.count("mix-batching") + vm.count("mix-samples") && !o.mixing()) {
    throw UsageError(std::string("--") +
                     (vm.count("mix-batching") ? "mix-batching" : "mix-samples") +
                     ": applies to a mixture (several --train, or --mix/--mix-repeat)");
  }
  o.progress = pick(kProgressNames, "progress", progress);
  if (vm.count("no-progress")) {
    if (vm.count("progress") && o.progress != ProgressMode::kNever) {
      throw UsageError("--no-progress and --progress " + progress + ": give one");
    }
    o.progress = ProgressMode::kNever;
  }
  if (vm.count("keep-denormals")) o.flush_denormal = false;
  // Negative lr / weight decay are the "use the optimizer's default" markers; refuse them here.
  if (vm.count("lr") && !(o.lr > 0)) throw UsageError("--lr: must be a positive number");
  if (vm.count("weight-decay") && !(o.weight_decay >= 0)) {
    throw UsageError("--weight-decay: must be a number >= 0");
  }
  o.windowed = pick(kTrainShuffleNames, "shuffle", shuffle) == Shuffle::kWindowed;
  if (vm.count("window-bytes")) {
    if (!o.windowed) throw UsageError("--window-bytes: applies to --shuffle windowed only");
    o.window_bytes = byte_count("--window-bytes", window_bytes);
  }
  if (vm.count("local-cache-size")) {
    o.local_cache_size = byte_count("--local-cache-size", local_cache_size);
    if (o.local_cache_size == 0) throw UsageError("--local-cache-size: must be > 0");
  }
  if (!o.s3_endpoint.empty() && o.s3_endpoint.rfind("http://", 0) != 0 &&
      o.s3_endpoint.rfind("https://", 0) != 0) {
    throw UsageError("--s3-endpoint '" + o.s3_endpoint +
                     "': expected http://HOST[:PORT] or "
                     "https://HOST[:PORT]");
  }
  o.model = pick(kModelNames, "model", model);
  o.precision = pick(kPrecisionNames, "precision", precision);
  o.loss_scaling = pick(kLossScalingNames, "loss-scaling", loss_scaling);
  o.optimizer = pick(kOptimizerNames, "optimizer", optimizer);
  o.schedule = pick(kScheduleNames, "schedule", schedule);
  o.device = pick(kDeviceNames, "device", device);
  o.normalize = pick(kNormalizeNames, "normalize", normalize);
  o.task.kind = pick(kTaskNames, "task", task);
  if (vm.count("targets")) o.task.targets = split_targets(targets);
  o.task.loss = pick(kRegressLossNames, "loss", loss);
  if (vm.count("class-weights")) o.task.class_weights = parse_class_weights(words.class_weights);
  validate_task(o.task, vm.count("loss") > 0, vm.count("ignore-index") + vm.count("class-weights"));
  check_model_for_task(&o, vm.count("model") > 0);
  if (vm.count("accum-steps") && vm.count("effective-batch")) {
    throw UsageError("--accum-steps and --effective-batch: give one, not both");
  }
  // An explicit --accum-steps is kept as the samples per step it means, as --effective-batch
  // would be: a positive effective_batch tells a --resume on another world size that the user
  // chose the steps (plan_elastic refuses another global batch instead of choosing).
  if (vm.count("accum-steps")) o.effective_batch = uint64_t{o.accum_steps} * o.batch;
  return o;
}

namespace {

// A mixture's options against --train, --val and what cannot mix.
void validate_mixture(const TrainOptions& o) {
  const size_t caches = o.trains.size();
  const auto count_of = [&](const char* option, const std::vector<double>& shares) {
    if (!shares.empty() && shares.size() != caches) {
      throw UsageError(std::string("--") + option + ": " + std::to_string(shares.size()) +
                       (shares.size() == 1 ? " value" : " values") + " for " +
                       std::to_string(caches) + " --train " + (caches == 1 ? "cache" : "caches") +
                       ": give one per --train, in order");
    }
  };
  if (!o.mix_weights.empty() && !o.mix_repeats.empty()) {
    throw UsageError("--mix and --mix-repeat: give one (weights, or passes per epoch)");
  }
  count_of("mix", o.mix_weights);
  count_of("mix-repeat", o.mix_repeats);
  if (!o.mix_repeats.empty() && o.mix_samples) {
    throw UsageError(
        "--mix-samples: applies to --mix (with --mix-repeat an epoch is the passes' "
        "samples)");
  }
  if (o.allow_mix_change && !o.resume) throw UsageError("--allow-mix-change: needs --resume");
  if (o.allow_mix_change && !o.mixing()) {
    throw UsageError("--allow-mix-change: applies to a mixture (several --train, or --mix)");
  }
  if (o.vals.size() > 1 && !o.val_lazy_cache.empty()) {
    throw UsageError("--val-lazy-cache: decodes one --val; " + std::to_string(o.vals.size()) +
                     " --val need caches built by `dscache build`");
  }
  if (o.vals.size() > 1 && o.task.kind != TaskKind::kClassify) {
    throw UsageError("--val: several (" + std::to_string(o.vals.size()) +
                     ") are validated for --task classify only");
  }
  if (!o.mixing()) return;
  if (!o.lazy_cache.empty()) {
    throw UsageError("--lazy-cache: decodes one image folder; a mixture (" +
                     std::to_string(caches) + " --train) needs caches built by `dscache build`");
  }
  if (o.windowed) {
    throw UsageError(
        "--shuffle windowed: a mixture of caches is shuffled globally (each cache "
        "is sampled at once, so windows would not bound memory)");
  }
  if (o.task.kind != TaskKind::kClassify) {
    throw UsageError("--task " + std::string(to_string(o.task.kind)) +
                     ": a mixture of caches trains --task classify (labels unified by class "
                     "name)");
  }
}

}  // namespace

void resolve_and_validate(TrainOptions* options) {
  TrainOptions& o = *options;
  auto bad = [](const std::string& field, const std::string& why) {
    throw UsageError("--" + field + ": " + why);
  };
  if (o.trains.empty() && !o.train.empty()) o.trains = {o.train};
  if (o.vals.empty() && !o.val.empty()) o.vals = {o.val};
  if (o.train.empty()) bad("train", "required (a cache directory built by `dscache build`)");
  validate_mixture(o);
  if (o.epochs == 0) bad("epochs", "must be >= 1");
  if (o.batch == 0) bad("batch", "must be >= 1");
  if (o.effective_batch > 0) {
    if (o.effective_batch % o.batch != 0) {
      bad("effective-batch", std::to_string(o.effective_batch) + " is not a multiple of --batch " +
                                 std::to_string(o.batch));
    }
    o.accum_steps = static_cast<uint32_t>(o.effective_batch / o.batch);
  }
  if (o.accum_steps == 0) bad("accum-steps", "must be >= 1");
  if (o.lr < 0) o.lr = o.optimizer == OptimizerKind::kSgd ? 0.05 : 1e-3;
  if (o.weight_decay < 0) o.weight_decay = o.optimizer == OptimizerKind::kSgd ? 0.0 : 0.01;
  if (!std::isfinite(o.lr) || o.lr == 0) bad("lr", "must be a positive number");
  if (!std::isfinite(o.momentum) || o.momentum < 0 || o.momentum >= 1) {
    bad("momentum", "must be in [0, 1)");
  }
  if (!std::isfinite(o.weight_decay)) bad("weight-decay", "must be a number >= 0");
  if (!std::isfinite(o.gamma) || o.gamma <= 0 || o.gamma > 1) bad("gamma", "must be in (0, 1]");
  if (!std::isfinite(o.clip_grad) || o.clip_grad < 0) bad("clip-grad", "must be >= 0");
  if (!std::isfinite(o.bucket_mb) || o.bucket_mb < 0) bad("bucket-mb", "must be >= 0");
  if (o.workers == 0) bad("workers", "must be >= 1");
  if (o.prefetch == 0) bad("prefetch", "must be >= 1");
  // Each slot holds a whole batch; past a few dozen nothing is gained and memory runs out.
  if (o.prefetch > 1024) bad("prefetch", "at most 1024 batches ahead");
  if (o.precision == Precision::kFp16 && o.device == DeviceKind::kCpu) {
    bad("precision", "fp16 needs --device cuda (LibTorch 1.13 autocasts to bf16 only on CPU)");
  }
  if (!o.lazy_cache.empty() && o.image_size == 0) {
    bad("image-size", "required with --lazy-cache (the decoded sample side)");
  }
  if (!o.val_lazy_cache.empty() && o.image_size == 0) {
    bad("image-size", "required with --val-lazy-cache (the decoded sample side)");
  }
  if (!o.val_lazy_cache.empty() && o.val.empty()) {
    bad("val-lazy-cache", "needs --val (the image folder or list to decode)");
  }
  if (!o.val_lazy_cache.empty() && o.val_lazy_cache == o.lazy_cache) {
    bad("val-lazy-cache", "must be another file than --lazy-cache");
  }
  if (o.channels != 1 && o.channels != 3) bad("channels", "must be 1 or 3");
  if (o.resume && o.output.empty()) bad("resume", "needs --output (where checkpoint.pt lives)");
  if (o.force && o.output.empty()) bad("force", "needs --output (the run to start over)");
  if (o.allow_data_change && !o.resume) bad("allow-data-change", "needs --resume");
  if (o.force && o.resume) bad("force", "and --resume: give one (continue the run, or start over)");
  if (o.dist_timeout == 0) bad("dist-timeout", "must be >= 1 (seconds)");
  if (o.nproc_per_node > 1024) bad("nproc-per-node", "must be at most 1024");
  if (o.checkpoint_every > 0 && o.output.empty()) {
    bad("checkpoint-every", "needs --output (where checkpoint.pt is written)");
  }
}

}  // namespace train
}  // namespace dscache
