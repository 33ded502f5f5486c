// --task segment (suites unit and cli): the window's pixel normaliser, the metrics' definitions,
// a learnable signal, the command line, and resume bit-exact for every fields task.
#include "torch_doctest.h"  // first: LibTorch, then doctest

#include <ATen/Parallel.h>

#include <sys/wait.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/exit_codes.h"
#include "dscache/loader.h"
#include "fixtures.h"
#include "models.h"
#include "segment.h"
#include "task_caches.h"
#include "tensor_checks.h"
#include "train_runs.h"

namespace {

using namespace dscache::train;
using trainer_test::fields_loader;
using trainer_test::grads_of;
using trainer_test::rel_diff;
using trainer_test::shapes_cache;
using trainer_test::TempDir;
using trainer_test::zero_grads;

constexpr int64_t kPixels = 16 * 16;  // shapes_cache's images

TargetSpec segment_spec(const dscache::SampleSource& source, std::vector<double> weights = {}) {
  TaskOptions t;
  t.kind = TaskKind::kSegment;
  t.class_weights = std::move(weights);
  TargetSpec spec = resolve_targets(t, source, "--train c");
  scan_mask_classes(source, "--train c", &spec);
  return spec;
}

// PyTorch's own mean over the labelled pixels (weighted): the reference every window must meet.
torch::Tensor reference_loss(const TargetSpec& spec, const torch::Tensor& logits,
                             const torch::Tensor& masks) {
  namespace F = torch::nn::functional;
  auto o = F::CrossEntropyFuncOptions().ignore_index(spec.ignore_index);
  if (!spec.class_weights.empty()) {
    o.weight(torch::tensor(spec.class_weights, torch::kDouble).to(torch::kFloat));
  }
  return F::cross_entropy(logits, masks, o);
}

// (N, C, H, W) logits whose argmax is `pred` (N, H, W).
torch::Tensor logits_for(const torch::Tensor& pred, int64_t classes) {
  return torch::one_hot(pred, classes).permute({0, 3, 1, 2}).to(torch::kFloat);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("segment: K micro-batches of b equal one batch of K*b, labelled pixels per window") {
    at::set_num_threads(2);
    TempDir tmp;
    // 53 samples: micro-batches of 8, K = 4: windows of 32 and 21 samples, every 7th sample
    // without a labelled pixel, so the micro-batches label very different pixel counts.
    const auto cache = shapes_cache(tmp.path() + "/c", 53, 5);
    const BatchConverter conv(measure_normalization(*cache, NormalizeKind::kDataset), torch::kCPU,
                              false);
    const AmpConfig fp32 = amp_config(Precision::kFp32, DeviceKind::kCpu);
    for (const std::vector<double>& weights : {std::vector<double>{}, {0.5, 2.0, 1.5}}) {
      CAPTURE(weights.size());
      const TargetSpec spec = segment_spec(*cache, weights);
      REQUIRE(spec.outputs() == 3);
      torch::manual_seed(3);
      auto model = make_model(ModelKind::kUnetSmall, 3, 3, 16, 16, true);
      const auto params = model->parameters();
      for (const auto& p : params) p.mutable_grad() = torch::zeros_like(p);  // for grads_of
      auto micro = fields_loader(cache, 8, spec.fields, dscache::Shuffle::kGlobal);
      auto big = fields_loader(cache, 32, spec.fields, dscache::Shuffle::kGlobal);
      micro->start_epoch(7, 0);
      big->start_epoch(7, 0);
      for (int64_t samples : {32, 21}) {
        CAPTURE(samples);
        zero_grads(params);
        double loss = 0, weight = 0;
        std::vector<torch::Tensor> per_batch;  // the mistake: each micro-batch its own mean
        for (int i = 0; i < 4; ++i) {
          const dscache::Batch* b = micro->next();
          if (!b) break;
          const std::vector<torch::Tensor> before = grads_of(params);
          const MicroResult r =
              forward_backward_segment(*model, conv.images(*b), batch_masks(spec, *b, torch::kCPU),
                                       spec, samples * kPixels, fp32, nullptr);
          loss += r.loss_sum.item<double>();
          weight += r.weight.item<double>();
          // This micro-batch's gradient on its own, normalised by its own labelled weight.
          const double own = r.weight.item<double>();
          std::vector<torch::Tensor> g = grads_of(params);
          for (size_t p = 0; p < g.size(); ++p) {
            g[p] = (g[p] - before[p]) * (own > 0 ? samples * kPixels / own : 0.0);
            per_batch.push_back(g[p]);
          }
        }
        rescale_window_grads(params, static_cast<double>(samples * kPixels), weight);
        const auto accumulated = grads_of(params);

        const dscache::Batch* b = big->next();
        REQUIRE(b != nullptr);
        REQUIRE(static_cast<int64_t>(b->size) == samples);
        const torch::Tensor x = conv.images(*b), masks = batch_masks(spec, *b, torch::kCPU);
        zero_grads(params);
        const torch::Tensor ref = reference_loss(spec, model->forward(x), masks);
        ref.backward();
        const auto whole = grads_of(params);
        // fp32 sums in another order: a few ulp per element, far below 1e-5 relative.
        CHECK(rel_diff(accumulated, whole) < 1e-5);
        CHECK(loss / weight == doctest::Approx(ref.item<double>()).epsilon(1e-5));

        // The mean of each micro-batch's own mean is another number: visible, 100x above the
        // tolerance (micro-batches of 8 label 55-100% of the window's mean pixel share).
        const size_t n = params.size(), k = per_batch.size() / n;
        std::vector<torch::Tensor> mean_of_means(n);
        for (size_t p = 0; p < n; ++p) {
          mean_of_means[p] = torch::zeros_like(whole[p]);
          for (size_t i = 0; i < k; ++i) mean_of_means[p] += per_batch[i * n + p] / double(k);
        }
        CHECK(rel_diff(mean_of_means, whole) > 1e-3);
      }
    }
  }

  TEST_CASE("segment: the dense models give a score per class and pixel at any size") {
    struct Case {
      ModelKind kind;
      int64_t h, w;
    };
    // unet-small at odd sizes (pools floor, ups go to the skip's size); resnet18 with the CIFAR
    // stem (<= 64 px) and the ImageNet one.
    const Case cases[] = {{ModelKind::kUnetSmall, 28, 28},
                          {ModelKind::kUnetSmall, 57, 45},
                          {ModelKind::kResnet18, 16, 16},
                          {ModelKind::kResnet18, 70, 90}};
    for (const Case& c : cases) {
      CAPTURE(c.h);
      auto model = make_model(c.kind, 3, 5, c.h, c.w, true);
      const torch::Tensor x = torch::randn({2, 3, c.h, c.w});
      CHECK(model->forward(x).sizes() == torch::IntArrayRef({2, 5, c.h, c.w}));
      // Under bf16 autocast too (GroupNorm takes fp32: 1.13's CPU kernel refuses mixed types).
      AutocastGuard guard(torch::kCPU, torch::kBFloat16);
      CHECK(model->forward(x).sizes() == torch::IntArrayRef({2, 5, c.h, c.w}));
    }
    int64_t n = 0;
    auto unet = make_model(ModelKind::kUnetSmall, 3, 11, 56, 56, true);
    for (const auto& p : unet->parameters()) n += p.numel();
    CHECK(n > 300000);  // "a few hundred thousand"
    CHECK(n < 600000);
    const auto named = unet->named_parameters();
    for (const char* k : {"enc1.conv1.weight", "enc1.gn1.weight", "mid.conv2.weight",
                          "dec1.gn2.bias", "head.weight", "head.bias"}) {
      CAPTURE(k);
      CHECK(named.contains(k));
    }
    CHECK_THROWS_AS(make_model(ModelKind::kCnn, 3, 5, 16, 16, true), std::invalid_argument);
    CHECK_THROWS_AS(make_model(ModelKind::kUnetSmall, 3, 5, 16, 16, false), std::invalid_argument);
  }

  TEST_CASE("segment: classes, masks out of range, and the metrics' definitions") {
    TempDir tmp;
    const auto unnamed = shapes_cache(tmp.path() + "/u", 30, 2, /*named=*/false);
    const auto named = shapes_cache(tmp.path() + "/n", 30, 2);
    CHECK(segment_spec(*unnamed).names == std::vector<std::string>{"0", "1", "2"});
    CHECK(segment_spec(*named).names == std::vector<std::string>{"background", "red", "blue"});
    CHECK_THROWS_WITH_AS(segment_spec(*named, {1.0, 2.0}),
                         doctest::Contains("--class-weights: 2 weights for the 3 classes"),
                         dscache::UsageError);
    TaskOptions t;
    t.kind = TaskKind::kSegment;
    t.targets = {"id"};
    CHECK_THROWS_WITH_AS(resolve_targets(t, *named, "--train c"),
                         doctest::Contains("field 'id' in --train c is a scalar of int64"),
                         dscache::UsageError);
    // A mask value that is neither a class nor the ignore index names its sample.
    TargetSpec two = segment_spec(*named);
    two.names.resize(2);
    auto loader = fields_loader(named, 30, two.fields, dscache::Shuffle::kNone);
    loader->start_epoch(0, 0);
    CHECK_THROWS_WITH_AS(batch_masks(two, *loader->next(), torch::kCPU),
                         doctest::Contains("has class 2; the run has 2 classes"), dscache::Error);

    // Truth [[0 1 1] [ignored 2 0]] against predictions [[0 1 0] [1 2 2]]: confusion rows
    // t0 {p0, p2}, t1 {p1, p0}, t2 {p2}; IoU 1/3, 1/2, 1/2; 3 of 5 labelled pixels right.
    TargetSpec spec = segment_spec(*named);
    const torch::Tensor truth = torch::tensor({0, 1, 1, 255, 2, 0}, torch::kLong).view({1, 2, 3});
    const torch::Tensor pred = torch::tensor({0, 1, 0, 1, 2, 2}, torch::kLong).view({1, 2, 3});
    SegmentMetrics m(spec);
    m.add(logits_for(pred, 3), truth);
    auto j = m.finish();
    CHECK(j["val_pixel_acc"].get<double>() == doctest::Approx(3.0 / 5));
    CHECK(j["val_iou"][0].get<double>() == doctest::Approx(1.0 / 3));
    CHECK(j["val_iou"][1].get<double>() == doctest::Approx(0.5));
    CHECK(j["val_miou"].get<double>() == doctest::Approx(4.0 / 9));
    // A fourth class in neither truth nor prediction: null, and left out of the mean.
    spec.names.push_back("green");
    SegmentMetrics m4(spec);
    m4.add(logits_for(pred, 4), truth);
    j = m4.finish();
    CHECK(j["val_iou"][3].is_null());
    CHECK(j["val_miou"].get<double>() == doctest::Approx(4.0 / 9));

    // pixel_loss: its sum over its weight is PyTorch's weighted mean over labelled pixels.
    spec = segment_spec(*named, {0.5, 2.0, 1.5});
    torch::manual_seed(1);
    const torch::Tensor logits = torch::randn({1, 3, 2, 3});
    const PixelLoss p = pixel_loss(spec, logits, truth);
    CHECK(p.weight.item<double>() == doctest::Approx(0.5 + 2 + 2 + 1.5 + 0.5));
    CHECK((p.loss_sum / p.weight).item<double>() ==
          doctest::Approx(reference_loss(spec, logits, truth).item<double>()).epsilon(1e-6));
  }

  TEST_CASE("segment: a learnable signal beats a constant predictor (unet-small)") {
    at::set_num_threads(2);
    TempDir tmp;
    const auto train = shapes_cache(tmp.path() + "/train", 256, 1);
    const auto val = shapes_cache(tmp.path() + "/val", 128, 2);
    const BatchConverter conv(measure_normalization(*train, NormalizeKind::kDataset), torch::kCPU,
                              false);
    const AmpConfig fp32 = amp_config(Precision::kFp32, DeviceKind::kCpu);
    const TargetSpec spec = segment_spec(*train);
    torch::manual_seed(1);
    auto model = make_model(ModelKind::kUnetSmall, 3, spec.outputs(), 16, 16, true);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
    auto loader = fields_loader(train, 16, spec.fields, dscache::Shuffle::kGlobal);
    auto vloader = fields_loader(val, 64, spec.fields, dscache::Shuffle::kNone);
    for (uint64_t epoch = 0; epoch < 4; ++epoch) {
      loader->start_epoch(0, epoch);
      while (const dscache::Batch* b = loader->next()) {
        opt.zero_grad();
        const int64_t pixels = b->size * kPixels;
        const MicroResult r =
            forward_backward_segment(*model, conv.images(*b), batch_masks(spec, *b, torch::kCPU),
                                     spec, pixels, fp32, nullptr);
        rescale_window_grads(model->parameters(), pixels, r.weight.item<double>());
        opt.step();
      }
    }
    const TargetEval ev = evaluate_segment(*model, *vloader, conv, fp32, spec);
    MESSAGE(ev.metrics.dump());
    // The constant predictor: background everywhere (the most frequent class).
    SegmentMetrics constant(spec);
    vloader->start_epoch(0, 0);
    while (const dscache::Batch* b = vloader->next()) {
      const torch::Tensor masks = batch_masks(spec, *b, torch::kCPU);
      constant.add(logits_for(torch::zeros_like(masks), spec.outputs()), masks);
    }
    const auto base = constant.finish();
    MESSAGE(base.dump());
    CHECK(ev.metrics["val_miou"].get<double>() > base["val_miou"].get<double>() + 0.4);
    CHECK(ev.metrics["val_pixel_acc"].get<double>() > base["val_pixel_acc"].get<double>() + 0.1);
    for (int c = 1; c < 3; ++c) CHECK(ev.metrics["val_iou"][c].get<double>() > 0.5);
  }
}

TEST_SUITE("cli") {
  TEST_CASE("segment: dscache-train --task segment logs its metrics and refuses bad options") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", val = tmp.path() + "/val",
                      plain = tmp.path() + "/plain", log = tmp.path() + "/log.txt";
    shapes_cache(train, 96, 1);
    shapes_cache(val, 48, 2);
    trainer_test::brightness_cache(plain, 16, 1);
    auto run = [&](const std::string& data, const std::vector<std::string>& flags) {
      const int st = trainer_test::run_process(
          trainer_test::cat({trainer_test::train_exe(), "--train", data, "--threads", "2",
                             "--batch", "16", "--no-progress"},
                            flags),
          {}, log);
      return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    const std::string out = tmp.path() + "/out";
    // bf16 autocast (the tests pin fp32 otherwise): what --precision auto picks on such CPUs.
    REQUIRE(run(train,
                {"--val", val, "--output", out, "--task", "segment", "--epochs", "2", "--optimizer",
                 "adamw", "--class-weights", "0.5,1,1", "--precision", "bf16"}) == 0);
    const std::string text = trainer_test::read_file(log);
    INFO(text);
    CHECK(text.find("--task segment: mask 'mask', 3 classes (background, red, blue)") !=
          std::string::npos);
    CHECK(text.find("val_miou") != std::string::npos);  // the epoch summary
    const auto lines = trainer_test::read_metrics(out + "/metrics.jsonl");
    REQUIRE(!lines.empty());
    const auto& last = lines.back();
    CHECK(last["kind"] == "epoch");
    CHECK(last["epoch"] == 1);
    for (const char* k : {"val_loss", "val_miou", "val_pixel_acc", "train_pixel_acc"}) {
      CAPTURE(k);
      CHECK(last[k].is_number());
    }
    CHECK(last["val_iou"].size() == 3);
    CHECK(trainer_test::read_file(out + "/curves.png").compare(1, 3, "PNG") == 0);
    // model.json says what the outputs are: a score per class and pixel.
    const auto card = nlohmann::json::parse(trainer_test::read_file(out + "/model.json"));
    CHECK(card["task"] == "segment");
    CHECK(card["model"] == "unet-small");
    CHECK(card["outputs"] == 3);
    CHECK(card["classes"] == std::vector<std::string>{"background", "red", "blue"});
    CHECK(card["ignore_index"] == 255);

    struct Bad {
      std::string data;
      std::vector<std::string> flags;
      const char* says;
    };
    const Bad bad[] = {
        {plain, {"--task", "segment"}, "has no mask field"},
        {train, {"--task", "segment", "--model", "cnn"}, "--model: cnn has no per-pixel output"},
        {train, {"--model", "unet-small"}, "--model: unet-small predicts a class per pixel"},
        {train, {"--task", "segment", "--class-weights", "1,2"}, "2 weights for the 3 classes"},
        {train, {"--task", "segment", "--class-weights", "1,-2,1"}, "'-2' in '1,-2,1' is not"},
        {train, {"--ignore-index", "0"}, "--ignore-index/--class-weights: apply to --task segment"},
        {train, {"--task", "segment", "--targets", "mask,id"}, "predicts one mask field, not 2"},
    };
    for (const Bad& b : bad) {
      CAPTURE(b.says);
      CHECK(run(b.data, b.flags) == static_cast<int>(dscache::ExitCode::kUsage));
      CHECK(trainer_test::read_file(log).find(b.says) != std::string::npos);
    }
  }

  TEST_CASE("data parallel segment: 2 Gloo ranks of batch b equal 1 process of batch 2b") {
    TempDir tmp;
    // 96 samples, 48 per rank, batch 8, K = 2 → 3 windows an epoch; the ranks label different
    // pixel counts, so a per-rank normaliser would show in the weights.
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    shapes_cache(train, 96, 4);
    auto args = [&](const std::string& batch, const std::string& out) {
      return trainer_test::cat(
          {trainer_test::train_exe(), "--train", train, "--batch", batch, "--output", out},
          {"--task", "segment", "--class-weights", "0.5,2,2", "--accum-steps", "2", "--threads",
           "1", "--seed", "3", "--epochs", "2", "--no-progress", "--log-every", "1"});
    };
    const int st = trainer_test::run_process(args("16", tmp.path() + "/single"), {}, log);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    for (int s : trainer_test::run_ranks(args("8", tmp.path() + "/ddp"), 2, {0, 1}, log)) {
      INFO(trainer_test::read_file(log));
      REQUIRE(WIFEXITED(s));
      CHECK(WEXITSTATUS(s) == 0);
    }
    trainer_test::check_close_weights(tmp.path() + "/single/model.pt", tmp.path() + "/ddp/model.pt",
                                      ModelKind::kUnetSmall, 3, 3, 16, 16, 1e-4, 1e-6);
    const auto m1 = trainer_test::read_metrics(tmp.path() + "/single/metrics.jsonl");
    const auto m2 = trainer_test::read_metrics(tmp.path() + "/ddp/metrics.jsonl");
    REQUIRE(m1.size() == m2.size());
    for (size_t i = 0; i < m1.size(); ++i) {
      CAPTURE(i);
      CHECK(m1[i]["loss"].get<double>() ==
            doctest::Approx(m2[i]["loss"].get<double>()).epsilon(1e-4));
    }
  }

  TEST_CASE("resume after SIGKILL is bit-exact for every fields task") {
    TempDir tmp;
    const std::string bright = tmp.path() + "/bright", shapes = tmp.path() + "/shapes";
    // 64 samples, batch 16, K = 2: 2 windows per epoch, 3 epochs = 6 steps (+ 3 epoch lines).
    trainer_test::brightness_cache(bright, 64, 1);
    shapes_cache(shapes, 64, 3);
    struct Case {
      std::string data;
      std::vector<std::string> flags;
      ModelKind model;
      int64_t outputs, side;
    };
    const Case cases[] = {
        {bright, {"--task", "multilabel", "--targets", "tags"}, ModelKind::kCnn, 3, 12},
        {bright,
         {"--task", "regress", "--targets", "r,g", "--target-norm", "--loss", "huber"},
         ModelKind::kCnn,
         2,
         12},
        {shapes, {"--task", "segment", "--class-weights", "0.5,2,2"}, ModelKind::kUnetSmall, 3, 16},
    };
    for (const Case& c : cases) {
      CAPTURE(c.flags[1]);
      const std::vector<std::string> args = trainer_test::cat(
          trainer_test::cat({"--train", c.data, "--val", c.data}, c.flags),
          {"--epochs", "3", "--batch", "16", "--accum-steps", "2", "--threads", "2", "--seed", "5",
           "--optimizer", "adamw", "--checkpoint-every", "1", "--log-every", "1"});
      const std::string work = tmp.path() + "/" + c.flags[1];
      std::filesystem::create_directories(work);
      trainer_test::check_resume(work, args, 3, c.model, 3, c.outputs, c.side, c.side, 6 + 3,
                                 false);
    }
  }
}
