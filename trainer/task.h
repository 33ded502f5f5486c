// Multilabel and regression targets (--task) in tensors: a batch's targets, the summed loss, and
// one micro-batch's forward/backward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "models.h"
#include "step.h"
#include "targets.h"

namespace dscache {
namespace train {

// The batch's targets as (N, T) float on `device`: multilabel 0/1, regression normalised. Every
// value is checked (check_target_value: UsageError naming the field, the sample and `where`,
// "--train DIR", when a multilabel value is not 0 or 1 or a regression value is not finite).
torch::Tensor batch_targets(const TargetSpec& spec, const Batch& batch, torch::Device device,
                            const std::string& where);

// Summed over outputs and samples (0-dim float): BCE with logits, or the regression loss.
// Dividing by a window's true sample count gives the window's mean-per-sample loss.
torch::Tensor target_loss_sum(const TargetSpec& spec, const torch::Tensor& outputs,
                              const torch::Tensor& targets);

// forward_backward (step.h) for these targets: loss_sum is target_loss_sum, `correct` counts
// samples whose every output is right (multilabel, at logit 0) and is 0 for regression.
MicroResult forward_backward_targets(Classifier& model, const torch::Tensor& x,
                                     const torch::Tensor& targets, const TargetSpec& spec,
                                     int64_t window_samples, const AmpConfig& amp,
                                     const GradScaler* scaler);

}  // namespace train
}  // namespace dscache
