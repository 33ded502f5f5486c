// Loader batches to device tensors, and Loader buffers held as LibTorch tensors.
#include "device_input.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dscache {
namespace train {

BatchConverter::BatchConverter(const Normalization& norm, torch::Device device, bool channels_last)
    : device_(device), channels_last_(channels_last) {
  const int64_t c = static_cast<int64_t>(norm.mean.size());
  std::vector<float> shift, scale;
  for (int64_t i = 0; i < c; ++i) {
    shift.push_back(static_cast<float>(norm.mean[i] * 255.0));
    scale.push_back(static_cast<float>(1.0 / (255.0 * norm.std[i])));
  }
  shift_ = torch::tensor(shift).view({1, c, 1, 1}).to(device);
  scale_ = torch::tensor(scale).view({1, c, 1, 1}).to(device);
}

torch::Tensor BatchConverter::images(const Batch& b) const {
  // from_blob: a view of the Loader's buffer (const_cast: torch has no const tensors; it is only
  // read). uint8 crosses to the device (4x fewer bytes than float); the float copy is made there.
  torch::Tensor raw = torch::from_blob(const_cast<uint8_t*>(b.images),
                                       {b.size, b.height, b.width, b.channels}, torch::kUInt8);
  const bool cuda = device_.is_cuda();
  torch::Tensor x = raw.to(device_, /*non_blocking=*/cuda).permute({0, 3, 1, 2});
  if (cuda) mark_copied();
  x = x.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/false,
           channels_last_ ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
  x.sub_(shift_).mul_(scale_);
  return x;
}

torch::Tensor BatchConverter::labels(const Batch& b) const {
  torch::Tensor raw = torch::from_blob(const_cast<int64_t*>(b.labels), {b.size}, torch::kInt64);
  if (!device_.is_cuda()) return raw.clone();
  // A blocking copy from pageable memory would wait for all queued compute; stage the few
  // bytes in page-locked memory and copy asynchronously instead.
  wait_copied();  // the previous labels' copy may still read the staging tensor
  if (!label_staging_.defined() || label_staging_.numel() < b.size) {
    label_staging_ = torch::empty({std::max<int64_t>(b.size, 1024)},
                                  torch::TensorOptions().dtype(torch::kInt64).pinned_memory(true));
  }
  torch::Tensor staged = label_staging_.narrow(0, 0, b.size);
  staged.copy_(raw);
  torch::Tensor y = staged.to(device_, /*non_blocking=*/true);
  mark_copied();
  return y;
}

void BatchConverter::mark_copied() const {
  // An event on the current stream after the copies: waiting on it does not wait for the
  // kernels queued later (as a stream or device synchronize would).
  c10::impl::VirtualGuardImpl impl(device_.type());
  if (!copied_) copied_.emplace(device_.type());  // one event, recorded again each time
  copied_->record(impl.getStream(device_));
}

void BatchConverter::wait_copied() const {
  if (!copied_) return;
  while (!copied_->query()) std::this_thread::yield();  // c10::Event has no blocking wait in 1.13
}

BufferAllocator tensor_allocator(bool pinned) {
  struct Held {
    std::mutex mu;
    std::map<void*, torch::Tensor> tensors;
  };
  auto held = std::make_shared<Held>();
  BufferAllocator a;
  a.allocate = [held, pinned](size_t bytes) -> void* {
    // 64 spare bytes: CPU tensors are 64-byte aligned already, pinned ones page-aligned; the
    // slack keeps the promise if an allocator ever returns less.
    torch::Tensor t =
        torch::empty({static_cast<int64_t>(bytes + 64)},
                     torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
    const auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
    void* p = reinterpret_cast<void*>((addr + 63) / 64 * 64);
    std::lock_guard<std::mutex> lock(held->mu);
    held->tensors.emplace(p, std::move(t));
    return p;
  };
  a.release = [held](void* p) {
    std::lock_guard<std::mutex> lock(held->mu);
    held->tensors.erase(p);
  };
  return a;
}

}  // namespace train
}  // namespace dscache
