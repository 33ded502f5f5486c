// --task and friends: names and the checks that need no data.
#include "task_options.h"

#include <cmath>
#include <cstdlib>

#include "dscache/exit_codes.h"

namespace dscache {
namespace train {

namespace {
constexpr EnumName<TaskKind> kTask[] = {
    {TaskKind::kClassify, "classify"},
    {TaskKind::kMultilabel, "multilabel"},
    {TaskKind::kRegress, "regress"},
    {TaskKind::kSegment, "segment"},
};
constexpr EnumName<RegressLoss> kRegressLoss[] = {
    {RegressLoss::kMse, "mse"},
    {RegressLoss::kL1, "l1"},
    {RegressLoss::kHuber, "huber"},
};
}  // namespace

constexpr EnumTable<TaskKind> kTaskNames(kTask);
constexpr EnumTable<RegressLoss> kRegressLossNames(kRegressLoss);
const char* to_string(TaskKind v) { return kTaskNames.to_string(v); }
const char* to_string(RegressLoss v) { return kRegressLossNames.to_string(v); }

std::vector<std::string> split_targets(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (name.empty()) throw UsageError("--targets: '" + text + "' has an empty field name");
    out.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<double> parse_class_weights(const std::string& text) {
  std::vector<double> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v) || v <= 0) {
      throw UsageError("--class-weights: '" + item + "' in '" + text +
                       "' is not a number above 0 (one weight per class: w0,w1,...)");
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void validate_task(const TaskOptions& t, bool loss_given, bool segment_given) {
  const std::string task = to_string(t.kind);
  if (t.kind == TaskKind::kClassify) {
    if (!t.targets.empty()) {
      throw UsageError(
          "--targets: --task classify trains on the cache's labels; give --task "
          "multilabel, regress or segment to predict fields");
    }
  } else if (t.kind == TaskKind::kSegment) {
    if (t.targets.size() > 1) {
      throw UsageError("--targets: --task segment predicts one mask field, not " +
                       std::to_string(t.targets.size()));
    }
  } else if (t.targets.empty()) {
    throw UsageError("--targets: required with --task " + task + " (the fields to predict)");
  }
  if (t.kind != TaskKind::kRegress) {
    if (loss_given) throw UsageError("--loss: applies to --task regress only");
    if (t.target_norm) throw UsageError("--target-norm: applies to --task regress only");
  }
  if (t.kind != TaskKind::kSegment && segment_given) {
    throw UsageError("--ignore-index/--class-weights: apply to --task segment only");
  }
  if (t.kind == TaskKind::kSegment && t.ignore_index < 0) {
    throw UsageError("--ignore-index: " + std::to_string(t.ignore_index) + " is negative");
  }
}

}  // namespace train
}  // namespace dscache
