// Multilabel and regression targets in tensors: batch targets, loss, forward/backward.
#include "task.h"

#include <optional>
#include <stdexcept>

#include "dscache/fields.h"

namespace dscache {
namespace train {

torch::Tensor batch_targets(const TargetSpec& spec, const Batch& batch, torch::Device device,
                            const std::string& where) {
  const int64_t n = batch.size, t = spec.outputs();
  torch::Tensor host = torch::empty({n, t}, torch::kFloat);
  float* out = host.data_ptr<float>();
  for (size_t j = 0; j < spec.fields.size(); ++j) {
    const FieldBatch* fb = batch.field(spec.fields[j]);
    if (!fb) {
      throw std::logic_error("batch_targets: the Loader did not serve field " + spec.fields[j]);
    }
    const FieldSpec& f = *fb->spec;
    const uint64_t per = f.row_elements();
    for (int64_t s = 0; s < n; ++s) {
      for (uint64_t e = 0; e < per; ++e) {
        const size_t k = j + e;
        const double v = element_at(f.dtype, fb->data, s * per + e);
        check_target_value(spec, f.name, batch.indices[s], v, where);
        out[s * t + k] = static_cast<float>((v - spec.mean[k]) / spec.std[k]);
      }
    }
  }
  return device.is_cpu() ? host : host.to(device);
}

torch::Tensor target_loss_sum(const TargetSpec& spec, const torch::Tensor& outputs,
                              const torch::Tensor& targets) {
  namespace F = torch::nn::functional;
  if (spec.kind == TaskKind::kMultilabel) {
    return F::binary_cross_entropy_with_logits(
        outputs, targets, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum));
  }
  switch (spec.loss) {
    case RegressLoss::kMse:
      return F::mse_loss(outputs, targets, F::MSELossFuncOptions().reduction(torch::kSum));
    case RegressLoss::kL1:
      return F::l1_loss(outputs, targets, F::L1LossFuncOptions().reduction(torch::kSum));
    case RegressLoss::kHuber:
      return F::huber_loss(outputs, targets, F::HuberLossFuncOptions().reduction(torch::kSum));
  }
  throw std::logic_error("target_loss_sum: unknown loss");
}

MicroResult forward_backward_targets(Classifier& model, const torch::Tensor& x,
                                     const torch::Tensor& targets, const TargetSpec& spec,
                                     int64_t window_samples, const AmpConfig& amp,
                                     const GradScaler* scaler) {
  torch::Tensor outputs;
  const torch::Tensor loss_sum = backward_window_share(
      model, x, window_samples, amp, scaler,
      [&](const torch::Tensor& out) { return target_loss_sum(spec, out, targets); }, &outputs);
  MicroResult r;
  r.loss_sum = loss_sum.detach().to(torch::kDouble);
  if (spec.kind == TaskKind::kMultilabel) {
    r.correct = ((outputs.detach() >= 0) == (targets > 0.5)).all(1).sum();
  } else {
    r.correct = torch::zeros({}, torch::dtype(torch::kLong).device(outputs.device()));
  }
  return r;
}

}  // namespace train
}  // namespace dscache
