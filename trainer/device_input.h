// Loader batches to tensors on the training device: the conversion, and Loader buffers held as
// (optionally page-locked) LibTorch tensors.
#pragma once

#include <torch/types.h>

#include <c10/core/Event.h>

#include <optional>

#include "data.h"
#include "dscache/loader.h"

namespace dscache {
namespace train {

// Turns a Loader batch into tensors on the training device. The uint8 NHWC buffer is wrapped
// with from_blob (no host copy), moved to the device as uint8, then converted to float,
// normalized ((x/255 - mean)/std) and viewed as NCHW there; with channels_last the result keeps
// NHWC strides (torch's channels-last format), otherwise it is made NCHW-contiguous.
//
// On CUDA the copies are asynchronous (non_blocking): the images straight from the Loader's
// buffer (page-locked when the Loader was given tensor_allocator(true)), the labels through a small
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

}  // namespace train
}  // namespace dscache
