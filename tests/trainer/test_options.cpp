// dscache-train's option names and byte counts: the tables, and parse_options through them.
// Links options.cpp alone (no LibTorch), so it builds in seconds.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../enum_table_check.h"
#include "option_names.h"
#include "options.h"

namespace {

using dscache::test::check_table;
using namespace dscache::train;

TrainOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"--train", "/nonexistent/cache"});
  bool help = false;
  return parse_options(args, &help, nullptr);
}

// The UsageError's message for `args`; fails the test when they parse.
std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  FAIL("accepted");
  return "";
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("every trainer options enum round-trips through its table") {
    using dscache::Shuffle;
    check_table<ModelKind>({kModelNames,
                            {{ModelKind::kCnn, "cnn"},
                             {ModelKind::kResnet18, "resnet18"},
                             {ModelKind::kUnetSmall, "unet-small"}},
                            "cnn, resnet18, unet-small"});
    check_table<Precision>({kPrecisionNames,
                            {{Precision::kAuto, "auto"},
                             {Precision::kFp32, "fp32"},
                             {Precision::kBf16, "bf16"},
                             {Precision::kFp16, "fp16"}},
                            "auto, fp32, bf16, fp16"});
    check_table<LossScaling>(
        {kLossScalingNames,
         {{LossScaling::kAuto, "auto"}, {LossScaling::kOn, "on"}, {LossScaling::kOff, "off"}},
         "auto, on, off"});
    check_table<OptimizerKind>({kOptimizerNames,
                                {{OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdamW, "adamw"}},
                                "sgd, adamw"});
    // Stored in checkpoints (task_options.h): never renamed.
    check_table<TaskKind>({kTaskNames,
                           {{TaskKind::kClassify, "classify"},
                            {TaskKind::kMultilabel, "multilabel"},
                            {TaskKind::kRegress, "regress"},
                            {TaskKind::kSegment, "segment"}},
                           "classify, multilabel, regress, segment"});
    check_table<RegressLoss>(
        {kRegressLossNames,
         {{RegressLoss::kMse, "mse"}, {RegressLoss::kL1, "l1"}, {RegressLoss::kHuber, "huber"}},
         "mse, l1, huber"});
    check_table<ScheduleKind>({kScheduleNames,
                               {{ScheduleKind::kConstant, "constant"},
                                {ScheduleKind::kCosine, "cosine"},
                                {ScheduleKind::kStep, "step"}},
                               "constant, cosine, step"});
    check_table<DeviceKind>(
        {kDeviceNames, {{DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}}, "cpu, cuda"});
    check_table<NormalizeKind>(
        {kNormalizeNames,
         {{NormalizeKind::kDataset, "dataset"}, {NormalizeKind::kHalf, "half"}},
         "dataset, half"});
    check_table<ProgressMode>({kProgressNames,
                               {{ProgressMode::kAuto, "auto"},
                                {ProgressMode::kAlways, "always"},
                                {ProgressMode::kNever, "never"}},
                               "auto, always, never"});
    check_table<Shuffle>({kTrainShuffleNames,
                          {{Shuffle::kGlobal, "global"}, {Shuffle::kWindowed, "windowed"}},
                          "global, windowed"});
    // The checkpoint records these names: to_string must print the table's.
    CHECK(std::string(to_string(ModelKind::kResnet18)) == "resnet18");
    CHECK(std::string(to_string(Precision::kBf16)) == "bf16");
    CHECK(std::string(to_string(OptimizerKind::kAdamW)) == "adamw");
    CHECK(std::string(to_string(ScheduleKind::kCosine)) == "cosine");
    CHECK(std::string(to_string(DeviceKind::kCuda)) == "cuda");
    CHECK(std::string(to_string(NormalizeKind::kHalf)) == "half");
  }

  TEST_CASE("parse_options: every enum option is parsed by its table") {
    const TrainOptions o = parse({"--model", "resnet18", "--precision", "bf16", "--loss-scaling",
                                  "off", "--optimizer", "adamw", "--schedule", "step", "--device",
                                  "cuda", "--normalize", "half", "--shuffle", "windowed"});
    CHECK(o.model == ModelKind::kResnet18);
    CHECK(o.precision == Precision::kBf16);
    CHECK(o.loss_scaling == LossScaling::kOff);
    CHECK(o.optimizer == OptimizerKind::kAdamW);
    CHECK(o.schedule == ScheduleKind::kStep);
    CHECK(o.device == DeviceKind::kCuda);
    CHECK(o.normalize == NormalizeKind::kHalf);
    CHECK(o.windowed);
    const TrainOptions d = parse({});
    CHECK(d.model == ModelKind::kCnn);
    CHECK(d.precision == Precision::kAuto);
    CHECK_FALSE(d.windowed);
  }

  TEST_CASE("parse_options: an unknown name is a usage error naming the option and the names") {
    struct Case {
      std::vector<std::string> args;
      std::string message;
    };
    const Case cases[] = {
        {{"--model", "vgg"}, "--model: 'vgg' is not one of cnn, resnet18, unet-small"},
        {{"--precision", "FP32"}, "--precision: 'FP32' is not one of auto, fp32, bf16, fp16"},
        {{"--loss-scaling", "yes"}, "--loss-scaling: 'yes' is not one of auto, on, off"},
        {{"--optimizer", "adam"}, "--optimizer: 'adam' is not one of sgd, adamw"},
        {{"--schedule", ""}, "--schedule: '' is not one of constant, cosine, step"},
        {{"--device", "gpu"}, "--device: 'gpu' is not one of cpu, cuda"},
        {{"--normalize", "none"}, "--normalize: 'none' is not one of dataset, half"},
        // The library's Shuffle has "none"; the trainer always shuffles.
        {{"--shuffle", "none"}, "--shuffle: 'none' is not one of global, windowed"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.message);
      CHECK(usage_error(c.args) == c.message);
    }
  }

  TEST_CASE("parse_options: --task, --targets, --loss and --target-norm") {
    const TrainOptions d = parse({});
    CHECK(d.task.kind == TaskKind::kClassify);  // today's runs, unchanged
    CHECK(d.task.targets.empty());
    const TrainOptions m = parse({"--task", "multilabel", "--targets", "a,b,c"});
    CHECK(m.task.kind == TaskKind::kMultilabel);
    CHECK(m.task.targets == std::vector<std::string>{"a", "b", "c"});
    const TrainOptions r =
        parse({"--task", "regress", "--targets", "age", "--loss", "huber", "--target-norm"});
    CHECK(r.task.kind == TaskKind::kRegress);
    CHECK(r.task.loss == RegressLoss::kHuber);
    CHECK(r.task.target_norm);
    const TrainOptions seg = parse({"--task", "segment", "--class-weights", "0.5,2,1e1"});
    CHECK(seg.task.kind == TaskKind::kSegment);
    CHECK(seg.model == ModelKind::kUnetSmall);  // segment's default model
    CHECK(seg.task.targets.empty());            // the cache's only mask
    CHECK(seg.task.ignore_index == 255);
    CHECK(seg.task.class_weights == std::vector<double>{0.5, 2, 10});
    const TrainOptions rs =
        parse({"--task", "segment", "--model", "resnet18", "--ignore-index", "0"});
    CHECK(rs.model == ModelKind::kResnet18);
    CHECK(rs.task.ignore_index == 0);
    struct Case {
      std::vector<std::string> args;
      std::string message;
    };
    const Case cases[] = {
        {{"--task", "multilabel"},
         "--targets: required with --task multilabel (the fields to predict)"},
        {{"--task", "regress"}, "--targets: required with --task regress (the fields to predict)"},
        {{"--task", "detect"},
         "--task: 'detect' is not one of classify, multilabel, regress, segment"},
        {{"--targets", "a"},
         "--targets: --task classify trains on the cache's labels; give --task multilabel, "
         "regress or segment to predict fields"},
        {{"--task", "segment", "--targets", "m,n"},
         "--targets: --task segment predicts one mask field, not 2"},
        {{"--task", "segment", "--model", "cnn"},
         "--model: cnn has no per-pixel output; --task segment trains unet-small or resnet18"},
        {{"--model", "unet-small"},
         "--model: unet-small predicts a class per pixel; it needs --task segment"},
        {{"--task", "segment", "--class-weights", "1,x"},
         "--class-weights: 'x' in '1,x' is not a number above 0 (one weight per class: w0,w1,...)"},
        {{"--task", "segment", "--ignore-index", "-1"}, "--ignore-index: -1 is negative"},
        {{"--class-weights", "1,2"},
         "--ignore-index/--class-weights: apply to --task segment only"},
        {{"--task", "regress", "--targets", "a,"}, "--targets: 'a,' has an empty field name"},
        {{"--task", "regress", "--targets", "a", "--loss", "l2"},
         "--loss: 'l2' is not one of mse, l1, huber"},
        {{"--task", "multilabel", "--targets", "a", "--loss", "mse"},
         "--loss: applies to --task regress only"},
        {{"--task", "multilabel", "--targets", "a", "--target-norm"},
         "--target-norm: applies to --task regress only"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.message);
      CHECK(usage_error(c.args) == c.message);
    }
  }

  TEST_CASE("parse_options: --progress auto|always|never, and --no-progress as never") {
    const struct {
      std::vector<std::string> args;
      ProgressMode mode;
    } rows[] = {
        {{}, ProgressMode::kAuto},
        {{"--progress", "always"}, ProgressMode::kAlways},
        {{"--progress", "never"}, ProgressMode::kNever},
        {{"--no-progress"}, ProgressMode::kNever},
        {{"--no-progress", "--progress", "never"}, ProgressMode::kNever},
    };
    for (const auto& r : rows) {
      CAPTURE(r.args.size());
      CHECK(parse(r.args).progress == r.mode);
    }
    CHECK(usage_error({"--progress", "yes"}) ==
          "--progress: 'yes' is not one of auto, always, never");
    CHECK(usage_error({"--no-progress", "--progress", "always"}) ==
          "--no-progress and --progress always: give one");
  }

  TEST_CASE("parse_options: --window-bytes takes the byte-count grammar of dscache build") {
    struct Case {
      const char* text;
      uint64_t bytes;
    };
    const Case good[] = {
        {"65536", 65536},
        {"512M", uint64_t{512} << 20},
        {"2G", uint64_t{2} << 30},
        {"2GiB", uint64_t{2} << 30},  // refused before the grammar was shared
        {"64KiB", uint64_t{64} << 10},
        {"1T", uint64_t{1} << 40},
        {"4096B", 4096},
        {"1000000000000000", 1000000000000000},  // 16 digits (the trainer took at most 12)
    };
    for (const Case& c : good) {
      CAPTURE(c.text);
      CHECK(parse({"--shuffle", "windowed", "--window-bytes", c.text}).window_bytes == c.bytes);
    }
    for (const char* bad : {"12Q", "0", "1.5G", "+1", "16777216T", "2 G"}) {
      CAPTURE(bad);
      const std::string m = usage_error({"--shuffle", "windowed", "--window-bytes", bad});
      CHECK(m.rfind("--window-bytes '" + std::string(bad) + "': expected a positive byte count",
                    0) == 0);
    }
  }
}
