// The settings a checkpoint records (checkpoint.h run_settings): fixed, elastic and adjustable,
// as a user gives them.
#include <cstdio>
#include <string>

#include "checkpoint.h"

namespace dscache {
namespace train {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string targets_text(const TaskOptions& t) {
  std::string s;
  for (const auto& n : t.targets) s += (s.empty() ? "" : ",") + n;
  return s.empty() ? "(none)" : s;
}
// --task segment's classes, --ignore-index and --class-weights, as a user would give them.
std::string segment_text(const TaskOptions& t, const DataInfo& m) {
  if (t.kind != TaskKind::kSegment) return "(none)";
  std::string s = std::to_string(m.targets.outputs()) + " classes, --ignore-index " +
                  std::to_string(t.ignore_index) + ", --class-weights ";
  if (t.class_weights.empty()) return s + "(none)";
  for (size_t i = 0; i < t.class_weights.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.17g", i ? "," : "", t.class_weights[i]);
    s += buf;
  }
  return s;
}
std::string vals_text(const std::vector<std::string>& vals) {
  std::string s;
  for (const auto& v : vals) s += (s.empty() ? "" : ",") + v;
  return s;
}
}  // namespace

RunSettings run_settings(const TrainOptions& o, const DataInfo& m, int world,
                         const SamplerOptions& sampler) {
  const std::string shuffle =
      sampler.shuffle != Shuffle::kWindowed
          ? "global"
          : "windowed (blocks of " + std::to_string(sampler.block) + " samples, windows of " +
                std::to_string(sampler.window_blocks) +
                " blocks; pass the same --window-bytes to resume elsewhere)";
  const bool scaling = o.loss_scaling == LossScaling::kOn ||
                       (o.loss_scaling == LossScaling::kAuto && o.precision == Precision::kFp16);
  RunSettings s;
  // Fixed: the checkpoint's state (Loader position, optimizer state, weights, normalization)
  // means something only under these values; another value would silently continue a different
  // run.
  s.fixed = {
      // the sample order of every epoch, which the Loader position indexes
      {"shuffle", shuffle},
      // the samples of every optimizer step: a step takes the next global batch of the epoch's
      // order (the Loader position is global); batch, accum-steps and the world size may change
      // so long as their product does not (elastic resume, elastic.h)
      {kGlobalBatch, std::to_string(uint64_t{o.batch} * o.accum_steps * uint64_t(world))},
      // the parameters' names and shapes
      {"model", to_string(o.model)},
      // the optimizer state's layout (momentum buffers vs Adam moments)
      {"optimizer", to_string(o.optimizer)},
      // the shuffle of every epoch and the initial weights
      {"seed", std::to_string(o.seed)},
      // the dataset the position indexes and the classes the output layer names
      {"train", std::to_string(m.count) + " samples " + std::to_string(m.height) + "x" +
                    std::to_string(m.width) + "x" + std::to_string(m.channels) + ", " +
                    std::to_string(m.classes.size()) + " classes"},
      // the input shape the weights were trained on
      {"image-size", std::to_string(o.image_size)},
      // the input distribution the weights were trained on (the checkpoint's values are used)
      {"normalize", to_string(o.normalize)},
      // the scaler's state exists only with scaling (fp16 turns it on under auto)
      {"loss-scaling (resolved)", scaling ? "on" : "off"},
      // what the head predicts and the loss it was trained with (the targets' units)
      {"task", to_string(o.task.kind)},
      {"targets", targets_text(o.task)},
      {"loss", o.task.kind == TaskKind::kRegress ? to_string(o.task.loss) : "(none)"},
      {"target-norm", o.task.target_norm ? "on" : "off"},
      {"segment", segment_text(o.task, m)},
  };
  // Elastic: how the global batch is split; a resume on another world size or --batch picks
  // --accum-steps from these (stored under the keys that were fixed before elastic resume).
  s.elastic = {
      {kWorldSize, std::to_string(world)},
      {kBatch, std::to_string(o.batch)},
      {kAccumSteps, std::to_string(o.accum_steps)},
  };
  // Adjustable: read afresh at every step (or only at the end of the run), and the state stays
  // valid under a new value: the LR is recomputed from the step count, momentum buffers and Adam
  // moments do not depend on lr or weight decay, weights are fp32 whatever the autocast
  // precision, clipping and BatchNorm's synchronisation act on the next steps only, the number of
  // epochs or steps only moves the end (and the cosine/step schedules' length), and validation
  // only reads the weights.
  s.adjustable = {
      {"lr", num(o.lr)},
      {"momentum", num(o.momentum)},
      {"weight-decay", num(o.weight_decay)},
      {"schedule", to_string(o.schedule)},
      {"warmup-steps", std::to_string(o.warmup_steps)},
      {"step-size", std::to_string(o.step_size)},
      {"gamma", num(o.gamma)},
      {"clip-grad", num(o.clip_grad)},
      {"epochs", std::to_string(o.epochs)},
      {"max-steps", std::to_string(o.max_steps)},
      {"precision", to_string(o.precision)},
      {"device", to_string(o.device)},
      {"channels-last", o.channels_last ? "on" : "off"},
      {"sync-bn", o.sync_bn ? "on" : "off"},
      {"val", o.vals.size() > 1 ? vals_text(o.vals)
              : o.val.empty()   ? "(none)"
                                : o.val},
  };
  s.data = m.identity;
  s.allow_data_change = o.allow_data_change;
  if (m.mixture) {
    const Mixture& mix = *m.mixture;
    s.mix_fingerprint = mix.fingerprint(mix.options().stratum);
    s.mix_shares = mix.describe_shares() + "; " + std::to_string(mix.epoch_samples()) +
                   " samples per epoch, " +
                   (mix.options().batching == MixBatching::kStratified
                        ? "stratified batches of " + std::to_string(mix.options().stratum)
                        : std::string("random batching"));
  }
  s.allow_mix_change = o.allow_mix_change;
  return s;
}

}  // namespace train
}  // namespace dscache
