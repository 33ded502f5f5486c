// Reading tables (CSV/TSV with a header row, JSONL) into untyped cells; list_table types them.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dscache/error.h"
#include "json/parse.h"
#include "list_internal.h"

namespace dscache::ingest_detail {
namespace {

[[noreturn]] void fail(const std::string& path, size_t line, const std::string& reason) {
  throw Error(ErrorKind::kInvalidArgument, path, "line " + std::to_string(line) + ": " + reason);
}

// Adds `name` as a header column; an empty or repeated name cannot name a field or be chosen.
void add_column(Table& t, std::map<std::string, size_t>& index, const std::string& name,
                size_t line) {
  if (name.empty()) {
    fail(t.path, line,
         "column " + std::to_string(t.columns.size() + 1) +
             " has an empty name (a pandas index? write the table with index=False)");
  }
  if (!index.emplace(name, t.columns.size()).second) {
    fail(t.path, line, "column '" + name + "' appears twice in the header");
  }
  t.columns.push_back(name);
}

void set_json_cell(Table& t, size_t column, const nlohmann::ordered_json& v) {
  bool non_string = false;
  if (v.is_array()) {
    for (const auto& item : v) non_string = non_string || !item.is_string();
  }
  if (v.is_string()) {
    t.set_cell(column, v.get_ref<const std::string&>());
  } else {
    t.set_cell(column, v.is_null() ? std::string() : v.dump(), v.is_array(), non_string);
  }
}

}  // namespace

Table read_delimited_table(const std::string& path, const std::string& text, char sep) {
  Table t;
  t.path = path;
  t.reserve_text(text.size());  // the cells' texts are at most the file's
  RecordReader in(text, sep);
  std::map<std::string, size_t> index;
  Record record;
  bool header = true;
  while (in.next(&record)) {
    if (record.blank) continue;
    const size_t lineno = record.line;
    const std::vector<std::string>& f = record.fields;
    if (record.unterminated) {
      fail(path, lineno, "unterminated quote (the quoted field runs to the end of the file)");
    }
    if (header) {
      for (const std::string& name : f) add_column(t, index, trim(name), lineno);
      header = false;
      // At most a row a line end: no cell vector doubles (and holds twice its size) on the way.
      t.reserve_rows(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
      continue;
    }
    if (f.size() > t.columns.size()) {
      fail(path, lineno,
           std::to_string(f.size()) + " fields, but the header names " +
               std::to_string(t.columns.size()) + " columns");
    }
    t.start_row(lineno);
    for (size_t i = 0; i < f.size(); ++i) t.set_cell(i, trim(f[i]));
  }
  return t;
}

Table read_jsonl_table(const std::string& path, const std::string& text) {
  Table t;
  t.path = path;
  std::istringstream in(text);
  std::map<std::string, size_t> index;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (trim(line).empty()) continue;
    // An integer past uint64 keeps its digits (a label "123...890", not "1.2345678901234568e+29").
    const auto object = parse_json<nlohmann::ordered_json>(
        line, JsonOrigin{path, ErrorKind::kInvalidArgument, lineno}, BigIntegers::kAsText);
    if (!object.is_object()) fail(path, lineno, "not a JSON object ({\"image_path\": ...})");
    t.start_row(lineno);
    // Cells go in column order: a key's column may come before an earlier key's.
    std::vector<std::pair<size_t, const nlohmann::ordered_json*>> row;
    for (const auto& [key, value] : object.items()) {
      auto it = index.find(key);
      if (it == index.end()) {
        add_column(t, index, key, lineno);
        it = index.find(key);
      }
      row.emplace_back(it->second, &value);
    }
    std::sort(row.begin(), row.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [column, value] : row) set_json_cell(t, column, *value);
  }
  return t;
}

void Table::start_row(size_t line) {
  lines.push_back(line);
  row_end_.push_back(cells_.size());
}

void Table::set_cell(size_t column, std::string_view text, bool is_array, bool non_string_item) {
  const uint64_t begin = row_end_.size() < 2 ? 0 : row_end_[row_end_.size() - 2];
  while (cells_.size() - begin < column) cells_.emplace_back();  // absent columns before it
  Cell c;
  c.offset = arena_.size();
  c.length = static_cast<uint32_t>(text.size());
  if (c.length != text.size()) fail(path, lines.back(), "a value of 4 GiB or more");
  c.flags = kPresent | (is_array ? kArray : 0) | (non_string_item ? kNonString : 0);
  arena_.append(text);
  cells_.push_back(c);
  row_end_.back() = cells_.size();
}

const Table::Cell* Table::find(size_t r, size_t column) const {
  const uint64_t begin = r == 0 ? 0 : row_end_[r - 1];
  if (begin + column >= row_end_[r]) return nullptr;
  const Cell& c = cells_[begin + column];
  return (c.flags & kPresent) ? &c : nullptr;
}

std::string_view Table::text(size_t r, size_t column) const {
  const Cell* c = find(r, column);
  return c ? std::string_view(arena_.data() + c->offset, c->length) : std::string_view();
}

TableCell Table::cell(size_t r, size_t column) const {
  TableCell out;
  const Cell* c = find(r, column);
  if (!c) return out;
  out.present = true;
  out.text.assign(arena_.data() + c->offset, c->length);
  out.is_array = (c->flags & kArray) != 0;
  out.non_string_item = (c->flags & kNonString) != 0;
  if (out.is_array) {  // the array's JSON text, as read: parses
    for (const auto& item : nlohmann::json::parse(out.text)) {
      if (item.is_string()) out.items.push_back(item.get<std::string>());
    }
  }
  return out;
}

}  // namespace dscache::ingest_detail
