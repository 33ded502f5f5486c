// Bucketed, backward-overlapped gradient all-reduce (see grad_sync.h).
#include "grad_sync.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

namespace dscache {
namespace train {

namespace {

// Runs `fn` after an AccumulateGrad node has added its gradient to .grad.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit ReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

GradSync::GradSync(std::vector<torch::Tensor> params, Communicator& comm, uint64_t bucket_bytes)
    : params_(std::move(params)), comm_(comm), flat_(bucket_bytes == 0) {
  bucket_of_.assign(params_.size(), 0);
  uint64_t in_bucket = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& p = params_[k];
    if (!p.requires_grad()) continue;
    const uint64_t bytes = static_cast<uint64_t>(p.numel()) * p.element_size();
    bytes_ += bytes;
    const bool fits = !buckets_.empty() && (flat_ || in_bucket + bytes <= bucket_bytes);
    const bool same_kind = !buckets_.empty() &&
                           params_[buckets_.back().params[0]].scalar_type() == p.scalar_type() &&
                           params_[buckets_.back().params[0]].device() == p.device();
    if (!fits || !same_kind) {
      buckets_.emplace_back();
      in_bucket = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    in_bucket += bytes;
  }
  if (flat_) return;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!params_[k].requires_grad()) continue;
    // Holding the node keeps it (and the hook) alive between backwards, as DDP's Reducer does.
    std::shared_ptr<torch::autograd::Node> acc =
        torch::autograd::impl::grad_accumulator(params_[k]);
    const uintptr_t key =
        acc->add_post_hook(std::make_unique<ReadyHook>([this, k] { on_ready(k); }));
    hooks_.emplace_back(std::move(acc), key);
  }
}

GradSync::~GradSync() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
}

void GradSync::arm() {
  armed_ = true;
  next_start_ = 0;
  started_in_backward_ = 0;
  for (Bucket& b : buckets_) b.pending = b.params.size();
}

void GradSync::on_ready(size_t param) {
  if (!armed_) return;
  Bucket& b = buckets_[bucket_of_[param]];
  if (b.pending > 0) --b.pending;
  // Start in index order so that every rank issues the same collectives in the same order.
  while (next_start_ < buckets_.size() && buckets_[next_start_].pending == 0) {
    start(buckets_[next_start_++]);
    ++started_in_backward_;
  }
}

void GradSync::start(Bucket& b) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  parts.reserve(b.params.size());
  for (size_t k : b.params) {
    const torch::Tensor& p = params_[k];
    const torch::Tensor g = p.grad();
    parts.push_back(g.defined() ? g.reshape({-1}) : torch::zeros({p.numel()}, p.options()));
  }
  b.buffer = torch::cat(parts);
  b.wait = comm_.allreduce_sum_start(b.buffer);
}

void GradSync::finish() {
  torch::NoGradGuard no_grad;
  if (flat_) {  // one collective of the defined gradients, after the backward
    std::vector<torch::Tensor> grads;
    for (const auto& p : params_) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    comm_.allreduce_sum(grads);
    return;
  }
  if (!armed_) next_start_ = 0;  // not armed: start every bucket now
  armed_ = false;
  while (next_start_ < buckets_.size()) start(buckets_[next_start_++]);
  for (Bucket& b : buckets_) {
    b.wait();
    int64_t off = 0;
    for (size_t k : b.params) {
      const torch::Tensor& p = params_[k];
      const int64_t n = p.numel();
      if (p.grad().defined()) p.mutable_grad().copy_(b.buffer.slice(0, off, off + n).view_as(p));
      off += n;
    }
    b.buffer = torch::Tensor();
    b.wait = nullptr;
  }
}

}  // namespace train
}  // namespace dscache
