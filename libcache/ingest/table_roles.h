// Which column of a table is what (internal to the ingest library's table lister): the image,
// the class label, and the fields with the kind --field gives them or their values will.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dscache/ingest/source_list.h"
#include "list_internal.h"

namespace dscache::ingest_detail {

// What a column becomes: what --field NAME=KIND says, or (kInfer) what its values say.
enum class ColumnKind { kInfer, kMask, kMultiHot, kInt, kFloat, kText, kIgnore };

struct FieldColumn {
  size_t column = 0;  // index into Table::columns (its name is the field's)
  ColumnKind kind = ColumnKind::kInfer;
  std::vector<std::string> classes;  // --field NAME=KIND:CLASSES (mask, multi-hot); empty: none
  std::set<std::string> class_set;   // the same names, to look up
  bool inferred = false;             // the kind was typed from the values (no --field)
};

// Which column is the image, which the class label, which become fields (in column order).
struct Roles {
  size_t image = 0;
  std::optional<size_t> label;
  std::vector<FieldColumn> fields;
};

// Finds the image and label columns and the fields, applying --image-column, --label-column and
// every --field. Error(kInvalidArgument) naming the table (a SourceOptionError where an option
// is at fault): a column named that is not there, a kind that is not one, a column name that
// cannot be a field's.
Roles assign_roles(const Table& t, const SourceOptions& opt);

}  // namespace dscache::ingest_detail
