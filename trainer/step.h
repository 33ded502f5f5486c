// One optimizer step's pieces: the autocast setting, a micro-batch's forward and backward, the
// accumulation windows of an epoch, and the learning-rate schedule.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "amp.h"
#include "models.h"
#include "options.h"

namespace dscache {
namespace train {

// How the forward pass runs.
struct AmpConfig {
  torch::DeviceType device = torch::kCPU;
  bool autocast = false;                       // false: fp32
  torch::ScalarType dtype = torch::kBFloat16;  // autocast dtype
};
AmpConfig amp_config(Precision precision, DeviceKind device);

// Left on the device, so a micro-step does not wait for the device to finish: the training
// loop adds them up and reads them once per accumulation window.
struct MicroResult {
  torch::Tensor loss_sum;  // 0-dim double: summed cross entropy of the micro-batch (unscaled)
  torch::Tensor correct;   // 0-dim int64: argmax hits (segment: labelled pixels right)
  // --task segment only (undefined otherwise, where both are the samples): the loss weight of
  // the labelled pixels (0-dim double) and their count (0-dim int64).
  torch::Tensor weight, count;
};

// The micro-step every task shares, where accumulation's exactness lives: forward and
// `loss_sum_of(outputs in fp32)` under autocast (guard scoped to exactly these two), then backward
// of loss_sum / window_samples (times the scaler's scale when given). Sets *outputs (the model's
// outputs, not detached) and returns the unscaled loss sum.
torch::Tensor backward_window_share(
    Classifier& model, const torch::Tensor& x, int64_t window_samples, const AmpConfig& amp,
    const GradScaler* scaler, const std::function<torch::Tensor(const torch::Tensor&)>& loss_sum_of,
    torch::Tensor* outputs);

// One micro-batch: forward + summed cross entropy under autocast (guard scoped to exactly these
// two), then backward of loss_sum / window_samples (times the scaler's scale when given), which
// adds this micro-batch's share of the window's mean-loss gradient to the .grad fields.
MicroResult forward_backward(Classifier& model, const torch::Tensor& x, const torch::Tensor& y,
                             int64_t window_samples, const AmpConfig& amp,
                             const GradScaler* scaler);

// Samples in each accumulation window of an epoch of `batches` batches holding `samples`
// samples in total (all batches full but the last), `k` batches per window; the last window
// holds what is left.
std::vector<int64_t> window_sample_counts(uint64_t batches, uint64_t samples, uint32_t batch,
                                          uint32_t k);

// The learning rate of optimizer step `step` (0-based) of `total_steps`: linear warm-up from
// lr/warmup to lr over warmup_steps, then constant, cosine to 0 at total_steps, or step decay.
double lr_at(const TrainOptions& options, uint64_t step, uint64_t total_steps);

}  // namespace train
}  // namespace dscache
