// The models dscache-train can train: a small CNN and ResNet-18 (CIFAR and ImageNet stems), and
// for --task segment a small U-Net and ResNet-18 with an upsampling head.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

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

 protected:
  // The encoder alone (no `fc`), for ResNet18Seg.
  ResNet18(int64_t channels, bool small_input);
  // The outputs of layer1..layer4 (strides 1, 2, 4, 8 with the CIFAR stem; 4, 8, 16, 32 with
  // the ImageNet stem).
  std::vector<torch::Tensor> stages(torch::Tensor x);

 private:
  bool small_input_;
  std::shared_ptr<AllReduceFn> sync_ = std::make_shared<AllReduceFn>();  // shared with blocks
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::ModuleList layers_[4];
  torch::nn::Linear fc_{nullptr};
};

// A small U-Net (--model unet-small, ~480k parameters): (N, classes, H, W) logits for any H, W
// >= 8. block(a, b) = conv3x3 (no bias) `conv1` - GroupNorm(4) `gn1` - ReLU - conv3x3 `conv2` -
// GroupNorm(4) `gn2` - ReLU; encoder `enc1` (C->16), `enc2` (16->32), `enc3` (32->64), `mid`
// (64->128), each after a 2x2 max-pool but the first; decoder `dec3` (128+64->64), `dec2`,
// `dec1` on [bilinear up to the skip's size, skip]; `head` conv1x1 (16->classes). GroupNorm keeps
// samples independent, so a batch's gradient is the sum of its samples' (exact accumulation).
// python/dscache/models.py mirrors it parameter for parameter.
class UnetSmall : public Classifier {
 public:
  UnetSmall(int64_t channels, int64_t classes);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  // seg_models.cpp's conv-GroupNorm blocks
  std::shared_ptr<torch::nn::Module> enc1_, enc2_, enc3_, mid_, dec3_, dec2_, dec1_;
  torch::nn::Conv2d head_{nullptr};
};

// ResNet-18 as the encoder of a segmenter (--task segment --model resnet18): the four stages
// feed an FPN-style decoder (1x1 laterals `lat1`..`lat4` to 64 channels, added top-down after
// bilinear upsampling), then `head_conv` 3x3 - GroupNorm(8) `head_gn` - ReLU - `head_out` 1x1,
// upsampled to the input size: (N, classes, H, W) logits.
class ResNet18Seg : public ResNet18 {
 public:
  ResNet18Seg(int64_t channels, int64_t classes, bool small_input);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d lat_[4] = {nullptr, nullptr, nullptr, nullptr};
  torch::nn::Conv2d head_conv_{nullptr}, head_out_{nullptr};
  torch::nn::GroupNorm head_gn_{nullptr};
};

// The model `kind` for images of height x width x channels and `classes` outputs: a classifier,
// or with `dense` a per-pixel one (unet-small, or resnet18 as ResNet18Seg); parameters drawn
// from torch's default generator (seed it first for a reproducible init). std::invalid_argument
// for a kind that cannot be dense (cnn) or must be (unet-small), and for too small images.
std::shared_ptr<Classifier> make_model(ModelKind kind, int64_t channels, int64_t classes,
                                       int64_t height, int64_t width, bool dense = false);

}  // namespace train
}  // namespace dscache
