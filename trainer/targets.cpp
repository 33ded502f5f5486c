// Multilabel and regression targets: --targets resolved against a source, --target-norm.
#include "targets.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "dscache/exit_codes.h"
#include "dscache/fields.h"

namespace dscache {
namespace train {

namespace {

std::string describe(const FieldSpec& f) {
  const std::string kind = to_string(f.kind);
  std::string s = (kind[0] == 'a' ? "an " : "a ") + kind + " of " + to_string(f.dtype);
  if (!f.shape.empty()) {
    s += " [";
    for (size_t i = 0; i < f.shape.size(); ++i) s += (i ? "," : "") + std::to_string(f.shape[i]);
    s += "]";
  }
  return s;
}

size_t field_index(const SampleSource& source, const std::string& name, const std::string& where) {
  const auto& fs = source.fields();
  for (size_t i = 0; i < fs.size(); ++i) {
    if (fs[i].name == name) return i;
  }
  std::string have;
  for (const FieldSpec& f : fs) have += (have.empty() ? "" : ", ") + f.name;
  throw UsageError("--targets: field '" + name + "' does not exist in " + where + " (" +
                   (have.empty() ? std::string("it has no fields") : "its fields: " + have) + ")");
}

}  // namespace

namespace {

bool looks_like_image_path(std::string v) {
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* ext :
       {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".pgm", ".ppm", ".gif"}) {
    const size_t n = std::strlen(ext);
    if (v.size() > n && v.compare(v.size() - n, n, ext) == 0) return true;
  }
  return false;
}

// --task segment on a cache without a mask field: the usual cause is a table's mask column built
// as text (`--field COL=mask` forgotten). Names the text field whose first values are image paths
// and the option that would have made it a mask.
std::string no_mask_field(const SampleSource& source, const std::string& where) {
  const std::string head = "--task segment: " + where + " has no mask field";
  const auto& fs = source.fields();
  for (size_t fi = 0; fi < fs.size(); ++fi) {
    if (fs[fi].kind != FieldKind::kText) continue;
    for (uint64_t i = 0; i < std::min<uint64_t>(source.size(), 8); ++i) {
      const FieldView v = source.field(i, fi);
      const std::string value(reinterpret_cast<const char*>(v.data), v.bytes);
      if (value.empty()) continue;
      if (!looks_like_image_path(value)) break;
      return head + ", but its text field '" + fs[fi].name + "' holds image paths ('" +
             value.substr(0, 80) +
             "'): a table's mask column is text unless the build says otherwise; rebuild the "
             "cache with --field " +
             fs[fi].name + "=mask";
    }
  }
  return head + ": rebuild it with --field COL=mask, COL the table column of mask image paths";
}

// --task segment: the one mask field (named, or the only one), its classes when it names them.
TargetSpec resolve_mask(const TaskOptions& t, const SampleSource& source,
                        const std::string& where) {
  TargetSpec spec;
  spec.kind = t.kind;
  spec.ignore_index = t.ignore_index;
  spec.class_weights = t.class_weights;
  const FieldSpec* mask = nullptr;
  if (!t.targets.empty()) {
    mask = &source.fields()[field_index(source, t.targets[0], where)];
    if (mask->kind != FieldKind::kMask) {
      throw UsageError(
          "--targets: field '" + mask->name + "' in " + where + " is " + describe(*mask) +
          "; --task segment needs a mask" +
          (mask->kind == FieldKind::kText
               ? " (a table's column of mask paths: rebuild with --field " + mask->name + "=mask)"
               : std::string()));
    }
  } else {
    std::string masks;
    for (const FieldSpec& f : source.fields()) {
      if (f.kind != FieldKind::kMask) continue;
      masks += (masks.empty() ? "" : ", ") + f.name;
      mask = &f;
    }
    if (masks.empty()) {
      throw UsageError(no_mask_field(source, where));
    }
    if (masks.find(',') != std::string::npos) {
      throw UsageError("--targets: " + where + " has several mask fields (" + masks +
                       "); name one");
    }
  }
  spec.fields = {mask->name};
  spec.names = mask->classes;  // may be empty: scan_mask_classes
  spec.mean.assign(spec.names.size(), 0.0);
  spec.std.assign(spec.names.size(), 1.0);
  return spec;
}

}  // namespace

void scan_mask_classes(const SampleSource& source, const std::string& where, TargetSpec* spec) {
  if (spec->names.empty()) {
    const size_t fi = field_index(source, spec->fields[0], where);
    const FieldSpec& f = source.fields()[fi];
    const uint64_t bytes = element_bytes(f.dtype);
    double top = 0;
    for (uint64_t i = 0; i < source.size(); ++i) {
      const FieldView v = source.field(i, fi);
      for (uint64_t e = 0; e < v.bytes / bytes; ++e) {
        const double x = element_at(f.dtype, v.data, e);
        if (x != spec->ignore_index && x > top) top = x;
      }
    }
    const int64_t n = std::max<int64_t>(2, static_cast<int64_t>(top) + 1);
    for (int64_t c = 0; c < n; ++c) spec->names.push_back(std::to_string(c));
  }
  if (!spec->class_weights.empty() && spec->class_weights.size() != spec->names.size()) {
    throw UsageError("--class-weights: " + std::to_string(spec->class_weights.size()) +
                     " weights for the " + std::to_string(spec->names.size()) +
                     " classes of mask '" + spec->fields[0] + "' in " + where);
  }
  spec->mean.assign(spec->names.size(), 0.0);
  spec->std.assign(spec->names.size(), 1.0);
}

TargetSpec resolve_targets(const TaskOptions& t, const SampleSource& source,
                           const std::string& where) {
  if (t.kind == TaskKind::kClassify) {
    throw std::logic_error("resolve_targets: --task classify has no target fields");
  }
  if (t.kind == TaskKind::kSegment) return resolve_mask(t, source, where);
  TargetSpec spec;
  spec.kind = t.kind;
  spec.loss = t.loss;
  const std::string task = to_string(t.kind);
  for (const std::string& name : t.targets) {
    if (std::count(t.targets.begin(), t.targets.end(), name) > 1) {
      throw UsageError("--targets: field '" + name + "' is named twice");
    }
    const FieldSpec& f = source.fields()[field_index(source, name, where)];
    const std::string bad = "--targets: field '" + name + "' in " + where + " is " + describe(f) +
                            "; --task " + task + " needs ";
    if (t.kind == TaskKind::kRegress) {
      // Every scalar dtype is a number: a table's integer column (int64) is a target as it is,
      // read as float32 by batch_targets (integer_targets_note says so).
      if (f.kind != FieldKind::kScalar) {
        throw UsageError(bad + "scalars (float32, or integers read as float32)");
      }
      spec.names.push_back(name);
    } else if (f.kind == FieldKind::kScalar && f.dtype == FieldType::kInt64) {
      spec.names.push_back(name);
    } else if (f.kind == FieldKind::kArray && f.shape.size() == 1 &&
               (f.dtype == FieldType::kUint8 || f.dtype == FieldType::kInt64)) {
      if (t.targets.size() != 1) {
        throw UsageError("--targets: field '" + name + "' is a multi-hot array; give it alone");
      }
      spec.array = true;
      for (uint32_t k = 0; k < f.shape[0]; ++k) {
        spec.names.push_back(k < f.classes.size() ? f.classes[k]
                                                  : name + "[" + std::to_string(k) + "]");
      }
    } else {
      throw UsageError(bad + "int64 scalars of 0/1, or one uint8/int64 array (multi-hot)");
    }
    spec.fields.push_back(name);
  }
  spec.mean.assign(spec.names.size(), 0.0);
  spec.std.assign(spec.names.size(), 1.0);
  return spec;
}

std::string integer_targets_note(const TargetSpec& spec, const SampleSource& source) {
  if (spec.kind != TaskKind::kRegress) return "";
  std::string list;
  for (const FieldSpec& f : source.fields()) {
    if (f.dtype == FieldType::kFloat32 ||
        std::find(spec.fields.begin(), spec.fields.end(), f.name) == spec.fields.end()) {
      continue;
    }
    list += (list.empty() ? "" : ", ") + f.name + " (" + to_string(f.dtype) + ")";
  }
  if (list.empty()) return "";
  const bool one = list.find(',') == std::string::npos;
  return "--task regress: target" + std::string(one ? " " : "s ") + list +
         (one ? " holds" : " hold") + " integers, read as float32";
}

void check_target_value(const TargetSpec& spec, const std::string& field, uint64_t sample,
                        double value, const std::string& where) {
  const bool multilabel = spec.kind == TaskKind::kMultilabel;
  if (multilabel ? (value == 0 || value == 1) : std::isfinite(value)) return;
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);  // nan, inf, -inf, 2
  throw UsageError("--targets: field '" + field + "' of sample " + std::to_string(sample) + " in " +
                   where + " is " + text + "; --task " + to_string(spec.kind) +
                   (multilabel ? " needs targets of 0 or 1" : " needs finite targets") +
                   " (fix or drop that sample)");
}

void measure_target_stats(const SampleSource& source, const std::string& where, TargetSpec* spec) {
  const size_t t = spec->names.size();
  std::vector<double> sum(t, 0), sq(t, 0);
  const uint64_t n = source.size();
  for (size_t j = 0; j < spec->fields.size(); ++j) {
    const size_t fi = field_index(source, spec->fields[j], where);
    const FieldSpec& f = source.fields()[fi];
    for (uint64_t i = 0; i < n; ++i) {
      const FieldView v = source.field(i, fi);
      for (uint64_t e = 0; e < f.row_elements(); ++e) {
        const double x = element_at(f.dtype, v.data, e);
        check_target_value(*spec, f.name, i, x, where);
        sum[j + e] += x;
        sq[j + e] += x * x;
      }
    }
  }
  for (size_t k = 0; k < t; ++k) {
    const double mean = n ? sum[k] / n : 0;
    const double sd = n ? std::sqrt(std::max(0.0, sq[k] / n - mean * mean)) : 0;
    spec->mean[k] = mean;
    spec->std[k] = sd < 1e-6 ? 1.0 : sd;
  }
}

}  // namespace train
}  // namespace dscache
