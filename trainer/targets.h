// The targets of a multilabel or regression run (--task): cache fields resolved into a head of
// T outputs, and --target-norm's statistics (no torch types).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/sample_source.h"
#include "task_options.h"

namespace dscache {
namespace train {

// The targets of a multilabel or regression run, resolved against the training data. Plain
// values: copied into checkpoints (names, mean, std) and compared on resume.
struct TargetSpec {
  TaskKind kind = TaskKind::kMultilabel;
  RegressLoss loss = RegressLoss::kMse;
  std::vector<std::string> fields;  // what the Loader serves (LoaderOptions::fields)
  bool array = false;               // one array field holds all outputs (multi-hot)
  std::vector<std::string> names;   // one per head output: the field, or array field[k]
  // Regression: per output, targets are fed as (y - mean) / std; metrics undo it. Without
  // --target-norm (and for multilabel): 0 and 1.
  std::vector<double> mean, std;
  int64_t outputs() const { return static_cast<int64_t>(names.size()); }
};

// Checks each --targets field against `source`'s fields and builds the spec (mean 0, std 1).
// UsageError naming the field and `where` (the option and path: "--train DIR") when a field is
// missing, repeated, of the wrong kind or dtype, or an array field is mixed with others.
TargetSpec resolve_targets(const TaskOptions& t, const SampleSource& source,
                           const std::string& where);

// --target-norm: every sample's target values in `source` (the training data), their mean and
// population std per output (a std below 1e-6 becomes 1).
void measure_target_stats(const SampleSource& source, TargetSpec* spec);

// Element e of a field's little-endian values (any dtype) as a double.
double field_element(const FieldSpec& f, const uint8_t* data, uint64_t e);

}  // namespace train
}  // namespace dscache
