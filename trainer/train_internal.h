// The pieces of the training loop, exposed for tests: batch conversion, one micro-step, the LR
// schedule, accumulation windows.
#pragma once

#include <torch/torch.h>

#include <c10/core/Event.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "amp.h"
#include "dscache/cache.h"
#include "dscache/loader.h"
#include "models.h"
#include "options.h"

namespace dscache {
namespace train {

// Per-channel mean and std of pixel values scaled to [0, 1].
struct Normalization {
  std::vector<double> mean;  // one per channel
  std::vector<double> std;   // one per channel, > 0
};

// kHalf: 0.5/0.5. kDataset: measured over up to `max_samples` samples spread evenly over the
// cache (every pixel of each), in double; a std below 1e-3 becomes 1e-3.
Normalization measure_normalization(const SampleSource& cache, NormalizeKind kind,
                                    uint64_t max_samples = 8192);

// Turns a Loader batch into tensors on the training device. The uint8 NHWC buffer is wrapped
// with from_blob (no host copy), moved to the device as uint8, then converted to float,
// normalized ((x/255 - mean)/std) and viewed as NCHW there; with channels_last the result keeps
// NHWC strides (torch's channels-last format), otherwise it is made NCHW-contiguous.
//
// On CUDA the copies are asynchronous (non_blocking): the images straight from the Loader's
// buffer (page-locked when the Loader was given pinned_allocator()), the labels through a small
// page-locked staging tensor. The Loader may refill a buffer once next() is called again, so
// call wait_copied() before that: it waits for the copies queued so far, not for the compute
// queued after them. On CPU the copies are plain and wait_copied() does nothing.
class BatchConverter {
 public:
  BatchConverter(const Normalization& norm, torch::Device device, bool channels_last);
  // Valid after the Loader's buffer is reused: the float tensor is a new allocation.
  torch::Tensor images(const Batch& batch) const;
  torch::Tensor labels(const Batch& batch) const;  // int64 (N,), a copy on the device
  void wait_copied() const;

 private:
  void mark_copied() const;

  torch::Device device_;
  bool channels_last_;
  torch::Tensor shift_;  // mean*255, (1, C, 1, 1) float on device
  torch::Tensor scale_;  // 1/(255*std), (1, C, 1, 1)
  // CUDA only: the last queued copy, and the labels' page-locked staging tensor.
  mutable std::optional<c10::Event> copied_;
  mutable torch::Tensor label_staging_;
};

// Loader buffers allocated as LibTorch CPU tensors and held until the Loader releases them:
// page-locked (CUDA's pinned host allocator; needs a CUDA build) when `pinned`, ordinary
// otherwise.
BufferAllocator tensor_allocator(bool pinned);

// How the forward pass runs.
struct AmpConfig {
  torch::DeviceType device = torch::kCPU;
  bool autocast = false;                     // false: fp32
  torch::ScalarType dtype = torch::kBFloat16;  // autocast dtype
};
AmpConfig amp_config(Precision precision, DeviceKind device);

// Left on the device, so a micro-step does not wait for the device to finish: the training
// loop adds them up and reads them once per accumulation window.
struct MicroResult {
  torch::Tensor loss_sum;  // 0-dim double: summed cross entropy of the micro-batch (unscaled)
  torch::Tensor correct;   // 0-dim int64: argmax hits
};

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
