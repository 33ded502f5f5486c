// What a run learns to predict (--task, --targets, --loss, --target-norm): the options and their
// spellings, without torch types, so options.h can hold them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/enum_table.h"

namespace dscache {
namespace train {

enum class TaskKind {
  kClassify,    // one class per image: the manifest's labels, cross entropy (the default)
  kMultilabel,  // K independent 0/1 targets: BCE with logits, mAP and micro-F1
  kRegress,     // T float32 targets: MSE/L1/Huber, MAE, RMSE and R^2
  kSegment,     // a class per pixel from a mask field: cross entropy per labelled pixel, IoU
};
enum class RegressLoss { kMse, kL1, kHuber };  // huber: delta 1 (in normalised units)

// Stored in checkpoints by these names (never renamed).
extern const EnumTable<TaskKind> kTaskNames;  // "classify", "multilabel", "regress", "segment"
extern const EnumTable<RegressLoss> kRegressLossNames;  // "mse", "l1", "huber"
const char* to_string(TaskKind v);
const char* to_string(RegressLoss v);

struct TaskOptions {
  TaskKind kind = TaskKind::kClassify;  // --task; default classify
  // --targets COL[,COL...]: the cache fields the head predicts, in head order. multilabel: several
  // 0/1 int64 scalars, or one uint8/int64 array (multi-hot); regress: scalars (integers read as
  // float32); segment: one mask field (default: the cache's only one). Required for multilabel and
  // regress, refused for classify.
  std::vector<std::string> targets;
  RegressLoss loss = RegressLoss::kMse;  // --loss (regress only); default mse
  bool target_norm = false;  // --target-norm (regress only): standardise each target with the
                             // training set's mean/std; metrics stay in original units
  // --task segment only:
  int64_t ignore_index = 255;         // --ignore-index: mask value that counts nowhere; default 255
  std::vector<double> class_weights;  // --class-weights w0,w1,...: one per class (> 0 each);
                                      // empty = all 1
};

// Splits "a,b,c" (no empty names); throws UsageError naming --targets.
std::vector<std::string> split_targets(const std::string& text);
// Parses --class-weights "1,0.5,2": finite numbers > 0; throws UsageError naming the option.
std::vector<double> parse_class_weights(const std::string& text);
// The checks that need no data: --targets given for multilabel/regress (at most one field for
// segment), --loss and --target-norm for regress only, --ignore-index and --class-weights
// (`segment_given`) for segment only. Throws UsageError naming the option.
void validate_task(const TaskOptions& t, bool loss_given, bool segment_given);

}  // namespace train
}  // namespace dscache
