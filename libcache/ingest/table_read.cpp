// Reading tables (CSV/TSV with a header row, JSONL) into untyped cells; list_table types them.
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dscache/error.h"
#include "json_parse.h"
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

TableCell cell_of_json(const nlohmann::ordered_json& v) {
  TableCell c;
  c.present = true;
  if (v.is_string()) {
    c.text = v.get<std::string>();
  } else if (!v.is_null()) {
    c.text = v.dump();
  }
  if (v.is_array()) {
    c.is_array = true;
    for (const auto& item : v) {
      if (item.is_string()) {
        c.items.push_back(item.get<std::string>());
      } else {
        c.non_string_item = true;
      }
    }
  }
  return c;
}

}  // namespace

Table read_delimited_table(const std::string& path, const std::string& text, char sep) {
  Table t;
  t.path = path;
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
      continue;
    }
    if (f.size() > t.columns.size()) {
      fail(path, lineno,
           std::to_string(f.size()) + " fields, but the header names " +
               std::to_string(t.columns.size()) + " columns");
    }
    std::vector<TableCell> row(t.columns.size());
    for (size_t i = 0; i < f.size(); ++i) {
      row[i].present = true;
      row[i].text = trim(f[i]);
    }
    t.rows.push_back(std::move(row));
    t.lines.push_back(lineno);
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
    std::vector<TableCell> row(t.columns.size());
    for (const auto& [key, value] : object.items()) {
      auto it = index.find(key);
      if (it == index.end()) {
        add_column(t, index, key, lineno);
        it = index.find(key);
        row.resize(t.columns.size());
      }
      row[it->second] = cell_of_json(value);
    }
    t.rows.push_back(std::move(row));
    t.lines.push_back(lineno);
  }
  for (auto& row : t.rows) row.resize(t.columns.size());  // keys first seen on a later line
  return t;
}

}  // namespace dscache::ingest_detail
