// One optimizer step's pieces: autocast setting, forward/backward, windows, LR schedule.
#include "step.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

namespace dscache {
namespace train {

AmpConfig amp_config(Precision precision, DeviceKind device) {
  if (precision == Precision::kAuto) {
    throw std::logic_error("amp_config: --precision auto must be resolved first (precision.h)");
  }
  AmpConfig a;
  a.device = device == DeviceKind::kCuda ? torch::kCUDA : torch::kCPU;
  a.autocast = precision != Precision::kFp32;
  a.dtype = precision == Precision::kFp16 ? torch::kHalf : torch::kBFloat16;
  return a;
}

torch::Tensor backward_window_share(
    Classifier& model, const torch::Tensor& x, int64_t window_samples, const AmpConfig& amp,
    const GradScaler* scaler, const std::function<torch::Tensor(const torch::Tensor&)>& loss_sum_of,
    torch::Tensor* outputs) {
  torch::Tensor loss_sum;
  {
    std::optional<AutocastGuard> guard;
    if (amp.autocast) guard.emplace(amp.device, amp.dtype);
    *outputs = model.forward(x);
    loss_sum = loss_sum_of(outputs->to(torch::kFloat));
  }
  torch::Tensor loss = loss_sum / static_cast<double>(window_samples);
  if (scaler) loss = scaler->scale(loss);
  loss.backward();
  return loss_sum;
}

MicroResult forward_backward(Classifier& model, const torch::Tensor& x, const torch::Tensor& y,
                             int64_t window_samples, const AmpConfig& amp,
                             const GradScaler* scaler) {
  torch::Tensor logits;
  const torch::Tensor loss_sum = backward_window_share(
      model, x, window_samples, amp, scaler,
      [&](const torch::Tensor& out) {
        return torch::nn::functional::cross_entropy(
            out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      },
      &logits);
  MicroResult r;
  r.loss_sum = loss_sum.detach().to(torch::kDouble);
  r.correct = (logits.detach().argmax(1) == y).sum();
  return r;
}

std::vector<int64_t> window_sample_counts(uint64_t batches, uint64_t samples, uint32_t batch,
                                          uint32_t k) {
  std::vector<int64_t> out;
  for (uint64_t first = 0; first < batches; first += k) {
    const uint64_t end = std::min<uint64_t>(first + k, batches);
    int64_t n = 0;
    for (uint64_t b = first; b < end; ++b) {
      n += static_cast<int64_t>(b + 1 < batches ? batch : samples - (batches - 1) * batch);
    }
    out.push_back(n);
  }
  return out;
}

double lr_at(const TrainOptions& o, uint64_t step, uint64_t total_steps) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  const uint64_t s = step - o.warmup_steps;
  const uint64_t span = total_steps > o.warmup_steps ? total_steps - o.warmup_steps : 1;
  switch (o.schedule) {
    case ScheduleKind::kConstant:
      return o.lr;
    case ScheduleKind::kCosine: {
      const double t = std::min(1.0, static_cast<double>(s) / span);
      return o.lr * 0.5 * (1.0 + std::cos(M_PI * t));
    }
    case ScheduleKind::kStep: {
      const uint64_t size = o.step_size ? o.step_size : std::max<uint64_t>(1, span / 3);
      return o.lr * std::pow(o.gamma, static_cast<double>(s / size));
    }
  }
  return o.lr;
}

}  // namespace train
}  // namespace dscache
