// Listing a table (CSV/TSV with a header row, JSONL): the image column, the class label column,
// and every other column as a field, typed from its values or by --field (docs/FIELDS.md "Fields").
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dscache/enum_table.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/remote.h"
#include "list_internal.h"
#include "table_roles.h"

namespace dscache::ingest_detail {
namespace {

// Why a value cannot be one of a `kind` field's values ("" = it can).
std::string value_problem(ColumnKind kind, const TableCell& c) {
  switch (kind) {
    case ColumnKind::kInt: {
      int64_t v;
      if (c.text.empty()) return "empty value, expected an integer";
      if (parse_int(c.text, &v)) return "";
      return quote(c.text) +
             (is_number_text(c.text) && c.text.find_first_of(".eE") == std::string::npos
                  ? " is out of range for int64"
                  : " is not an integer");
    }
    case ColumnKind::kFloat: {
      float v;
      if (c.text.empty()) return "empty value, expected a number";
      return parse_float(c.text, &v);
    }
    case ColumnKind::kMask:
      return c.text.empty() ? "empty value, expected the path of a mask image" : "";
    case ColumnKind::kMultiHot:
      if (c.non_string_item) return "a multi-hot list holds names (strings) only";
      for (const std::string& name : multi_hot_names(c)) {
        if (!valid_utf8(name)) return "a name is not valid UTF-8";
      }
      return "";
    case ColumnKind::kText:
      return valid_utf8(c.text) ? "" : "not valid UTF-8";
    default:
      return "";
  }
}

// Why a multi-hot cell cannot be one of field `f`'s values when --field names its classes: a
// name not among them ("" = none).
std::string unnamed_class(const FieldColumn& f, const TableCell& c) {
  if (f.kind != ColumnKind::kMultiHot) return "";
  for (const std::string& name : multi_hot_names(c)) {
    if (f.class_set.count(name) == 0) {
      return quote(name) + " is not one of the classes --field names";
    }
  }
  return "";
}

// Why rows cannot become samples (a reason naming the line and the column), by row. Few rows
// have one, so only theirs are kept: a reason per row took 32 bytes a row (issue 33).
class BadRows {
 public:
  const std::string& operator[](size_t r) const {
    const auto it = reasons_.find(r);
    return it == reasons_.end() ? none_ : it->second;
  }
  void set(size_t r, std::string why) { reasons_[r] = std::move(why); }

