// Data-parallel gradient all-reduce: DDP-style buckets started from autograd hooks while the last
// backward of an accumulation window still runs, or one flat buffer after it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "distributed.h"

namespace dscache {
namespace train {

// Sums the gradients of `params` over the ranks of `comm`, once per optimizer step.
//
// Bucketed (bucket_bytes > 0): parameters are grouped, in reverse order (the order backward
// produces their gradients), into buckets of at most bucket_bytes (a larger parameter gets a
// bucket of its own). A post hook on each parameter's AccumulateGrad node counts gradients in;
// after arm(), the backward that follows starts an asynchronous all-reduce of each bucket as soon
// as all its gradients are accumulated (in bucket order, the same on every rank), so
// communication overlaps the rest of that backward. Without arm() the hooks do nothing: the
// other micro-steps of a window communicate nothing. finish() starts any bucket that is not
// started (parameters that got no gradient), waits for all and copies the sums back into .grad.
// Flat (bucket_bytes == 0): finish() alone, one buffer of every defined gradient.
//
// The sum is of whatever .grad holds (loss-scaled gradients under a GradScaler: unscale after
// finish()). Parameters whose .grad is undefined contribute zeros and stay undefined. Holds
// `comm` and the parameters' AccumulateGrad nodes; not thread-safe: arm(), backward and finish()
// on one training thread (the hooks run on the thread that runs the backward).
class GradSync {
 public:
  GradSync(std::vector<torch::Tensor> params, Communicator& comm, uint64_t bucket_bytes);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void arm();     // the next backward is the window's last one
  void finish();  // after that backward: .grad holds the sum over ranks

  size_t buckets() const { return buckets_.size(); }  // 1 when flat
  // Gradient bytes one optimizer step all-reduces (every parameter that requires grad).
  uint64_t bytes_per_step() const { return bytes_; }
  // Buckets started by the hooks during the last armed backward (the rest started in finish()).
  size_t started_in_backward() const { return started_in_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indexes into params_, in the order their gradients come
    size_t pending = 0;          // gradients not yet accumulated in the armed backward
    torch::Tensor buffer;        // flat; defined while its all-reduce runs
    std::function<void()> wait;
  };
  void on_ready(size_t param);
  void start(Bucket& b);

  std::vector<torch::Tensor> params_;
  Communicator& comm_;
  bool flat_;
  uint64_t bytes_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param index → bucket index
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  bool armed_ = false;
  size_t next_start_ = 0;  // buckets start in index order
  size_t started_in_backward_ = 0;
};

}  // namespace train
}  // namespace dscache
