// The per-pixel models of --task segment: UnetSmall and ResNet18Seg.
#include <string>

#include "models.h"

namespace dscache {
namespace train {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace {

// GroupNorm in fp32: LibTorch 1.13's CPU group_norm refuses a bf16 input with fp32 weights,
// which is what autocast hands it (conv outputs are bf16); the next conv casts back.
torch::Tensor group_norm(nn::GroupNorm& gn, const torch::Tensor& x) {
  return gn(x.scalar_type() == torch::kFloat ? x : x.to(torch::kFloat));
}

// conv3x3 - GroupNorm(4) - ReLU, twice: `conv1` `gn1` `conv2` `gn2`.
class BlockImpl : public nn::Module {
 public:
  BlockImpl(int64_t in, int64_t out) {
    conv1_ =
        register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
    gn1_ = register_module("gn1", nn::GroupNorm(4, out));
    conv2_ =
        register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    gn2_ = register_module("gn2", nn::GroupNorm(4, out));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor y = torch::relu(group_norm(gn1_, conv1_(x)));
    return torch::relu(group_norm(gn2_, conv2_(y)));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::GroupNorm gn1_{nullptr}, gn2_{nullptr};
};

std::shared_ptr<nn::Module> block(int64_t in, int64_t out) {
  return std::make_shared<BlockImpl>(in, out);
}

torch::Tensor run(const std::shared_ptr<nn::Module>& block, const torch::Tensor& x) {
  return block->as<BlockImpl>()->forward(x);
}

// x resized to `like`'s height and width (bilinear, align_corners false).
torch::Tensor up_to(const torch::Tensor& x, const torch::Tensor& like) {
  return F::interpolate(x, F::InterpolateFuncOptions()
                               .size(std::vector<int64_t>{like.size(2), like.size(3)})
                               .mode(torch::kBilinear)
                               .align_corners(false));
}

}  // namespace

UnetSmall::UnetSmall(int64_t channels, int64_t classes) {
  enc1_ = register_module("enc1", block(channels, 16));
  enc2_ = register_module("enc2", block(16, 32));
  enc3_ = register_module("enc3", block(32, 64));
  mid_ = register_module("mid", block(64, 128));
  dec3_ = register_module("dec3", block(128 + 64, 64));
  dec2_ = register_module("dec2", block(64 + 32, 32));
  dec1_ = register_module("dec1", block(32 + 16, 16));
  head_ = register_module("head", nn::Conv2d(nn::Conv2dOptions(16, classes, 1)));
}

torch::Tensor UnetSmall::forward(torch::Tensor x) {
  const torch::Tensor e1 = run(enc1_, x);
  const torch::Tensor e2 = run(enc2_, torch::max_pool2d(e1, 2));
  const torch::Tensor e3 = run(enc3_, torch::max_pool2d(e2, 2));
  torch::Tensor y = run(mid_, torch::max_pool2d(e3, 2));
  y = run(dec3_, torch::cat({up_to(y, e3), e3}, 1));
  y = run(dec2_, torch::cat({up_to(y, e2), e2}, 1));
  y = run(dec1_, torch::cat({up_to(y, e1), e1}, 1));
  return head_(y);
}

ResNet18Seg::ResNet18Seg(int64_t channels, int64_t classes, bool small_input)
    : ResNet18(channels, small_input) {
  const int64_t widths[4] = {64, 128, 256, 512};
  for (int i = 0; i < 4; ++i) {
    lat_[i] = register_module("lat" + std::to_string(i + 1),
                              nn::Conv2d(nn::Conv2dOptions(widths[i], 64, 1)));
  }
  head_conv_ =
      register_module("head_conv", nn::Conv2d(nn::Conv2dOptions(64, 64, 3).padding(1).bias(false)));
  head_gn_ = register_module("head_gn", nn::GroupNorm(8, 64));
  head_out_ = register_module("head_out", nn::Conv2d(nn::Conv2dOptions(64, classes, 1)));
}

torch::Tensor ResNet18Seg::forward(torch::Tensor x) {
  const std::vector<torch::Tensor> c = stages(x);
  torch::Tensor p = lat_[3](c[3]);
  for (int i = 2; i >= 0; --i) p = lat_[i](c[i]) + up_to(p, c[i]);
  p = head_out_(torch::relu(group_norm(head_gn_, head_conv_(p))));
  return up_to(p, x);
}

}  // namespace train
}  // namespace dscache
