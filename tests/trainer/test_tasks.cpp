// --task multilabel and regress (suite unit): accumulation exactness per task, a learnable
// signal beating a constant predictor, and target fields refused by name.
#include "torch_doctest.h"  // first: LibTorch, then doctest

#include <ATen/Parallel.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/cache_writer.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/loader.h"
#include "fixtures.h"
#include "models.h"
#include "task.h"
#include "task_caches.h"
#include "task_metrics.h"
#include "tensor_checks.h"
#include "train_runs.h"

namespace {

using namespace dscache::train;
using dscache::FieldKind;
using dscache::FieldType;
using trainer_test::brightness_cache;
using trainer_test::fields_loader;
using trainer_test::rel_diff;
using trainer_test::TempDir;

using trainer_test::grads_of;
using trainer_test::zero_grads;

TaskOptions task(TaskKind kind, std::vector<std::string> targets,
                 RegressLoss loss = RegressLoss::kMse, bool norm = false) {
  TaskOptions t;
  t.kind = kind;
  t.targets = std::move(targets);
  t.loss = loss;
  t.target_norm = norm;
  return t;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("tasks: K micro-batches of b equal one batch of K*b for every task, last short") {
    at::set_num_threads(2);
    TempDir tmp;
    // 53 samples: micro-batches of 8, K = 4: windows of 32 and 21 samples.
    const auto cache = brightness_cache(tmp.path() + "/c", 53, 5);
    const BatchConverter conv(measure_normalization(*cache, NormalizeKind::kDataset), torch::kCPU,
                              false);
    const AmpConfig fp32 = amp_config(Precision::kFp32, DeviceKind::kCpu);
    struct Case {
      TaskOptions t;
      int64_t outputs;
    };
    const Case cases[] = {
        {task(TaskKind::kMultilabel, {"a", "b", "c"}), 3},
        {task(TaskKind::kMultilabel, {"tags"}), 3},
        {task(TaskKind::kRegress, {"r", "g"}), 2},
        {task(TaskKind::kRegress, {"r", "g"}, RegressLoss::kL1, true), 2},
        {task(TaskKind::kRegress, {"g"}, RegressLoss::kHuber, true), 1},
    };
    for (const Case& c : cases) {
      CAPTURE(std::string(to_string(c.t.kind)));
      CAPTURE(c.t.targets[0]);
      CAPTURE(std::string(to_string(c.t.loss)));
      TargetSpec spec = resolve_targets(c.t, *cache, "--train c");
      if (c.t.target_norm) measure_target_stats(*cache, "--train c", &spec);
      REQUIRE(spec.outputs() == c.outputs);
      torch::manual_seed(3);
      auto model = make_model(ModelKind::kCnn, 3, spec.outputs(), 12, 12);
      const auto params = model->parameters();
      auto micro = fields_loader(cache, 8, spec.fields, dscache::Shuffle::kGlobal);
      auto big = fields_loader(cache, 32, spec.fields, dscache::Shuffle::kGlobal);
      micro->start_epoch(7, 0);
      big->start_epoch(7, 0);
      const auto windows =
          window_sample_counts(micro->batches_per_epoch(), micro->samples_per_epoch(), 8, 4);
      REQUIRE(windows == std::vector<int64_t>{32, 21});
      for (size_t w = 0; w < windows.size(); ++w) {
        CAPTURE(w);
        zero_grads(params);
        double micro_loss = 0;
        for (int i = 0; i < 4; ++i) {
          const dscache::Batch* b = micro->next();
          if (!b) break;
          micro_loss += forward_backward_targets(*model, conv.images(*b),
                                                 batch_targets(spec, *b, torch::kCPU, "--train c"),
                                                 spec, windows[w], fp32, nullptr)
                            .loss_sum.item<double>();
        }
        const auto accumulated = grads_of(params);
        zero_grads(params);
        const dscache::Batch* b = big->next();
        REQUIRE(b != nullptr);
        REQUIRE(static_cast<int64_t>(b->size) == windows[w]);
        const MicroResult whole_r = forward_backward_targets(
            *model, conv.images(*b), batch_targets(spec, *b, torch::kCPU, "--train c"), spec,
            b->size, fp32, nullptr);
        const auto whole = grads_of(params);
        CHECK(rel_diff(accumulated, whole) < 1e-5);
        CHECK(micro_loss == doctest::Approx(whole_r.loss_sum.item<double>()).epsilon(1e-5));
        // Normalising by the nominal 32 instead of the true 21 is visible in the last window.
        if (windows[w] != 32) {
          zero_grads(params);
          forward_backward_targets(*model, conv.images(*b),
                                   batch_targets(spec, *b, torch::kCPU, "--train c"), spec, 32,
                                   fp32, nullptr);
          CHECK(rel_diff(grads_of(params), whole) > 0.3);
        }
      }
    }
  }

  TEST_CASE("tasks: targets, --target-norm statistics and the metrics' definitions") {
    TempDir tmp;
    const auto cache = brightness_cache(tmp.path() + "/c", 40, 9);
    TargetSpec spec = resolve_targets(task(TaskKind::kMultilabel, {"tags"}), *cache, "--train c");
    CHECK(spec.names == std::vector<std::string>{"red", "green", "blue"});
    CHECK(spec.array);
    TargetSpec reg =
        resolve_targets(task(TaskKind::kRegress, {"r", "g"}, RegressLoss::kMse, true), *cache, "x");
    measure_target_stats(*cache, "--train c", &reg);
    // r = 5 + 10 c/255 with c uniform on [0, 255]: mean near 10, std near 10/sqrt(12).
    CHECK(reg.mean[0] == doctest::Approx(10).epsilon(0.15));
    CHECK(reg.std[0] == doctest::Approx(10 / std::sqrt(12.0)).epsilon(0.2));
    auto loader = fields_loader(cache, 40, reg.fields, dscache::Shuffle::kNone);
    loader->start_epoch(0, 0);
    const dscache::Batch* b = loader->next();
    const torch::Tensor y = batch_targets(reg, *b, torch::kCPU, "--train c");
    CHECK(y.mean(0)[0].item<double>() == doctest::Approx(0).epsilon(1e-4).scale(1));
    CHECK(y.std(0, false)[1].item<double>() == doctest::Approx(1).epsilon(1e-4));
    // AP as scikit-learn computes it: scores .9 .8 .7 .6 for labels 1 0 1 0 → (1 + 2/3) / 2.
    CHECK(average_precision({.9f, .8f, .7f, .6f}, {1, 0, 1, 0}) == doctest::Approx(5.0 / 6));
    CHECK(average_precision({.5f, .5f, .5f, .5f}, {1, 0, 0, 0}) == doctest::Approx(0.25));
    CHECK(std::isnan(average_precision({.1f, .2f}, {0, 0})));
    // A class without positives is left out of the mean and reported as null.
    TargetMetrics m(resolve_targets(task(TaskKind::kMultilabel, {"a", "b"}), *cache, "x"));
    m.add(torch::tensor({{2.f, 1.f}, {-1.f, -2.f}}), torch::tensor({{1.f, 0.f}, {0.f, 0.f}}));
    const auto j = m.finish();
    CHECK(j["val_map"].get<double>() == doctest::Approx(1.0));
    CHECK(j["val_ap"][1].is_null());
    CHECK(j["val_micro_f1"].get<double>() == doctest::Approx(2.0 / 3));  // tp 1, fp 1, fn 0
    CHECK(j["val_acc"].get<double>() == doctest::Approx(0.5));           // sample 1 has both right
  }

  TEST_CASE("tasks: a learnable signal beats a constant predictor (multilabel, regress)") {
    at::set_num_threads(2);
    TempDir tmp;
    const auto train = brightness_cache(tmp.path() + "/train", 256, 1);
    const auto val = brightness_cache(tmp.path() + "/val", 128, 2);
    const Normalization norm = measure_normalization(*train, NormalizeKind::kDataset);
    const BatchConverter conv(norm, torch::kCPU, false);
    const AmpConfig fp32 = amp_config(Precision::kFp32, DeviceKind::kCpu);
    for (const TaskOptions& t : {task(TaskKind::kMultilabel, {"tags"}),
                                 task(TaskKind::kRegress, {"r", "g"}, RegressLoss::kMse, true)}) {
      CAPTURE(std::string(to_string(t.kind)));
      TargetSpec spec = resolve_targets(t, *train, "--train");
      if (t.target_norm) measure_target_stats(*train, "--train c", &spec);
      torch::manual_seed(1);
      auto model = make_model(ModelKind::kCnn, 3, spec.outputs(), 12, 12);
      torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
      auto loader = fields_loader(train, 16, spec.fields, dscache::Shuffle::kGlobal);
      auto vloader = fields_loader(val, 64, spec.fields, dscache::Shuffle::kNone);
      for (uint64_t epoch = 0; epoch < 6; ++epoch) {
        loader->start_epoch(0, epoch);
        while (const dscache::Batch* b = loader->next()) {
          opt.zero_grad();
          forward_backward_targets(*model, conv.images(*b),
                                   batch_targets(spec, *b, torch::kCPU, "--train c"), spec, b->size,
                                   fp32, nullptr);
          opt.step();
        }
      }
      const TargetEval ev = evaluate_targets(*model, *vloader, conv, fp32, spec, "--val v");
      MESSAGE(ev.metrics.dump());
      // The constant predictor: the training mean (a prevalence score for multilabel).
      TargetMetrics constant(spec);
      vloader->start_epoch(0, 0);
      while (const dscache::Batch* b = vloader->next()) {
        const torch::Tensor y = batch_targets(spec, *b, torch::kCPU, "--train c");
        torch::Tensor c = torch::zeros_like(y);  // normalised mean (regress); logit 0 (p = .5)
        constant.add(c, y);
      }
      const auto base = constant.finish();
      MESSAGE(base.dump());
      if (t.kind == TaskKind::kMultilabel) {
        CHECK(ev.metrics["val_map"].get<double>() > base["val_map"].get<double>() + 0.3);
        CHECK(ev.metrics["val_micro_f1"].get<double>() > base["val_micro_f1"].get<double>() + 0.15);
      } else {
        CHECK(ev.metrics["val_r2"].get<double>() > 0.8);
        CHECK(base["val_r2"].get<double>() < 0.05);
        CHECK(ev.metrics["val_mae"].get<double>() < 0.4 * base["val_mae"].get<double>());
      }
    }
  }

  TEST_CASE("tasks: target fields that do not fit are refused naming the field") {
    TempDir tmp;
    const auto cache = brightness_cache(tmp.path() + "/c", 4, 1);
    struct Case {
      TaskOptions t;
      const char* want;
    };
    const Case cases[] = {
        {task(TaskKind::kMultilabel, {"nope"}),
         "field 'nope' does not exist in --train c (its fields: a, b, c, tags, r, g, id)"},
        {task(TaskKind::kMultilabel, {"r"}),
         "field 'r' in --train c is a scalar of float32; --task multilabel needs int64"},
        {task(TaskKind::kMultilabel, {"a", "tags"}),
         "field 'tags' is a multi-hot array; give it alone"},
        {task(TaskKind::kMultilabel, {"a", "a"}), "field 'a' is named twice"},
        {task(TaskKind::kRegress, {"tags"}),
         "field 'tags' in --train c is an array of uint8 [3]; --task regress needs scalars "
         "(float32, or integers read as float32)"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.want);
      try {
        resolve_targets(c.t, *cache, "--train c");
        FAIL("accepted");
      } catch (const dscache::UsageError& e) {
        CHECK(std::string(e.what()).find(c.want) != std::string::npos);
        CHECK(std::string(e.what()).rfind("--targets: ", 0) == 0);
      }
    }
    // A multilabel value other than 0/1 is named with its field and sample, at batch time.
    TargetSpec ids = resolve_targets(task(TaskKind::kMultilabel, {"id"}), *cache, "x");
    auto loader = fields_loader(cache, 4, ids.fields, dscache::Shuffle::kNone);
    loader->start_epoch(0, 0);
    const dscache::Batch* b = loader->next();
    try {
      batch_targets(ids, *b, torch::kCPU, "--train c");
      FAIL("accepted");
    } catch (const dscache::UsageError& e) {  // a bad value: exit 2
      CHECK(std::string(e.what()).find("field 'id' of sample 2 in --train c is 2; --task "
                                       "multilabel needs targets of 0 or 1") != std::string::npos);
    }
    // The checks that need no data.
    struct Plain {
      TaskOptions t;
      bool loss_given;
      const char* want;
    };
    const Plain plain[] = {
        {task(TaskKind::kMultilabel, {}), false, "--targets: required with --task multilabel"},
        {task(TaskKind::kRegress, {}), false, "--targets: required with --task regress"},
        {task(TaskKind::kClassify, {"a"}), false, "--targets: --task classify"},
        {task(TaskKind::kMultilabel, {"a"}), true, "--loss: applies to --task regress only"},
        {task(TaskKind::kMultilabel, {"a"}, RegressLoss::kMse, true), false,
         "--target-norm: applies"},
    };
    for (const Plain& p : plain) {
      CAPTURE(p.want);
      try {
        validate_task(p.t, p.loss_given, false);
        FAIL("accepted");
      } catch (const dscache::UsageError& e) {
        CHECK(std::string(e.what()).rfind(p.want, 0) == 0);
      }
    }
    CHECK(split_targets("a,b") == std::vector<std::string>{"a", "b"});
    CHECK_THROWS_AS(split_targets("a,,b"), dscache::UsageError);
  }
}

TEST_SUITE("cli") {
  TEST_CASE("tasks: dscache-train --task multilabel/regress logs their metrics and resumes them") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", val = tmp.path() + "/val";
    brightness_cache(train, 128, 1);
    brightness_cache(val, 64, 2);
    const std::string log = tmp.path() + "/log.txt";
    auto run = [&](const std::string& out, const std::vector<std::string>& flags) {
      const int st = trainer_test::run_process(
          trainer_test::cat({trainer_test::train_exe(), "--train", train, "--val", val, "--output",
                             out, "--no-progress", "--threads", "2", "--batch", "16"},
                            flags),
          {}, log);
      return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    struct Case {
      std::string out;
      std::vector<std::string> flags;
      std::vector<const char*> metrics;
    };
    const Case cases[] = {
        {tmp.path() + "/ml",
         {"--task", "multilabel", "--targets", "a,b,c", "--optimizer", "adamw"},
         {"val_map", "val_micro_f1", "train_acc", "val_acc"}},
        {tmp.path() + "/reg",
         {"--task", "regress", "--targets", "r,g", "--target-norm", "--loss", "l1", "--optimizer",
          "adamw"},
         {"val_mae", "val_rmse", "val_r2"}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.out);
      auto flags = c.flags;
      flags.insert(flags.end(), {"--epochs", "1"});
      REQUIRE(run(c.out, flags) == 0);
      flags.back() = "2";
      flags.push_back("--resume");  // the checkpoint's target statistics are read back
      INFO(trainer_test::read_file(log));
      REQUIRE(run(c.out, flags) == 0);
      const auto lines = trainer_test::read_metrics(c.out + "/metrics.jsonl");
      REQUIRE(lines.size() >= 2);
      const auto& last = lines.back();
      CHECK(last["kind"] == "epoch");
      CHECK(last["epoch"] == 1);
      CHECK(last["val_loss"].is_number());
      for (const char* k : c.metrics) {
        CAPTURE(k);
        CHECK(last[k].is_number());
      }
    }
    // Another task onto the regression checkpoint: refused (usage, 2) naming --task.
    CHECK(run(tmp.path() + "/reg", {"--task", "multilabel", "--targets", "a,b,c", "--optimizer",
                                    "adamw", "--epochs", "3", "--resume"}) == 2);
    CHECK(trainer_test::read_file(log).find("--task regress (this run: multilabel)") !=
          std::string::npos);
    // A field the cache lacks, named with the option and the cache.
    CHECK(run(tmp.path() + "/bad", {"--task", "regress", "--targets", "r,weight"}) == 2);
    CHECK(trainer_test::read_file(log).find("--targets: field 'weight' does not exist in --train " +
                                            train) != std::string::npos);
  }
}
