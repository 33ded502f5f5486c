// Which column of a table is what (table_roles.h): --image-column, --label-column, every
// --field, and the defaults (image_path, label) when they are not given.
#include "table_roles.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dscache/enum_table.h"
#include "dscache/error.h"
#include "dscache/fields.h"

namespace dscache::ingest_detail {
namespace {

constexpr EnumName<ColumnKind> kColumnKindList[] = {
    {ColumnKind::kMask, "mask"}, {ColumnKind::kMultiHot, "multi-hot"},
    {ColumnKind::kInt, "int"},   {ColumnKind::kFloat, "float"},
    {ColumnKind::kText, "text"}, {ColumnKind::kIgnore, "ignore"}};
constexpr EnumTable<ColumnKind> kColumnKinds(kColumnKindList);

std::string column_list(const Table& t) {
  std::string out;
  for (const std::string& c : t.columns) out += (out.empty() ? "" : ", ") + c;
  return out;
}

std::optional<size_t> find_column(const Table& t, const std::string& name) {
  auto it = std::find(t.columns.begin(), t.columns.end(), name);
  if (it == t.columns.end()) return std::nullopt;
  return static_cast<size_t>(it - t.columns.begin());
}

// A valid field name close to `name`: lower case, other characters '_'.
std::string field_name_for(const std::string& name) {
  std::string out;
  for (char ch : name) {
    const char c = (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch - 'A' + 'a') : ch;
    out += ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) ? c : '_';
  }
  if (out.empty() || out[0] < 'a' || out[0] > 'z') out = "f_" + out;
  out = out.substr(0, 64);
  if (out == "image" || out == "images" || out == "label" || out == "index") out += "_value";
  return out;
}

// A column that is to become a field must have a valid field name (dscache/fields.h): no
// silent renaming, which could make two columns one name or surprise a reader of the cache.
void check_field_name(const std::string& path, const std::string& name) {
  FieldSpec probe;  // a scalar int64 field: valid whatever its name, but for the name
  probe.name = name;
  try {
    validate_field(probe, path);
  } catch (const Error& e) {
    std::string why = e.reason();  // "field 'Col Name': a name is ..."
    const size_t colon = why.find("': ");
    if (colon != std::string::npos) why = why.substr(colon + 3);
    throw Error(ErrorKind::kInvalidArgument, path,
                "column '" + name + "' cannot be a field (" + why + "): rename it (to '" +
                    field_name_for(name) + "', say) or pass --field '" + name + "=ignore'");
  }
}

}  // namespace

Roles assign_roles(const Table& t, const SourceOptions& opt) {
  auto need = [&](const std::string& name, const std::string& what) {
    if (std::optional<size_t> i = find_column(t, name)) return *i;
    throw SourceOptionError(
        ErrorKind::kInvalidArgument, t.path,
        what + ": the table has no column '" + name + "' (columns: " + column_list(t) + ")");
  };
  Roles r;
  if (!opt.image_column.empty()) {
    r.image = need(opt.image_column, "--image-column");
  } else if (std::optional<size_t> i = find_column(t, "image_path")) {
    r.image = *i;
  } else {
    r.image = need("path", "no column 'image_path' names the images (pass --image-column NAME)");
  }
  if (!opt.label_column.empty()) {
    r.label = need(opt.label_column, "--label-column");
    if (*r.label == r.image) {
      throw SourceOptionError(ErrorKind::kInvalidArgument, t.path,
                              "--label-column '" + opt.label_column + "' is the image column");
    }
  } else if (std::optional<size_t> i = find_column(t, "label"); i && *i != r.image) {
    r.label = *i;
  }
  if (!r.label && !opt.class_names.empty()) {
    throw SourceOptionError(
        ErrorKind::kInvalidArgument, t.path,
        "--classes names the classes of a label column, and the table has none (pass "
        "--label-column NAME)");
  }
  std::map<size_t, ColumnKind> forced;
  for (const auto& [name, kind_text] : opt.field_kinds) {
    const std::string flag = "--field '" + name + "=" + kind_text + "'";
    const std::optional<ColumnKind> kind = kColumnKinds.find(kind_text);
    if (!kind) {
      throw SourceOptionError(ErrorKind::kInvalidArgument, t.path,
                              flag + ": KIND is one of " + kColumnKinds.names());
    }
    const size_t i = need(name, flag);
    if (i == r.image || i == r.label) {
      throw SourceOptionError(ErrorKind::kInvalidArgument, t.path,
                              flag + ": '" + name + "' is the " +
                                  (i == r.image ? "image" : "label") + " column, not a field");
    }
    if (!forced.emplace(i, *kind).second) {
      throw SourceOptionError(ErrorKind::kInvalidArgument, t.path,
                              flag + ": column '" + name + "' twice");
    }
  }
  for (size_t i = 0; i < t.columns.size(); ++i) {
    if (i == r.image || i == r.label) continue;
    auto it = forced.find(i);
    const ColumnKind kind = it == forced.end() ? ColumnKind::kInfer : it->second;
    if (kind == ColumnKind::kIgnore) continue;
    check_field_name(t.path, t.columns[i]);
    r.fields.push_back({i, kind, {}, {}});
  }
  for (const auto& [name, classes] : opt.field_classes) {
    auto f = std::find_if(r.fields.begin(), r.fields.end(),
                          [&](const FieldColumn& c) { return t.columns[c.column] == name; });
    if (f == r.fields.end() || (f->kind != ColumnKind::kMask && f->kind != ColumnKind::kMultiHot)) {
      throw SourceOptionError(
          ErrorKind::kInvalidArgument, t.path,
          "--field '" + name + "=KIND:CLASSES': class names apply to a mask or multi-hot field");
    }
    f->classes = classes;
    f->class_set.insert(classes.begin(), classes.end());
    if (classes.empty() || f->class_set.size() != classes.size() || f->class_set.count("") > 0) {
      throw SourceOptionError(
          ErrorKind::kInvalidArgument, t.path,
          "--field '" + name + "=KIND:CLASSES': class names must be non-empty and distinct");
    }
  }
  return r;
}

}  // namespace dscache::ingest_detail
