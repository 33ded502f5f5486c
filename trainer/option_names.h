// The spellings of dscache-train's option enums: what --model, --precision, ... accept, and the
// names written to checkpoints and metrics (never renamed: a checkpoint compares them on resume).
#pragma once

#include "dscache/enum_table.h"
#include "dscache/sampler.h"
#include "options.h"

namespace dscache {
namespace train {

// In the order --help and error messages list them.
extern const EnumTable<ModelKind> kModelNames;          // "cnn", "resnet18"
extern const EnumTable<Precision> kPrecisionNames;      // "auto", "fp32", "bf16", "fp16"
extern const EnumTable<LossScaling> kLossScalingNames;  // "auto", "on", "off"
extern const EnumTable<OptimizerKind> kOptimizerNames;  // "sgd", "adamw"
extern const EnumTable<ScheduleKind> kScheduleNames;    // "constant", "cosine", "step"
extern const EnumTable<DeviceKind> kDeviceNames;        // "cpu", "cuda"
extern const EnumTable<NormalizeKind> kNormalizeNames;  // "dataset", "half"
extern const EnumTable<ProgressMode> kProgressNames;    // "auto", "always", "never"
// --shuffle: the library's names (kShuffleNames) of the orders the trainer offers.
extern const EnumTable<Shuffle> kTrainShuffleNames;  // "global", "windowed"

}  // namespace train
}  // namespace dscache
