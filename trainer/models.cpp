// The small CNN and ResNet-18 (its stages also feed ResNet18Seg, seg_models.cpp).
#include "models.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace dscache {
namespace train {

namespace nn = torch::nn;

Cnn::Cnn(int64_t channels, int64_t classes, int64_t height, int64_t width) {
  conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(channels, 32, 3).padding(1)));
  conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
  const int64_t flat = 64 * (height / 4) * (width / 4);
  fc1_ = register_module("fc1", nn::Linear(flat, 128));
  fc2_ = register_module("fc2", nn::Linear(128, classes));
}

torch::Tensor Cnn::forward(torch::Tensor x) {
  x = torch::max_pool2d(torch::relu(conv1_(x)), 2);
  x = torch::max_pool2d(torch::relu(conv2_(x)), 2);
  x = torch::relu(fc1_(x.flatten(1)));
  return fc2_(x);
}

namespace {

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

// bn(x), with statistics over all ranks when sync-BN is on and bn is training.
torch::Tensor norm(nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const AllReduceFn& sync) {
  return sync && bn.is_training() ? sync_batch_norm(bn, x, sync) : bn.forward(x);
}

class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, std::shared_ptr<AllReduceFn> sync)
      : sync_(std::move(sync)) {
    conv1_ = register_module("conv1", conv(in, out, 3, stride, 1));
    bn1_ = register_module("bn1", nn::BatchNorm2d(out));
    conv2_ = register_module("conv2", conv(out, out, 3, 1, 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      downsample_ = register_module(
          "downsample", nn::Sequential(conv(in, out, 1, stride, 0), nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor identity = x;
    if (downsample_) {
      identity = norm(*downsample_->ptr(1)->as<nn::BatchNorm2dImpl>(),
                      downsample_->ptr(0)->as<nn::Conv2dImpl>()->forward(x), *sync_);
    }
    torch::Tensor y = torch::relu(norm(*bn1_, conv1_(x), *sync_));
    y = norm(*bn2_, conv2_(y), *sync_);
    return torch::relu(y + identity);
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential downsample_{nullptr};
  std::shared_ptr<AllReduceFn> sync_;
};

}  // namespace

ResNet18::ResNet18(int64_t channels, int64_t classes, bool small_input)
    : ResNet18(channels, small_input) {
  fc_ = register_module("fc", nn::Linear(512, classes));
}

ResNet18::ResNet18(int64_t channels, bool small_input) : small_input_(small_input) {
  conv1_ = register_module("conv1",
                           small_input ? conv(channels, 64, 3, 1, 1) : conv(channels, 64, 7, 2, 3));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  const int64_t widths[4] = {64, 128, 256, 512};
  int64_t in = 64;
  for (int i = 0; i < 4; ++i) {
    layers_[i] = register_module("layer" + std::to_string(i + 1), nn::ModuleList());
    const int64_t stride = i == 0 ? 1 : 2;
    layers_[i]->push_back(std::make_shared<BasicBlock>(in, widths[i], stride, sync_));
    layers_[i]->push_back(std::make_shared<BasicBlock>(widths[i], widths[i], 1, sync_));
    in = widths[i];
  }
  // torchvision's init: Kaiming-normal convs (fan_out), BN weight 1 / bias 0.
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    }
  }
}

std::vector<torch::Tensor> ResNet18::stages(torch::Tensor x) {
  x = torch::relu(norm(*bn1_, conv1_(x), *sync_));
  if (!small_input_) x = torch::max_pool2d(x, 3, 2, 1);
  std::vector<torch::Tensor> out;
  for (auto& layer : layers_) {
    for (auto& block : *layer) x = block->as<BasicBlock>()->forward(x);
    out.push_back(x);
  }
  return out;
}

torch::Tensor ResNet18::forward(torch::Tensor x) {
  x = stages(std::move(x)).back();
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc_(x);
}

std::shared_ptr<Classifier> make_model(ModelKind kind, int64_t channels, int64_t classes,
                                       int64_t height, int64_t width, bool dense) {
  const bool small = std::max(height, width) <= 64;
  if (dense) {
    if (kind == ModelKind::kResnet18)
      return std::make_shared<ResNet18Seg>(channels, classes, small);
    if (kind != ModelKind::kUnetSmall) {
      throw std::invalid_argument("--model cnn has no per-pixel output");
    }
    if (height < 8 || width < 8) {
      throw std::invalid_argument("--model unet-small needs images of at least 8x8 pixels");
    }
    return std::make_shared<UnetSmall>(channels, classes);
  }
  if (kind == ModelKind::kUnetSmall) {
    throw std::invalid_argument("--model unet-small predicts per pixel (--task segment)");
  }
  if (kind == ModelKind::kCnn) {
    if (height < 4 || width < 4) {
      throw std::invalid_argument("--model cnn needs images of at least 4x4 pixels");
    }
    return std::make_shared<Cnn>(channels, classes, height, width);
  }
  return std::make_shared<ResNet18>(channels, classes, small);
}

}  // namespace train
}  // namespace dscache
