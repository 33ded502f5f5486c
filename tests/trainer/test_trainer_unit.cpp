// dscache-train's parts in process (suite unit): accumulation equivalence, batch conversion,
// tensor-backed Loader buffers, the LR schedule, models, model.pt and the options table. Mixed
// precision (autocast, GradScaler, --precision auto) is in test_trainer_precision.cpp.
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
using trainer_test::Dataset;
using trainer_test::rel_diff;
using trainer_test::TempDir;

using trainer_test::grads_of;
using trainer_test::zero_grads;

// The accumulation tests' cache in `dir`: 53 samples of 12x12x3 in 4 classes, shards of 20;
// LibTorch set to 2 threads.
std::shared_ptr<dscache::Cache> cache_of_53(const TempDir& dir) {
  at::set_num_threads(2);
  trainer_test::write_cache(dir.path() + "/c", trainer_test::synthetic(53, 12, 12, 3, 4, 11), 20);
  return dscache::Cache::open(dir.path() + "/c");
}

std::shared_ptr<dscache::Loader> loader_for(std::shared_ptr<dscache::Cache> cache, uint32_t batch) {
  dscache::LoaderOptions lo;
  lo.batch_size = batch;
  lo.sampler.shuffle = dscache::Shuffle::kGlobal;
  return std::make_shared<dscache::Loader>(cache, lo);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE(
      "accumulation: K micro-batches of b equal one batch of K*b (cnn, fp32), last window short") {
    TempDir tmp;
    // 53 samples, b = 8: 7 micro-batches (6 x 8 + 5). Windows of K = 3: 24, 24, 5 samples.
    const auto cache = cache_of_53(tmp);
    const Normalization norm = measure_normalization(*cache, NormalizeKind::kDataset);
    const BatchConverter conv(norm, torch::kCPU, false);
    const AmpConfig fp32 = amp_config(Precision::kFp32, DeviceKind::kCpu);

    struct Case {
      uint32_t b, k;
      std::vector<int64_t> windows;
    };
    for (const Case& c : {Case{8, 3, {24, 24, 5}}, Case{8, 1, {8, 8, 8, 8, 8, 8, 5}},
                          Case{5, 4, {20, 20, 13}}, Case{8, 7, {53}}}) {
      CAPTURE(c.b);
      CAPTURE(c.k);
      torch::manual_seed(3);
      auto model = make_model(ModelKind::kCnn, 3, 4, 12, 12);
      const auto params = model->parameters();
      auto micro = loader_for(cache, c.b);
      auto big = loader_for(cache, c.b * c.k);
      micro->start_epoch(7, 0);
      big->start_epoch(7, 0);
      const auto windows =
          window_sample_counts(micro->batches_per_epoch(), micro->samples_per_epoch(), c.b, c.k);
      CHECK(windows == c.windows);
      for (size_t w = 0; w < windows.size(); ++w) {
        CAPTURE(w);
        zero_grads(params);
        for (uint32_t i = 0; i < c.k; ++i) {
          const dscache::Batch* b = micro->next();
          if (!b) break;
          forward_backward(*model, conv.images(*b), conv.labels(*b), windows[w], fp32, nullptr);
        }
        const auto accumulated = grads_of(params);
        zero_grads(params);
        const dscache::Batch* b = big->next();
        REQUIRE(b != nullptr);
        REQUIRE(static_cast<int64_t>(b->size) == windows[w]);
        forward_backward(*model, conv.images(*b), conv.labels(*b), b->size, fp32, nullptr);
        const auto whole = grads_of(params);
        CHECK(rel_diff(accumulated, whole) < 1e-5);
      }
      CHECK(micro->next() == nullptr);
      CHECK(big->next() == nullptr);
    }
  }

  TEST_CASE(
      "accumulation: dividing by the nominal K instead of the true count is detectably wrong") {
    // The last window of 53 samples in windows of 3 x 8 holds 5: a loss scaled by 1/(K*b) = 1/24
    // gives gradients 5/24 of the truth, far outside the 1e-5 the test above demands.
    TempDir tmp;
    const auto cache = cache_of_53(tmp);
    const BatchConverter conv(measure_normalization(*cache, NormalizeKind::kHalf), torch::kCPU,
                              false);
    const AmpConfig fp32 = amp_config(Precision::kFp32, DeviceKind::kCpu);
    torch::manual_seed(3);
    auto model = make_model(ModelKind::kCnn, 3, 4, 12, 12);
    const auto params = model->parameters();
    auto micro = loader_for(cache, 8);
    micro->restore({7, 0, 6});  // the last (short) batch
    const dscache::Batch* b = micro->next();
    REQUIRE(b->size == 5);
    const auto x = conv.images(*b), y = conv.labels(*b);
    zero_grads(params);
    forward_backward(*model, x, y, 24, fp32, nullptr);
    const auto nominal = grads_of(params);
    zero_grads(params);
    forward_backward(*model, x, y, 5, fp32, nullptr);
    const auto exact = grads_of(params);
    CHECK(rel_diff(nominal, exact) == doctest::Approx(1.0 - 5.0 / 24.0).epsilon(1e-4));
  }

  TEST_CASE(
      "batch conversion: NHWC uint8 → normalized NCHW float, channels-last keeps NHWC strides") {
    TempDir tmp;
    const Dataset d = trainer_test::synthetic(4, 5, 6, 3, 2, 1);
    trainer_test::write_cache(tmp.path() + "/c", d);
    auto cache = dscache::Cache::open(tmp.path() + "/c");
    Normalization norm{{0.1, 0.2, 0.3}, {0.5, 0.25, 0.125}};
    auto loader = loader_for(cache, 4);
    dscache::LoaderOptions lo;
    lo.batch_size = 4;
    lo.sampler.shuffle = dscache::Shuffle::kNone;
    dscache::Loader plain(cache, lo);
    plain.start_epoch(0, 0);
    const dscache::Batch* b = plain.next();
    REQUIRE(b);
    for (bool cl : {false, true}) {
      const torch::Tensor x = BatchConverter(norm, torch::kCPU, cl).images(*b);
      CHECK((x.sizes() == torch::IntArrayRef({4, 3, 5, 6})));
      CHECK((x.scalar_type() == torch::kFloat));
      CHECK(x.is_contiguous(cl ? torch::MemoryFormat::ChannelsLast
                               : torch::MemoryFormat::Contiguous));
      for (int n : {0, 3}) {
        for (int ch = 0; ch < 3; ++ch) {
          const int yy = 4, xx = 2;
          const double raw = d.images[((n * 5 + yy) * 6 + xx) * 3 + ch];
          const double want = (raw / 255.0 - norm.mean[ch]) / norm.std[ch];
          CHECK(x[n][ch][yy][xx].item<double>() == doctest::Approx(want).epsilon(1e-5));
        }
      }
    }
    const torch::Tensor y = BatchConverter(norm, torch::kCPU, false).labels(*b);
    CHECK((y.scalar_type() == torch::kInt64));
    CHECK(y[3].item<int64_t>() == d.labels[3]);
    CHECK(y.data_ptr<int64_t>() != b->labels);  // a copy: valid after the Loader reuses its buffer
  }

  TEST_CASE("tensor_allocator: Loader buffers held as torch tensors serve the same batches") {
    TempDir tmp;
    const Dataset d = trainer_test::synthetic(37, 5, 6, 3, 2, 4);
    trainer_test::write_cache(tmp.path() + "/c", d);
    auto cache = dscache::Cache::open(tmp.path() + "/c");
    dscache::LoaderOptions lo;
    lo.batch_size = 8;
    lo.prefetch = 2;
    auto epoch = [&](const dscache::LoaderOptions& o) {
      dscache::Loader loader(cache, o);
      loader.start_epoch(3, 1);
      std::vector<std::vector<uint8_t>> out;
      while (const dscache::Batch* b = loader.next()) {
        CHECK(reinterpret_cast<uintptr_t>(b->images) % 64 == 0);
        out.emplace_back(b->images, b->images + size_t{b->size} * 5 * 6 * 3);
      }
      return out;
    };
    const auto plain = epoch(lo);
    lo.allocator = tensor_allocator(/*pinned=*/false);
    const auto held = epoch(lo);
    CHECK(held.size() == 5);
    CHECK(held == plain);
    // Page-locked memory needs CUDA: a CPU-only LibTorch refuses it rather than pretending.
    if (!torch::cuda::is_available()) {
      lo.allocator = tensor_allocator(/*pinned=*/true);
      CHECK_THROWS(dscache::Loader(cache, lo));
    }
  }

  TEST_CASE("LR schedule per optimizer step: warm-up, constant, cosine, step") {
    TrainOptions o;
    o.lr = 0.1;
    o.warmup_steps = 4;
    struct Row {
      ScheduleKind kind;
      uint64_t step;
      double want;
    };
    const double pi = M_PI;
    for (const Row& r :
         {Row{ScheduleKind::kConstant, 0, 0.025}, Row{ScheduleKind::kConstant, 3, 0.1},
          Row{ScheduleKind::kConstant, 50, 0.1}, Row{ScheduleKind::kCosine, 4, 0.1},
          Row{ScheduleKind::kCosine, 9, 0.1 * 0.5 * (1 + std::cos(pi * 5 / 20))},
          Row{ScheduleKind::kCosine, 24, 0.0}, Row{ScheduleKind::kStep, 4, 0.1},
          Row{ScheduleKind::kStep, 10, 0.01}, Row{ScheduleKind::kStep, 16, 0.001}}) {
      o.schedule = r.kind;
      o.step_size = 6;
      CAPTURE(r.step);
      CHECK(lr_at(o, r.step, 24) == doctest::Approx(r.want).epsilon(1e-12));
    }
  }

  TEST_CASE("models: output shapes; resnet18 picks its stem by input size") {
    torch::NoGradGuard ng;
    struct Row {
      ModelKind kind;
      int64_t c, classes, h, w;
    };
    for (const Row& r :
         {Row{ModelKind::kCnn, 1, 10, 28, 28}, Row{ModelKind::kCnn, 3, 5, 13, 9},
          Row{ModelKind::kResnet18, 3, 10, 32, 32}, Row{ModelKind::kResnet18, 1, 7, 96, 80}}) {
      auto m = make_model(r.kind, r.c, r.classes, r.h, r.w);
      m->eval();
      CHECK(m->forward(torch::randn({2, r.c, r.h, r.w})).sizes() ==
            torch::IntArrayRef({2, r.classes}));
    }
    auto cifar = make_model(ModelKind::kResnet18, 3, 10, 32, 32);
    auto imagenet = make_model(ModelKind::kResnet18, 3, 10, 224, 224);
    CHECK((cifar->named_parameters()["conv1.weight"].sizes() == torch::IntArrayRef({64, 3, 3, 3})));
    CHECK((imagenet->named_parameters()["conv1.weight"].sizes() ==
           torch::IntArrayRef({64, 3, 7, 7})));
    CHECK(imagenet->named_parameters().contains("layer4.1.bn2.weight"));
    int64_t n = 0;
    for (const auto& p : imagenet->parameters()) n += p.numel();
    CHECK(n == 11181642);  // torchvision resnet18(num_classes=10)
    auto cnn = make_model(ModelKind::kCnn, 1, 10, 28, 28);
    CHECK((cnn->named_parameters()["fc1.weight"].sizes() == torch::IntArrayRef({128, 64 * 7 * 7})));
  }

  TEST_CASE("model.pt: the weights load into make_model's architecture, plus the norm buffers") {
    TempDir tmp;
    const std::string path = tmp.path() + "/model.pt";
    torch::manual_seed(3);
    auto saved = make_model(ModelKind::kResnet18, 3, 4, 16, 16);  // with BatchNorm buffers
    const Normalization norm{{0.1, 0.2, 0.30000001}, {0.5, 0.25, 0.125}};
    save_model(*saved, norm, path);
    // As docs/TRAINER.md says: InputArchive into the same architecture, then the two buffers.
    torch::manual_seed(4);
    auto loaded = make_model(ModelKind::kResnet18, 3, 4, 16, 16);
    torch::serialize::InputArchive a;
    a.load_from(path);
    loaded->load(a);
    auto want = saved->named_parameters();
    for (const auto& p : loaded->named_parameters()) {
      CAPTURE(p.key());
      CHECK(torch::equal(p.value(), want[p.key()]));
    }
    auto want_buffers = saved->named_buffers();
    for (const auto& b : loaded->named_buffers()) {
      CAPTURE(b.key());
      CHECK(torch::equal(b.value(), want_buffers[b.key()]));
    }
    torch::Tensor mean, stdv;
    a.read("dscache_norm_mean", mean, /*is_buffer=*/true);  // docs/TRAINER.md's names and calls
    a.read("dscache_norm_std", stdv, /*is_buffer=*/true);
    // (InputArchive reads them with is_buffer false too; that they are buffers, which Python's
    // named_buffers() lists, is tests/cli/test_model_export.py's to check.)
    CHECK(mean.dtype() == torch::kFloat32);
    CHECK(torch::equal(mean, torch::tensor({0.1f, 0.2f, 0.30000001f})));
    CHECK(torch::equal(stdv, torch::tensor({0.5f, 0.25f, 0.125f})));
  }

  TEST_CASE("options: every bad value is refused naming its field") {
    struct Row {
      std::vector<std::string> args;
      std::string field;
    };
    const std::vector<Row> rows = {
        {{}, "--train"},
        {{"--train", "x", "--batch", "0"}, "--batch"},
        {{"--train", "x", "--epochs", "0"}, "--epochs"},
        {{"--train", "x", "--model", "vgg"}, "--model"},
        {{"--train", "x", "--precision", "fp8"}, "--precision"},
        {{"--train", "x", "--precision", "fp16"}, "--precision"},
        {{"--train", "x", "--optimizer", "lamb"}, "--optimizer"},
        {{"--train", "x", "--schedule", "poly"}, "--schedule"},
        {{"--train", "x", "--device", "tpu"}, "--device"},
        {{"--train", "x", "--lr", "-1"}, "--lr"},
        {{"--train", "x", "--lr", "0"}, "--lr"},
        {{"--train", "x", "--momentum", "1.5"}, "--momentum"},
        {{"--train", "x", "--weight-decay", "-0.1"}, "--weight-decay"},
        {{"--train", "x", "--clip-grad", "-1"}, "--clip-grad"},
        {{"--train", "x", "--batch", "32", "--effective-batch", "100"}, "--effective-batch"},
        {{"--train", "x", "--accum-steps", "2", "--effective-batch", "64"}, "--accum-steps"},
        {{"--train", "x", "--accum-steps", "0"}, "--accum-steps"},
        {{"--train", "x", "--resume"}, "--resume"},
        {{"--train", "x", "--checkpoint-every", "5"}, "--checkpoint-every"},
        {{"--train", "x", "--batch", "lots"}, "batch"},
        {{"--train", "x", "--frobnicate"}, "frobnicate"},
        {{"--train", "x", "--lazy-cache", "f.bin"}, "--image-size"},
        {{"--train", "x", "--lazy-cache", "f.bin", "--image-size", "8", "--channels", "2"},
         "--channels"},
        {{"--train", "x", "--force"}, "--force"},
        {{"--train", "x", "--output", "o", "--force", "--resume"}, "--force"},
        {{"--train", "x", "--prefetch", "4294967295"}, "--prefetch"},
        {{"--train", "x", "--output", "o", "--allow-data-change"}, "--allow-data-change"},
    };
    for (const Row& r : rows) {
      CAPTURE(r.field);
      bool help = false;
      std::string message;
      try {
        TrainOptions o = parse_options(r.args, &help, nullptr);
        resolve_and_validate(&o);
      } catch (const UsageError& e) {
        message = e.what();
      }
      CAPTURE(message);
      CHECK(message.find(r.field) != std::string::npos);
    }
    bool help = false;
    TrainOptions o = parse_options(
        {"--train", "x", "--batch", "32", "--effective-batch", "256", "--optimizer", "adamw"},
        &help, nullptr);
    resolve_and_validate(&o);
    CHECK(o.accum_steps == 8);
    CHECK(o.lr == 1e-3);
    CHECK(o.weight_decay == 0.01);
  }

}  // TEST_SUITE unit
