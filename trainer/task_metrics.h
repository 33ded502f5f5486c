// Validation metrics of multilabel and regression runs (--task), and the validation pass that
// computes them.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device_input.h"
#include "dscache/loader.h"
#include "models.h"
#include "step.h"
#include "task.h"

namespace dscache {
namespace train {

// Gathers a validation set's outputs and targets on the host, then computes its metrics. Not
// thread-safe.
class TargetMetrics {
 public:
  explicit TargetMetrics(const TargetSpec& spec) : spec_(spec) {}
  // One batch: (N, T) outputs (logits, or normalised predictions) and batch_targets().
  void add(const torch::Tensor& outputs, const torch::Tensor& targets);
  // The metrics.jsonl members, prefixed "val_":
  //  multilabel: val_acc (the share of samples with every output right, as the epoch line's
  //    train_acc), val_map (macro mean of per-class average precision over the classes with a
  //    positive; null when none has), val_micro_f1 (at probability 0.5), val_ap (per class, null
  //    for a class without positives);
  //  regression, in the targets' original units: val_mae, val_rmse (over all outputs),
  //    val_r2 (mean over outputs of 1 - SS_res/SS_tot; null when a target is constant), and
  //    per-output lists val_mae_per, val_r2_per.
  nlohmann::json finish() const;

 private:
  TargetSpec spec_;
  std::vector<float> out_, tgt_;  // row-major (samples, T)
};

// Average precision of `scores` against 0/1 `labels` (scikit-learn's average_precision_score:
// the sum over distinct thresholds of recall gained times precision there); NaN when there is no
// positive.
double average_precision(const std::vector<float>& scores, const std::vector<float>& labels);

struct TargetEval {
  double loss = 0;         // mean per-sample loss (in the units trained on)
  nlohmann::json metrics;  // TargetMetrics::finish()
};

// One pass over `loader` (`where`: "--val DIR", for batch_targets' messages) in eval mode, as
// evaluate() (evaluate.h) does for classification; puts the model back in train mode.
TargetEval evaluate_targets(Classifier& model, Loader& loader, const BatchConverter& conv,
                            const AmpConfig& amp, const TargetSpec& spec, const std::string& where);

}  // namespace train
}  // namespace dscache
