// The models dscache-train can train: a small CNN and ResNet-18 (CIFAR and ImageNet stems).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "options.h"
#include "sync_bn.h"

namespace dscache {
namespace train {

// An image classifier: NCHW float input, (N, classes) logits out. Owned through shared_ptr like
// every torch::nn::Module; not thread-safe (one training thread).
class Classifier : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // --sync-bn: training-mode BatchNorm layers take their statistics over all ranks through
  // `allreduce` (sync_bn.h), which must outlive the model; an empty function restores plain
  // BatchNorm. No-op for models without BatchNorm.
  virtual void set_sync_bn(AllReduceFn allreduce) { (void)allreduce; }
};

// conv3x3(C→32, pad 1)–ReLU–maxpool2 – conv3x3(32→64, pad 1)–ReLU–maxpool2 – flatten –
// linear(→128)–ReLU – linear(→classes). No normalization layers, so gradients of a batch are
// the sum of its samples' gradients (what the accumulation test relies on).
class Cnn : public Classifier {
 public:
  Cnn(int64_t channels, int64_t classes, int64_t height, int64_t width);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// ResNet-18 (He et al. 2016, torchvision's layout and parameter names). `small_input` selects
// the CIFAR stem (3x3 stride-1 conv, no max-pool) used for images of at most 64 px; otherwise the
// ImageNet stem (7x7 stride-2 conv + 3x3 stride-2 max-pool).
class ResNet18 : public Classifier {
 public:
  ResNet18(int64_t channels, int64_t classes, bool small_input);
  torch::Tensor forward(torch::Tensor x) override;
  void set_sync_bn(AllReduceFn allreduce) override { *sync_ = std::move(allreduce); }

 private:
  bool small_input_;
  std::shared_ptr<AllReduceFn> sync_ = std::make_shared<AllReduceFn>();  // shared with blocks
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::ModuleList layers_[4];
  torch::nn::Linear fc_{nullptr};
};

// The model `kind` for images of height x width x channels and `classes` classes; parameters
// drawn from torch's default generator (seed it first for a reproducible init).
std::shared_ptr<Classifier> make_model(ModelKind kind, int64_t channels, int64_t classes,
                                       int64_t height, int64_t width);

}  // namespace train
}  // namespace dscache
