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
  // Segment: `fields` is the one mask field and `names` its classes (the mask's class names, or
  // "0".."N-1" from scan_mask_classes); pixels equal to ignore_index count nowhere; the pixel
  // loss weighs class c by class_weights[c] (empty: 1).
  int64_t ignore_index = 255;
  std::vector<double> class_weights;
  int64_t outputs() const { return static_cast<int64_t>(names.size()); }
};

// Checks each --targets field against `source`'s fields and builds the spec (mean 0, std 1).
// UsageError naming the field and `where` (the option and path: "--train DIR") when a field is
// missing, repeated, of the wrong kind or dtype, or an array field is mixed with others.
TargetSpec resolve_targets(const TaskOptions& t, const SampleSource& source,
                           const std::string& where);

// Segment, after resolve_targets on the training data: a mask field that names no classes gets
// spec->names "0".."N-1", N the largest value in `source`'s masks other than the ignore index,
// plus 1 (at least 2). UsageError naming `where` when --class-weights has another count than the
// classes.
void scan_mask_classes(const SampleSource& source, const std::string& where, TargetSpec* spec);

// --target-norm: every sample's target values in `source` (the training data, `where`: "--train
// DIR"), their mean and population std per output (a std below 1e-6 becomes 1). Each value is
// checked first (check_target_value).
void measure_target_stats(const SampleSource& source, const std::string& where, TargetSpec* spec);

// --task regress: the line that says which targets are integer fields, which batch_targets
// casts to float32 ("--task regress: target count (int64) holds integers, read as float32"), or
// "" when every target is float32 (or for another task). dscache-train prints it once (rank 0).
std::string integer_targets_note(const TargetSpec& spec, const SampleSource& source);

// The one rule for a target value the task can learn from, applied to every value the trainer
// reads (each batch, --target-norm's pass): multilabel 0 or 1, regression finite. Otherwise
// UsageError (exit 2: a bad value, found once the cache is read) naming the field, the sample's
// index in the cache, `where` ("--train DIR") and the value.
void check_target_value(const TargetSpec& spec, const std::string& field, uint64_t sample,
                        double value, const std::string& where);

}  // namespace train
}  // namespace dscache
