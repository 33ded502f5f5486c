// SyncBatchNorm as a custom autograd Function (see sync_bn.h).
#include "sync_bn.h"

#include <cstdint>
#include <stdexcept>

namespace dscache {
namespace train {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor per_channel(const torch::Tensor& v) { return v.view({1, -1, 1, 1}); }

struct SyncBnFunction : public torch::autograd::Function<SyncBnFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               torch::Tensor running_mean, torch::Tensor running_var,
                               torch::Tensor num_batches, double momentum, double eps,
                               const AllReduceFn* allreduce) {
    const int64_t c = x.size(1);
    const torch::Tensor xf = x.to(torch::kFloat);
    const std::vector<int64_t> dims = {0, 2, 3};
    torch::Tensor stats = torch::cat(
        {xf.sum(dims, false, torch::kDouble), xf.square().sum(dims, false, torch::kDouble),
         torch::full({1}, static_cast<double>(x.numel() / c), xf.options().dtype(torch::kDouble))});
    (*allreduce)(stats);
    const torch::Tensor count = stats.slice(0, 2 * c, 2 * c + 1);
    const double n = count.item<double>();
    const torch::Tensor mean64 = stats.slice(0, 0, c) / n;
    const torch::Tensor var64 = (stats.slice(0, c, 2 * c) / n - mean64.square()).clamp_min(0);
    const torch::Tensor mean = mean64.to(torch::kFloat);
    const torch::Tensor invstd = (var64 + eps).rsqrt().to(torch::kFloat);
    if (running_mean.defined()) {
      torch::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean64.to(running_mean.dtype()), momentum);
      const torch::Tensor unbiased = var64 * (n / std::max(1.0, n - 1));
      running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype()), momentum);
      if (num_batches.defined()) num_batches.add_(1);
    }
    const torch::Tensor xhat = (xf - per_channel(mean)) * per_channel(invstd);
    ctx->save_for_backward({xhat, weight, invstd});
    ctx->saved_data["n"] = n;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    // The all-reduce outlives the graph (it is the model's); the context holds only its address.
    ctx->saved_data["allreduce"] = reinterpret_cast<int64_t>(allreduce);
    return (xhat * per_channel(weight.to(torch::kFloat)) + per_channel(bias.to(torch::kFloat)))
        .to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &xhat = saved[0], &weight = saved[1], &invstd = saved[2];
    const double n = ctx->saved_data["n"].toDouble();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto* allreduce =
        reinterpret_cast<const AllReduceFn*>(ctx->saved_data["allreduce"].toInt());
    const int64_t c = xhat.size(1);
    const torch::Tensor dy = grad_out[0].to(torch::kFloat);
    const std::vector<int64_t> dims = {0, 2, 3};
    const torch::Tensor sum_dy = dy.sum(dims);
    const torch::Tensor sum_dy_xhat = (dy * xhat).sum(dims);
    torch::Tensor global = torch::cat({sum_dy, sum_dy_xhat}).to(torch::kDouble);
    (*allreduce)(global);
    const torch::Tensor mean_dy = (global.slice(0, 0, c) / n).to(torch::kFloat);
    const torch::Tensor mean_dy_xhat = (global.slice(0, c, 2 * c) / n).to(torch::kFloat);
    const torch::Tensor dx = (dy - per_channel(mean_dy) - xhat * per_channel(mean_dy_xhat)) *
                             per_channel(invstd * weight.to(torch::kFloat));
    return {dx.to(dtype),
            sum_dy_xhat.to(weight.scalar_type()),
            sum_dy.to(weight.scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sync_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                              const AllReduceFn& allreduce) {
  if (!bn.options.affine()) throw std::invalid_argument("sync_batch_norm: BatchNorm2d not affine");
  const double momentum = bn.options.momentum().value_or(0.1);
  const bool track = bn.options.track_running_stats();
  return SyncBnFunction::apply(x, bn.weight, bn.bias, track ? bn.running_mean : torch::Tensor(),
                               track ? bn.running_var : torch::Tensor(),
                               track ? bn.num_batches_tracked : torch::Tensor(), momentum,
                               bn.options.eps(), &allreduce);
}

}  // namespace train
}  // namespace dscache
