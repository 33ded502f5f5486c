// A dscache-train model's outputs on a known input, for the Python mirrors' test
// (tests/cli/test_model_mirrors.py): builds the model with the trainer's make_model from a seed,
// saves its initial weights, gives every normalization layer non-trivial statistics and affine
// values, and writes model.pt (the trainer's save_model: what a run leaves), the input and the
// outputs in eval and in train mode as raw little-endian float32.
//
// Usage: model_forward KIND TASK C OUTPUTS H W SEED OUTDIR
//   KIND cnn | resnet18 | unet-small; TASK classify | segment. Writes OUTDIR/init.pt,
//   OUTDIR/model.pt, OUTDIR/x.f32 (2, C, H, W), OUTDIR/eval.f32 and OUTDIR/train.f32 ((2, OUTPUTS)
//   or (2, OUTPUTS, H, W)); train.f32 is the forward in train mode (BatchNorm on the batch's
//   statistics), taken after eval.f32 and not saved into model.pt.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "checkpoint.h"
#include "models.h"

namespace {

using namespace dscache::train;

void write_raw(const torch::Tensor& t, const std::string& path) {
  const torch::Tensor c = t.contiguous().to(torch::kFloat32);
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Running statistics and affine parameters away from their 0/1 defaults, so the test sees a
// mirror that swapped mean and variance, or ignored the running statistics, or the affine part.
void perturb_norms(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& b : model.named_buffers()) {
    const std::string& k = b.key();
    if (k.size() >= 12 && k.compare(k.size() - 12, 12, "running_mean") == 0) {
      b.value().uniform_(-0.5, 0.5);
    } else if (k.size() >= 11 && k.compare(k.size() - 11, 11, "running_var") == 0) {
      b.value().uniform_(0.5, 2.0);
    }
  }
  for (auto& p : model.named_parameters()) {
    const std::string& k = p.key();
    const bool norm = k.find("bn") != std::string::npos || k.find("gn") != std::string::npos ||
                      k.find("downsample.1") != std::string::npos;
    if (!norm) continue;
    if (k.size() >= 6 && k.compare(k.size() - 6, 6, "weight") == 0) {
      p.value().uniform_(0.5, 1.5);
    } else {
      p.value().uniform_(-0.2, 0.2);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: model_forward KIND TASK C OUTPUTS H W SEED OUTDIR\n");
    return 2;
  }
  const std::string kind_name = argv[1], task = argv[2], dir = argv[8];
  const int64_t c = std::atoll(argv[3]), outputs = std::atoll(argv[4]), h = std::atoll(argv[5]),
                w = std::atoll(argv[6]);
  const ModelKind kind = kind_name == "cnn"        ? ModelKind::kCnn
                         : kind_name == "resnet18" ? ModelKind::kResnet18
                                                   : ModelKind::kUnetSmall;
  at::set_num_threads(1);  // one summation order; the mirror's test runs on one thread too
  torch::manual_seed(std::atoll(argv[7]));
  const auto model = make_model(kind, c, outputs, h, w, task == "segment");
  Normalization norm;
  norm.mean.assign(static_cast<size_t>(c), 0.5);
  norm.std.assign(static_cast<size_t>(c), 0.25);
  save_model(*model, norm, dir + "/init.pt");
  perturb_norms(*model);
  const torch::Tensor x = torch::randn({2, c, h, w});
  torch::NoGradGuard no_grad;
  model->eval();
  write_raw(model->forward(x), dir + "/eval.f32");
  save_model(*model, norm, dir + "/model.pt");
  model->train();
  write_raw(model->forward(x), dir + "/train.f32");
  write_raw(x, dir + "/x.f32");
  return 0;
}
