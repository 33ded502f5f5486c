// Tensor comparisons shared by the in-process trainer tests (they include LibTorch).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace trainer_test {

// ||a - b|| / ||b|| over all tensors together, in double.
inline double rel_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).pow(2).sum().item<double>();
    den += b[i].to(torch::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(num / den);
}

// Copies of the parameters' gradients.
inline std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> g;
  for (const auto& p : params) g.push_back(p.grad().detach().clone());
  return g;
}

inline void zero_grads(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace trainer_test