 private:
  std::unordered_map<size_t, std::string> reasons_;
  std::string none_;
};

// Int when every non-empty value is an integer, float when every one is a number, else text.
// Rows already bad do not vote; a column of empty values is text.
ColumnKind infer_kind(const Table& t, size_t column, const BadRows& bad) {
  bool ints = true, numbers = true, any = false;
  for (size_t r = 0; r < t.row_count(); ++r) {
    const std::string v(t.text(r, column));
    if (!bad[r].empty() || v.empty()) continue;
    any = true;
    int64_t i;
    ints = ints && parse_int(v, &i);
    numbers = numbers && is_number_text(v);
  }
  if (!any) return ColumnKind::kText;
  return ints ? ColumnKind::kInt : numbers ? ColumnKind::kFloat : ColumnKind::kText;
}

// Each row's reason to be skipped ("" = none): a used column missing, an empty image or label,
// an image or mask path that cannot be read as given (path_problem: a NUL byte, --confine), then
// (with every inferred kind settled) a value its field cannot hold. The first problem in column
// order names the row's reason. Types the fields' kinds in place.
BadRows find_bad_rows(const Table& t, Roles& roles, const SourceOptions& opt) {
  const std::string base = t.path.substr(0, t.path.find_last_of('/'));
  auto path_check = [&](const std::string& name) {
    return path_problem(name, base, opt.confine, "the table's folder");
  };
  BadRows bad;
  auto mark = [&](size_t r, size_t column, const std::string& reason) {
    if (!bad[r].empty()) return;
    bad.set(r, "line " + std::to_string(t.lines[r]) + ": column '" + t.columns[column] +
                   "': " + reason);
  };
  std::vector<size_t> used = {roles.image};
  if (roles.label) used.push_back(*roles.label);
  for (const FieldColumn& f : roles.fields) used.push_back(f.column);
  std::sort(used.begin(), used.end());
  for (size_t r = 0; r < t.row_count(); ++r) {
    for (size_t column : used) {
      const TableCell c = t.cell(r, column);
      if (!c.present) mark(r, column, "missing");
      if (c.present && c.text.empty() && (column == roles.image || column == roles.label)) {
        mark(r, column, "empty value");
      }
      if (c.present && column == roles.image) {
        const std::string problem = path_check(c.text);
        if (!problem.empty()) mark(r, column, problem);
      }
    }
  }
  for (FieldColumn& f : roles.fields) {
    if (f.kind == ColumnKind::kInfer) {
      f.kind = infer_kind(t, f.column, bad);
      f.inferred = true;
    }
  }
  for (size_t r = 0; r < t.row_count(); ++r) {
    for (const FieldColumn& f : roles.fields) {
      if (!bad[r].empty()) break;
      const TableCell c = t.cell(r, f.column);
      std::string problem = value_problem(f.kind, c);
      if (problem.empty() && f.kind == ColumnKind::kMask) problem = path_check(c.text);
      if (problem.empty() && !f.classes.empty()) problem = unnamed_class(f, c);
      if (!problem.empty()) mark(r, f.column, problem);
    }
  }
  return bad;
}

FieldSpec field_spec(const Table& t, const FieldColumn& f, const BadRows& bad) {
  FieldSpec s;
  s.name = t.columns[f.column];
  switch (f.kind) {
    case ColumnKind::kInt:
      s.kind = FieldKind::kScalar, s.dtype = FieldType::kInt64;
      break;
    case ColumnKind::kFloat:
      s.kind = FieldKind::kScalar, s.dtype = FieldType::kFloat32;
      break;
    case ColumnKind::kMask:  // the build's decoder settles uint16 for 16-bit masks
      s.kind = FieldKind::kMask, s.dtype = FieldType::kUint8;
      s.classes = f.classes;  // value v names classes[v] (informational, as the Writer's)
      break;
    case ColumnKind::kMultiHot: {
      s.kind = FieldKind::kArray, s.dtype = FieldType::kUint8;
      if (!f.classes.empty()) {  // given: their order, every name in the column among them
        s.classes = f.classes;
        s.shape = {static_cast<uint32_t>(s.classes.size())};
        break;
      }
      std::set<std::string> names;
      for (size_t r = 0; r < t.row_count(); ++r) {
        if (!bad[r].empty()) continue;
        for (std::string& name : multi_hot_names(t.cell(r, f.column))) names.insert(name);
      }
      if (names.empty()) {
        throw Error(ErrorKind::kInvalidArgument, t.path,
                    "column '" + s.name + "' (multi-hot) names no class in any listed row");
      }
      s.classes.assign(names.begin(), names.end());
      s.shape = {static_cast<uint32_t>(s.classes.size())};
      break;
    }
    default:
      s.kind = FieldKind::kText, s.dtype = FieldType::kUint8;
  }
  return s;
}

// Appends one good row's value of field `spec` to `out` (the layout FieldColumns promises).
// `index`: a multi-hot field's class names -> their index.
void append_value(const FieldSpec& spec, const TableCell& c, const std::string& base,
                  const std::map<std::string, size_t>& index, std::vector<uint8_t>& out) {
  auto append = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  if (spec.kind == FieldKind::kScalar && spec.dtype == FieldType::kInt64) {
    int64_t v = 0;
    parse_int(c.text, &v);
    append(&v, sizeof v);
  } else if (spec.kind == FieldKind::kScalar) {
    float v = 0;
    parse_float(c.text, &v);
    append(&v, sizeof v);
  } else if (spec.kind == FieldKind::kMask) {
    const std::string path = resolve_listed_path(base, c.text);
    append(path.data(), path.size());
  } else if (spec.kind == FieldKind::kArray) {
    std::vector<uint8_t> hot(spec.classes.size(), 0);
    for (const std::string& name : multi_hot_names(c)) hot[index.at(name)] = 1;  // checked
    append(hot.data(), hot.size());
  } else {
    append(c.text.data(), c.text.size());
  }
}

// True when `path` ends in an image file extension (any case).
bool has_image_extension(const std::string& path) {
  const size_t dot = path.find_last_of("./");
  if (dot == std::string::npos || path[dot] != '.') return false;
  std::string ext = path.substr(dot + 1);
  for (char& ch : ext) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  for (const char* e : {"png", "jpg", "jpeg", "bmp", "tif", "tiff", "webp", "gif", "pgm", "ppm"}) {
    if (ext == e) return true;
  }
  return false;
}

// A column typed text (from its values, no --field) whose every listed value names an image
// file that exists is most likely a mask column missing its --field: the notice says which flag.
std::vector<std::string> mask_notices(const Table& t, const Roles& roles, const BadRows& bad,
                                      const std::string& base) {
  std::vector<std::string> notices;
  for (const FieldColumn& f : roles.fields) {
    if (!f.inferred || f.kind != ColumnKind::kText) continue;
    bool images = false;
    for (size_t r = 0; r < t.row_count(); ++r) {
      if (!bad[r].empty()) continue;
      const std::string v(t.text(r, f.column));
      images =
          !v.empty() && has_image_extension(v) && stat_follow(resolve_listed_path(base, v)).is_file;
      if (!images) break;
    }
    if (!images) continue;
    const std::string& name = t.columns[f.column];
    notices.push_back("column '" + name +
                      "' became a text field, but every value names an image file: if they are "
                      "masks, pass --field '" +
                      name + "=mask' (with class names: --field '" + name +
                      "=mask:background,...')");
  }
  return notices;
}

}  // namespace

bool is_table_header(const std::vector<std::string>& head, const SourceOptions& opt) {
  if (!opt.image_column.empty() || !opt.label_column.empty() || !opt.field_kinds.empty()) {
    return true;
  }
  // Two columns stay a path,label list, whatever its header says (docs/BUILD.md "Sources").
  if (head.size() == 1) return trim(head[0]) == "image_path" || trim(head[0]) == "path";
  return head.size() > 2;
}

SourceListing list_table(const Table& t, const SourceOptions& opt) {
  Roles roles = assign_roles(t, opt);
  const BadRows bad = find_bad_rows(t, roles, opt);
  SourceListing out;
  out.kind = "list";
  out.root = t.path;
  const std::string base = t.path.substr(0, t.path.find_last_of('/'));
  out.entries.set_path_prefix(base + "/");
  std::vector<std::string_view> labels;
  if (roles.label) labels.reserve(t.row_count());
  for (size_t r = 0; r < t.row_count(); ++r) {
    if (bad[r].empty() && roles.label) labels.push_back(t.text(r, *roles.label));
  }
  std::vector<int64_t> indexes;
  if (roles.label) out.classes = label_classes(labels, opt, t.path, &indexes);
  for (const FieldColumn& f : roles.fields) out.fields.push_back(field_spec(t, f, bad));
  validate_fields(out.fields, t.path);
  out.notices = mask_notices(t, roles, bad, base);
  const size_t nf = out.fields.size();
  std::vector<std::map<std::string, size_t>> class_index(nf);
  for (size_t f = 0; f < nf; ++f) {
    if (out.fields[f].kind != FieldKind::kArray) continue;
    for (size_t k = 0; k < out.fields[f].classes.size(); ++k) {
      class_index[f][out.fields[f].classes[k]] = k;
    }
  }
  const size_t rows = t.row_count();
  out.columns.values.resize(nf);
  out.columns.offsets.assign(nf, std::vector<uint64_t>{0});
  for (size_t f = 0; f < nf; ++f) {
    out.columns.offsets[f].reserve(rows + 1);
    if (!out.fields[f].variable()) out.columns.values[f].reserve(rows * out.fields[f].row_bytes());
  }
  // Files are stat'ed a chunk of rows at a time, so that the paths and stats of 1.28M rows are
  // never held at once; object storage is listed once per bucket, so a table naming any URL is
  // one chunk.
  bool remote = is_remote_location(base);
  for (size_t r = 0; r < rows && !remote; ++r) {
    remote = is_remote_location(std::string(t.text(r, roles.image)));
  }
  const size_t chunk = remote ? std::max<size_t>(rows, 1) : size_t{4096};
  size_t next_label = 0;
  for (size_t first = 0; first < rows; first += chunk) {
    const size_t end = std::min(rows, first + chunk);
    std::vector<std::string> paths(end - first);
    for (size_t r = first; r < end; ++r) {
      const std::string name(t.text(r, roles.image));
      if (!name.empty()) paths[r - first] = resolve_listed_path(base, name);
    }
    std::vector<FileStat> stats = stat_listed(paths);
    for (size_t r = first; r < end; ++r) {
      SourceEntry e;
      e.name = std::string(t.text(r, roles.image));
      e.path = std::move(paths[r - first]);
      e.size = stats[r - first].size;
      e.mtime_ns = stats[r - first].mtime_ns;
      e.etag = std::move(stats[r - first].etag);
      e.bad = bad[r];
      if (e.bad.empty() && roles.label) e.label = indexes[next_label++];
      for (size_t f = 0; f < nf; ++f) {
        if (e.bad.empty()) {
          append_value(out.fields[f], t.cell(r, roles.fields[f].column), base, class_index[f],
                       out.columns.values[f]);
        }
        out.columns.offsets[f].push_back(out.columns.values[f].size());
      }
      out.entries.push_back(e);
    }
  }
  return out;
}

void hash_fields(Xxh64& h, const SourceListing& l) {
  auto text = [&](const std::string& s) {
    const uint64_t n = s.size();
    h.update(&n, sizeof n);
    if (n) h.update(s.data(), n);
  };
  for (const FieldSpec& f : l.fields) {
    text(f.name);
    const uint32_t head[] = {static_cast<uint32_t>(f.kind), static_cast<uint32_t>(f.dtype),
                             static_cast<uint32_t>(f.shape.size())};
    h.update(head, sizeof head);
    if (!f.shape.empty()) h.update(f.shape.data(), f.shape.size() * sizeof f.shape[0]);
    for (const std::string& c : f.classes) text(c);
    text(f.rows_of);
  }
  for (size_t f = 0; f < l.fields.size(); ++f) {
    const bool mask = l.fields[f].kind == FieldKind::kMask;
    std::vector<std::string> masks(mask ? l.entries.size() : 0);  // a changed mask file, too
    for (size_t e = 0; e < masks.size(); ++e) {
      const FieldData v = l.columns.get(f, e);
      masks[e].assign(static_cast<const char*>(v.data), static_cast<size_t>(v.bytes));
    }
    const std::vector<FileStat> stats = stat_listed(masks);
    for (size_t e = 0; e < l.entries.size(); ++e) {
      const FieldData v = l.columns.get(f, e);
      h.update(&v.bytes, sizeof v.bytes);
      if (v.bytes) h.update(v.data, v.bytes);
      if (mask && v.bytes) {
        h.update(&stats[e].size, sizeof stats[e].size);
        h.update(&stats[e].mtime_ns, sizeof stats[e].mtime_ns);
        if (!stats[e].etag.empty()) h.update(stats[e].etag.data(), stats[e].etag.size() + 1);
      }
    }
  }
  for (size_t e = 0; e < l.entries.size(); ++e) text(l.entries.bad(e));
}

}  // namespace dscache::ingest_detail
