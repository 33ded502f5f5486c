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

}  // namespace trainer_test
