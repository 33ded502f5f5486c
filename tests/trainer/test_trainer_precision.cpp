// dscache-train's mixed precision in process (suite unit): the autocast guard, a bf16
// micro-step's fp32 master weights and gradients, GradScaler, grads_finite and --precision auto.
#include "torch_doctest.h"  // first: LibTorch, then doctest

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "amp.h"
#include "checkpoint.h"
#include "dscache/cache.h"
#include "dscache/loader.h"
#include "fixtures.h"
#include "models.h"
#include "options.h"
#include "precision.h"
#include "tensor_checks.h"
#include "train.h"
#include "train_internal.h"

namespace {

using namespace dscache::train;
using trainer_test::rel_diff;

using trainer_test::grads_of;
using trainer_test::zero_grads;

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("autocast guard: bf16 conv/linear inside on CPU, fp32 outside, nesting restores") {
    at::autocast::set_autocast_cpu_dtype(torch::kBFloat16);
    REQUIRE_FALSE(at::autocast::is_cpu_enabled());
    torch::manual_seed(0);
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 4, 3));
    torch::nn::Linear lin(8, 2);
    const torch::Tensor img = torch::randn({2, 3, 6, 6});
    const torch::Tensor vec = torch::randn({2, 8});
    CHECK((conv(img).scalar_type() == torch::kFloat));
    {
      AutocastGuard outer(torch::kCPU, torch::kBFloat16);
      CHECK(at::autocast::is_cpu_enabled());
      CHECK((conv(img).scalar_type() == torch::kBFloat16));
      CHECK((lin(vec).scalar_type() == torch::kBFloat16));
      {
        AutocastGuard fp32_region(torch::kCPU, torch::kBFloat16, /*enabled=*/false);
        CHECK_FALSE(at::autocast::is_cpu_enabled());
        CHECK((lin(vec).scalar_type() == torch::kFloat));
      }
      CHECK(at::autocast::is_cpu_enabled());
      CHECK((lin(vec).scalar_type() == torch::kBFloat16));
      {
        AutocastGuard inner(torch::kCPU, torch::kBFloat16);
        CHECK((conv(img).scalar_type() == torch::kBFloat16));
      }
      CHECK(at::autocast::is_cpu_enabled());  // the inner guard put back the outer's state
    }
    CHECK_FALSE(at::autocast::is_cpu_enabled());
    CHECK((at::autocast::get_autocast_cpu_dtype() == torch::kBFloat16));
    CHECK((conv(img).scalar_type() == torch::kFloat));
    CHECK((lin(vec).scalar_type() == torch::kFloat));
    // Survives an exception (1.13 accepts only bf16 as the CPU autocast dtype, so the dtype
    // restore is seen only as "still bf16").
    try {
      AutocastGuard g(torch::kCPU, torch::kBFloat16);
      CHECK(at::autocast::is_cpu_enabled());
      throw std::runtime_error("x");
    } catch (const std::runtime_error&) {
    }
    CHECK_FALSE(at::autocast::is_cpu_enabled());
    CHECK((lin(vec).scalar_type() == torch::kFloat));
  }

  TEST_CASE("autocast: a bf16 micro-step keeps fp32 master weights and fp32 gradients") {
    // How close a bf16 gradient must be to the fp32 one, from the arithmetic rather than one
    // machine's output. bf16 keeps 8 significant bits (u = 2^-8), so every operand autocast
    // rounds moves by up to u relative. This net's gradient is sensitive to that far beyond u:
    // a rounding can flip a ReLU sign or a max-pool choice, and such flips dominate the error
    // (measured: rounding only x and the parameters moves the gradient by 2-12%). So the
    // yardstick is measured on the same computation: eps_leaf, the change when x and the 8
    // parameter tensors (9 tensors) are rounded to bf16 and the arithmetic stays fp32. Autocast
    // rounds at 20 sites instead (per layer: its input, weight, bias and output forward, the
    // incoming gradient backward); independent errors add in quadrature, sqrt(20/9) = 1.5, so
    // the pooled relative error over seeds must stay within 2 x eps_leaf where bf16 products are
    // accumulated in fp32 (AVX512_BF16/AMX, and oneDNN's emulation on AVX-512 CPUs without
    // them). CPUs without AVX-512 (AVX2) run ATen's bf16 kernels instead, which also keep the
    // sums of the gradient reductions (up to N*H*W = 6*8*8 = 384 terms here) in bf16: a blocked
    // or pairwise sum rounds once per level, log2(384) = 8.6 more roundings in quadrature, so
    // 2 x sqrt(1 + log2 384) = 6.2 x eps_leaf there. Both kernel paths run on every machine:
    // this CPU's own, and ATen's with oneDNN switched off (what an AVX2 CPU runs). Measured on
    // an AVX512_BF16 EPYC: pooled ratios 0.94 (oneDNN) and 3.0 (ATen). A gradient that is
    // wrong rather than rounded (unscaled, detached, another dtype) misses by orders more.
    struct MkldnnRestore {
      ~MkldnnRestore() { at::globalContext().setUserEnabledMkldnn(true); }
    } restore;
    auto sq_norm = [](const std::vector<torch::Tensor>& g) {
      double s = 0;
      for (const auto& t : g) s += t.to(torch::kDouble).pow(2).sum().item<double>();
      return s;
    };
    auto sq_dist = [](const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
      double s = 0;
      for (size_t i = 0; i < a.size(); ++i)
        s += (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).pow(2).sum().item<double>();
      return s;
    };
    const double reduction = 6.0 * 8 * 8;
    for (const bool onednn : {true, false}) {
      CAPTURE(onednn);
      at::globalContext().setUserEnabledMkldnn(onednn);
      const double factor = onednn ? 2.0 : 2.0 * std::sqrt(1.0 + std::log2(reduction));
      double err16 = 0, err_leaf = 0;
      for (int seed = 1; seed <= 8; ++seed) {
        CAPTURE(seed);
        torch::manual_seed(seed);
        auto model = make_model(ModelKind::kCnn, 1, 3, 8, 8);
        const auto params = model->parameters();
        const torch::Tensor x = torch::randn({6, 1, 8, 8});
        const torch::Tensor y = torch::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2});
        const AmpConfig fp32 = amp_config(Precision::kFp32, DeviceKind::kCpu);
        forward_backward(*model, x, y, 6, fp32, nullptr);
        const auto g32 = grads_of(params);
        zero_grads(params);
        const MicroResult r = forward_backward(
            *model, x, y, 6, amp_config(Precision::kBf16, DeviceKind::kCpu), nullptr);
        CHECK(std::isfinite(r.loss_sum.item<double>()));
        CHECK(r.correct.item<int64_t>() >= 0);
        for (const auto& p : params) {
          CHECK((p.scalar_type() == torch::kFloat));
          CHECK((p.grad().scalar_type() == torch::kFloat));
        }
        const auto g16 = grads_of(params);
        CHECK(rel_diff(g16, g32) > 0);  // bf16 really ran
        // The yardstick: the leaves rounded to bf16, fp32 arithmetic.
        zero_grads(params);
        {
          torch::NoGradGuard no_grad;
          for (auto& p : params) p.copy_(p.to(torch::kBFloat16).to(torch::kFloat));
        }
        forward_backward(*model, x.to(torch::kBFloat16).to(torch::kFloat), y, 6, fp32, nullptr);
        const auto g_leaf = grads_of(params);
        const double n32 = sq_norm(g32);
        err16 += sq_dist(g16, g32) / n32;
        err_leaf += sq_dist(g_leaf, g32) / n32;
      }
      const double ratio = std::sqrt(err16 / err_leaf);
      MESSAGE(std::string(onednn ? "oneDNN" : "ATen")
              << " bf16 kernels: pooled relative gradient error " << std::sqrt(err16 / 8) << ", "
              << ratio << " x the leaves' rounding (bound " << factor << ")");
      CHECK(err_leaf > 0);
      CHECK(ratio <= factor);
    }
    CHECK_FALSE(at::autocast::is_cpu_enabled());
  }

  TEST_CASE(
      "GradScaler: unscale is exact, inf skips the step and backs off, growth after the interval") {
    torch::manual_seed(0);
    torch::nn::Linear lin(4, 3);
    auto params = lin->parameters();
    torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));

    SUBCASE("defaults") {
      GradScaler s;
      CHECK(s.scale_value() == 65536.0);
      CHECK(s.growth_tracker() == 0);
    }
    SUBCASE("unscale exact") {
      GradScaler s;
      std::vector<torch::Tensor> want;
      for (auto& p : params) {
        want.push_back(torch::randn(p.sizes()));
        p.mutable_grad() = want.back() * 65536.0;
      }
      CHECK(s.unscale(params));
      CHECK(s.unscale(params));  // a second call in the same step does not divide again
      for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(params[i].grad(), want[i]));
    }
    SUBCASE("injected inf: step skipped, scale halved, tracker reset") {
      GradScaler s(GradScalerOptions{1024.0, 2.0, 0.5, 3});
      for (int i = 0; i < 2; ++i) {  // two clean steps first
        for (auto& p : params) p.mutable_grad() = torch::ones(p.sizes()) * s.scale_value();
        CHECK(s.step(opt, params));
      }
      CHECK(s.growth_tracker() == 2);
      std::vector<torch::Tensor> before;
      for (auto& p : params) before.push_back(p.detach().clone());
      for (auto& p : params) p.mutable_grad() = torch::ones(p.sizes());
      params[0].mutable_grad()[0][1] = std::numeric_limits<float>::infinity();
      CHECK_FALSE(s.step(opt, params));
      for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(params[i], before[i]));
      CHECK(s.scale_value() == 512.0);
      CHECK(s.growth_tracker() == 0);
      params[1].mutable_grad()[0] = std::nan("");
      CHECK_FALSE(s.step(opt, params));
      CHECK(s.scale_value() == 256.0);
    }
    SUBCASE("growth after growth_interval consecutive finite steps") {
      GradScaler s(GradScalerOptions{8.0, 2.0, 0.5, 3});
      for (int i = 0; i < 2; ++i) {
        for (auto& p : params) p.mutable_grad() = torch::ones(p.sizes());
        CHECK(s.step(opt, params));
        CHECK(s.scale_value() == 8.0);
      }
      for (auto& p : params) p.mutable_grad() = torch::ones(p.sizes());
      CHECK(s.step(opt, params));
      CHECK(s.scale_value() == 16.0);
      CHECK(s.growth_tracker() == 0);
    }
    SUBCASE("state round trip through an archive") {
      GradScaler s(GradScalerOptions{64.0, 2.0, 0.5, 100});
      for (int i = 0; i < 5; ++i) s.update(false);
      s.update(true);
      s.update(false);
      torch::serialize::OutputArchive out;
      s.save(out);
      std::ostringstream bytes;
      out.save_to(bytes);
      torch::serialize::InputArchive in;
      std::istringstream is(bytes.str());
      in.load_from(is);
      GradScaler t;
      t.load(in);
      CHECK(t.scale_value() == 32.0);
      CHECK(t.growth_tracker() == 1);
    }
    SUBCASE("scaled micro-steps then unscale give the unscaled gradient") {
      torch::manual_seed(2);
      auto model = make_model(ModelKind::kCnn, 1, 3, 8, 8);
      const auto mp = model->parameters();
      const torch::Tensor x = torch::randn({4, 1, 8, 8});
      const torch::Tensor y = torch::tensor(std::vector<int64_t>{0, 1, 2, 1});
      const AmpConfig a = amp_config(Precision::kFp32, DeviceKind::kCpu);
      forward_backward(*model, x, y, 4, a, nullptr);
      const auto plain = grads_of(mp);
      zero_grads(mp);
      GradScaler s;
      forward_backward(*model, x.slice(0, 0, 2), y.slice(0, 0, 2), 4, a, &s);
      forward_backward(*model, x.slice(0, 2, 4), y.slice(0, 2, 4), 4, a, &s);
      CHECK(s.unscale(mp));
      CHECK(rel_diff(grads_of(mp), plain) < 1e-5);
    }
  }

  TEST_CASE("grads_finite: one reduction sees inf and NaN anywhere") {
    auto a = torch::zeros({3}, torch::requires_grad());
    auto b = torch::zeros({2, 2}, torch::requires_grad());
    a.mutable_grad() = torch::ones({3});
    b.mutable_grad() = torch::ones({2, 2});
    CHECK(grads_finite({a, b}));
    b.mutable_grad()[1][1] = -std::numeric_limits<float>::infinity();
    CHECK_FALSE(grads_finite({a, b}));
    b.mutable_grad()[1][1] = std::nan("");
    CHECK_FALSE(grads_finite({a, b}));
    b.mutable_grad()[1][1] = 3.0e38f;  // finite values whose float sum would overflow
    a.mutable_grad()[0] = 3.0e38f;
    CHECK(grads_finite({a, b}));
  }

  TEST_CASE("precision auto: bf16 only where it is native, fp16 on older GPUs, else fp32") {
    bool help = false;
    CHECK((parse_options({"--train", "x"}, &help, nullptr).precision == Precision::kAuto));
    CpuBf16 native, avx2, capped;
    native.avx512_bf16 = true;
    capped.avx512_bf16 = true;
    capped.isa_cap = "avx2";
    capped.cap_allows_bf16 = false;
    CHECK(native.native());
    CHECK_FALSE(avx2.native());
    CHECK_FALSE(capped.native());
    const auto cpu = DeviceKind::kCpu, cuda = DeviceKind::kCuda;
    CHECK((choose_precision(Precision::kAuto, cpu, native, -1).precision == Precision::kBf16));
    CHECK((choose_precision(Precision::kAuto, cpu, avx2, -1).precision == Precision::kFp32));
    CHECK((choose_precision(Precision::kAuto, cpu, capped, -1).precision == Precision::kFp32));
    CHECK((choose_precision(Precision::kAuto, cuda, avx2, 8).precision == Precision::kBf16));
    CHECK((choose_precision(Precision::kAuto, cuda, avx2, 7).precision == Precision::kFp16));
    CHECK((choose_precision(Precision::kAuto, cuda, avx2, -1).precision == Precision::kFp16));
    const PrecisionChoice slow = choose_precision(Precision::kBf16, cpu, avx2, -1);
    CHECK((slow.precision == Precision::kBf16));  // as asked, but said to be slow
    CHECK(slow.warning.find("emulated") != std::string::npos);
    CHECK(choose_precision(Precision::kBf16, cpu, native, -1).warning.empty());
    CHECK(choose_precision(Precision::kFp32, cpu, native, -1).reason.empty());
    CHECK(choose_precision(Precision::kAuto, cpu, avx2, -1).reason.find("fp32") !=
          std::string::npos);
    // detect_cpu_bf16 agrees with the kernel's reading of the same CPU (/proc/cpuinfo flags).
    std::ifstream info("/proc/cpuinfo");
    std::string line, flags;
    while (std::getline(info, line)) {
      if (line.rfind("flags", 0) == 0) {
        flags = line + " ";
        break;
      }
    }
    if (!flags.empty()) {
      const CpuBf16 here = detect_cpu_bf16();
      CAPTURE(here.describe());
      CHECK(here.avx512_bf16 == (flags.find(" avx512_bf16 ") != std::string::npos));
      CHECK(here.amx_bf16 == (flags.find(" amx_bf16 ") != std::string::npos));
    }
  }
}  // TEST_SUITE unit
