// AutocastGuard and GradScaler.
#include "amp.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace dscache {
namespace train {

namespace {

// LibTorch 2.4 replaced the per-backend autocast calls (is_cpu_enabled, set_autocast_gpu_dtype,
// ...) with ones that take the device type; 1.13 (Debian) has only the old ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(torch::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_autocast_enabled(torch::DeviceType d, bool on) {
  at::autocast::set_autocast_enabled(d, on);
}
torch::ScalarType autocast_dtype(torch::DeviceType d) {
  return at::autocast::get_autocast_dtype(d);
}
void set_autocast_dtype(torch::DeviceType d, torch::ScalarType t) {
  at::autocast::set_autocast_dtype(d, t);
}
#else
bool autocast_enabled(torch::DeviceType d) {
  return d == torch::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void set_autocast_enabled(torch::DeviceType d, bool on) {
  if (d == torch::kCPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
}
torch::ScalarType autocast_dtype(torch::DeviceType d) {
  return d == torch::kCPU ? at::autocast::get_autocast_cpu_dtype()
                          : at::autocast::get_autocast_gpu_dtype();
}
void set_autocast_dtype(torch::DeviceType d, torch::ScalarType t) {
  if (d == torch::kCPU) {
    at::autocast::set_autocast_cpu_dtype(t);
  } else {
    at::autocast::set_autocast_gpu_dtype(t);
  }
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(torch::DeviceType device, torch::ScalarType dtype, bool enabled)
    : device_(device) {
  if (device != torch::kCPU && device != torch::kCUDA) {
    throw std::invalid_argument("AutocastGuard: only CPU and CUDA devices");
  }
  prev_enabled_ = autocast_enabled(device);
  prev_dtype_ = autocast_dtype(device);
  set_autocast_enabled(device, enabled);
  set_autocast_dtype(device, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_enabled(device_, prev_enabled_);
  set_autocast_dtype(device_, prev_dtype_);
}

bool grads_finite(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> sums;
  sums.reserve(params.size());
  for (const auto& p : params) {
    if (p.grad().defined()) sums.push_back(p.grad().sum(torch::kDouble));
  }
  if (sums.empty()) return true;
  return torch::stack(sums).sum().isfinite().item<bool>();
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || !(options.growth_factor > 1) ||
      !(options.backoff_factor > 0 && options.backoff_factor < 1) || options.growth_interval < 1) {
    throw std::invalid_argument(
        "GradScaler: need init_scale > 0, growth_factor > 1, "
        "0 < backoff_factor < 1, growth_interval >= 1");
  }
}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  if (!unscaled_) {
    // The reciprocal in double then float: exact for the power-of-two scales this class makes.
    const double inv = 1.0 / scale_;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> cpu_params;
    std::map<std::pair<std::string, torch::ScalarType>, std::vector<torch::Tensor>> cuda_groups;
    for (const auto& p : params) {
      if (!p.grad().defined()) continue;
      if (p.grad().is_cuda()) {
        cuda_groups[{p.grad().device().str(), p.grad().scalar_type()}].push_back(p.mutable_grad());
      } else {
        p.mutable_grad().mul_(inv);
        cpu_params.push_back(p);
      }
    }
    found_inf_ = !cpu_params.empty() && !grads_finite(cpu_params);
    // CUDA: the fused kernel PyTorch's GradScaler uses (LibTorch 1.13 has it for CUDA only):
    // unscale in place and flag any inf/NaN, one launch per device and dtype.
    for (auto& [key, grads] : cuda_groups) {
      const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(grads.front().device());
      torch::Tensor found = torch::zeros({1}, opts);
      at::_amp_foreach_non_finite_check_and_unscale_(grads, found, torch::full({1}, inv, opts));
      found_inf_ = found_inf_ || found.item<float>() != 0;
    }
    unscaled_ = true;
  }
  return !found_inf_;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer,
                      const std::vector<torch::Tensor>& params) {
  const bool finite = unscale(params);
  if (finite) optimizer.step();
  update(!finite);
  return finite;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

void GradScaler::load_state(double scale, int64_t growth_tracker) {
  if (!(scale > 0) || growth_tracker < 0) {
    throw std::invalid_argument("GradScaler: bad saved state (scale must be > 0)");
  }
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  unscaled_ = false;
  found_inf_ = false;
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", c10::IValue(scale_));
  archive.write("growth_tracker", c10::IValue(growth_tracker_));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  c10::IValue scale, tracker;
  archive.read("scale", scale);
  archive.read("growth_tracker", tracker);
  load_state(scale.toDouble(), tracker.toInt());
}

}  // namespace train
}  // namespace dscache
