// Fuzz target: the table parsers -- CSV, TSV (RFC 4180 records: quoted fields with "" and line
// ends, LF/CRLF/CR line ends) and JSONL (one JSON object a line, nesting bounded) -- through
// list_source with a table option given, so every input is read as a table, never as a
// path,label list. Byte 0 picks the options (field kinds, class names, --confine); the rest is
// the file. Listed paths are relative to a temp dir holding a few real files.
// Seeds: tables as users write them, and the hostile inputs of issue 38 (a line nested 100,000
// deep, NUL bytes in paths, quoted line ends, CR-only files, integers past 2^64).
#include <cstddef>
#include <cstdint>
#include <string>

#include "dscache/ingest/source_list.h"
#include "fuzz_util.h"

namespace {

// What every table listing promises: one entry per row, a reason for each bad one, field
// columns holding each good entry's value (none for a bad one), multi-hot vectors of 0/1 as
// long as the field's classes, and labels in range.
void check_table(const dscache::SourceListing& l) {
  FUZZ_CHECK(l.kind == "list");
  const dscache::FieldColumns& c = l.columns;
  FUZZ_CHECK(c.values.size() == l.fields.size() && c.offsets.size() == l.fields.size());
  for (size_t f = 0; f < l.fields.size(); ++f) {
    FUZZ_CHECK(c.offsets[f].size() == l.entries.size() + 1 && c.offsets[f][0] == 0);
    FUZZ_CHECK(c.offsets[f].back() == c.values[f].size());
  }
  for (size_t e = 0; e < l.entries.size(); ++e) {
    const dscache::SourceEntry& s = l.entries[e];
    FUZZ_CHECK(s.label >= 0);
    FUZZ_CHECK(static_cast<uint64_t>(s.label) < l.classes.size() || s.label == 0);
    if (s.bad.empty()) FUZZ_CHECK(s.name.find('\0') == std::string::npos);
    for (size_t f = 0; f < l.fields.size(); ++f) {
      const dscache::FieldData v = c.get(f, e);
      if (!s.bad.empty()) FUZZ_CHECK(v.bytes == 0);
      if (!s.bad.empty() || l.fields[f].kind != dscache::FieldKind::kArray) continue;
      FUZZ_CHECK(v.bytes == l.fields[f].classes.size());
      for (uint64_t k = 0; k < v.bytes; ++k) {
        FUZZ_CHECK(static_cast<const uint8_t*>(v.data)[k] <= 1);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dscache::fuzz::TempDir dir;
  static const bool made = [] {
    for (const char* n : {"a.png", "b.jpg", "c d.png"})
      dscache::fuzz::write_bytes(dir.file(n), "x", 1);
    return true;
  }();
  (void)made;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  dscache::SourceOptions opt;
  opt.image_column = "image_path";  // a table, whatever its header
  if (flags & 1) opt.field_kinds = {{"tags", "multi-hot"}, {"m", "mask"}, {"n", "int"}};
  if (flags & 2) opt.field_classes = {{"tags", {"y", "x"}}};
  if (flags & 4) opt.confine = true;
  if ((flags & 3) == 2) opt.field_kinds = {{"tags", "multi-hot"}};
  for (const char* name : {"t.csv", "t.tsv", "t.jsonl"}) {
    const std::string path = dir.file(name);
    dscache::fuzz::write_bytes(path, data + 1, size - 1);
    try {
      check_table(dscache::list_source(path, opt));
    } catch (const dscache::Error&) {
    }
  }
  return 0;
}
