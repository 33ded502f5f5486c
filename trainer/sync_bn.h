// SyncBatchNorm: a BatchNorm2d's training-mode forward with batch statistics over all ranks.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace dscache {
namespace train {

// Sums a contiguous tensor over all ranks in place (a blocking all-reduce).
using AllReduceFn = std::function<void(const torch::Tensor&)>;

// `bn` applied to the NCHW `x` in training mode, with the mean and (biased) variance of each
// channel taken over every rank's batch: the forward all-reduces the per-channel sum, sum of
// squares and count (one collective), the backward the per-channel sums of dy and dy·x̂ (one
// more), so x's gradient is that of BatchNorm over the concatenated global batch; the weight and
// bias gradients are this rank's share (the gradient all-reduce sums them). Updates bn's running
// mean, running variance (unbiased, from the global count) and num_batches_tracked like
// BatchNorm2d does. Statistics in fp64, the normalization in fp32; the result has x's dtype.
// Every rank must call it for the same layers in the same order. `bn` must be affine.
torch::Tensor sync_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                              const AllReduceFn& allreduce);

}  // namespace train
}  // namespace dscache
