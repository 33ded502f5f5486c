// Mixed precision: an RAII autocast guard and a dynamic loss scaler (GradScaler).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dscache {
namespace train {

// Turns autocast on for `device` with `dtype` for its lifetime (forward + loss only), then puts
// back the enabled flag and dtype it found. Nests: the autocast cast cache (weights cast once
// per forward) is cleared when the outermost guard ends, as torch.autocast does. With
// enabled = false it sets autocast off inside (an fp32 region within an autocast one). Not
// copyable; lives on one thread (autocast state is thread-local).
class AutocastGuard {
 public:
  AutocastGuard(torch::DeviceType device, torch::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType device_;
  bool prev_enabled_;
  torch::ScalarType prev_dtype_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;     // first scale, 2^16
  double growth_factor = 2.0;      // scale *= this after growth_interval clean steps
  double backoff_factor = 0.5;     // scale *= this on a step with inf/NaN gradients
  int64_t growth_interval = 2000;  // consecutive finite steps before growth
};

// Dynamic loss scaling (torch.cuda.amp.GradScaler's algorithm) with ordinary tensor ops, so it
// runs on any device: LibTorch 1.13 has no C++ GradScaler and its fused AMP kernels are
// CUDA-only. Per optimizer step: scale() every micro-batch's loss before backward, unscale()
// once (before clipping), then step_if_finite(), which also updates the scale. Holds no tensors
// between steps; not thread-safe.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides every defined gradient by the scale in place (skipped when already unscaled this
  // step) and returns whether all of them are finite: on CPU with ordinary ops and one
  // reduction, on CUDA with the fused _amp_foreach_non_finite_check_and_unscale_ kernel.
  bool unscale(const std::vector<torch::Tensor>& params);
  // Unscales if needed; with finite gradients runs optimizer.step() and returns true, otherwise
  // leaves the parameters alone and returns false. Then updates the scale (backoff on inf/NaN,
  // growth after growth_interval finite steps) and clears the unscaled mark.
  bool step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params);
  // The bookkeeping half of step(), for callers that step the optimizer themselves.
  void update(bool found_inf);

  double scale_value() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  void load_state(double scale, int64_t growth_tracker);
  // Checkpoint round trip: keys "scale" (double) and "growth_tracker" (int).
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

// True when every defined gradient of `params` is finite: one reduction (a sum in double of the
// per-tensor sums; inf and NaN propagate into it), one host sync.
bool grads_finite(const std::vector<torch::Tensor>& params);

}  // namespace train
}  // namespace dscache
