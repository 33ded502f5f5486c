// --task segment in tensors: a batch's masks, the pixel loss and its normaliser, one micro-batch's
// forward/backward, and the validation pass with its confusion-matrix metrics.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "device_input.h"
#include "dscache/loader.h"
#include "models.h"
#include "step.h"
#include "targets.h"
#include "task_metrics.h"

namespace dscache {
namespace train {

// The batch's mask field as (N, H, W) int64 class ids on `device`. Error(kInvalidArgument) naming
// the field and the sample when a value is neither a class (< spec.outputs()) nor the ignore index.
torch::Tensor batch_masks(const TargetSpec& spec, const Batch& batch, torch::Device device);

// The (weighted) cross entropy summed over the labelled pixels (0-dim float), and the sum of
// their weights (0-dim double): dividing the first by the second is PyTorch's
// cross_entropy(weight, ignore_index, reduction "mean").
struct PixelLoss {
  torch::Tensor loss_sum, weight;
};
PixelLoss pixel_loss(const TargetSpec& spec, const torch::Tensor& logits,
                     const torch::Tensor& masks);

// One micro-batch (step.h's backward_window_share): backward of loss_sum / window_pixels, where
// window_pixels is the window's pixel count (its samples over all ranks times H x W), so the
// gradients have the size of a per-pixel mean while the window is still running. Once every
// micro-batch of every rank is in, rescale_window_grads makes the window's gradient that of its
// summed loss over the total weight of its labelled pixels: one mean over the whole window,
// however many pixels each micro-batch labels. Sets weight, count and correct (labelled pixels).
MicroResult forward_backward_segment(Classifier& model, const torch::Tensor& x,
                                     const torch::Tensor& masks, const TargetSpec& spec,
                                     int64_t window_pixels, const AmpConfig& amp,
                                     const GradScaler* scaler);

// Multiplies every defined gradient by window_pixels / window_weight (both over all ranks); a
// window without a labelled pixel (weight 0) has zero gradients and is left alone.
void rescale_window_grads(const std::vector<torch::Tensor>& params, double window_pixels,
                          double window_weight);

// A validation set's confusion matrix (truth x prediction over labelled pixels) and its metrics.
class SegmentMetrics {
 public:
  explicit SegmentMetrics(const TargetSpec& spec);
  // (N, C, H, W) logits and batch_masks().
  void add(const torch::Tensor& logits, const torch::Tensor& masks);
  // val_pixel_acc (right / labelled pixels; 0 when none), val_iou (per class: TP / (TP + FP +
  // FN), null for a class absent from both truth and prediction), val_miou (mean of the non-null
  // IoUs; null when all are).
  nlohmann::json finish() const;

 private:
  TargetSpec spec_;
  torch::Tensor confusion_;  // (C, C) int64 on the host: [truth][prediction]
};

// One pass over `loader` in eval mode, as evaluate_targets (task_metrics.h); loss is per unit of
// labelled-pixel weight. Puts the model back in train mode.
TargetEval evaluate_segment(Classifier& model, Loader& loader, const BatchConverter& conv,
                            const AmpConfig& amp, const TargetSpec& spec);

}  // namespace train
}  // namespace dscache
