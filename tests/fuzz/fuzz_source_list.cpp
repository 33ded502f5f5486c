// Fuzz target: the CSV/TSV list and table parsers (list_source on a .csv, a .tsv and a .jsonl
// file holding the input). Listed paths are relative to a temp dir holding a few real files.
// Seeds: lists as users write them (header row, quoted fields with "" escapes, class names or
// numbers, absolute paths, CRLF, blank lines) and tables (fields, bad rows, JSONL).
#include <cstddef>
#include <cstdint>

#include "dscache/ingest/source_list.h"
#include "fuzz_util.h"

namespace {

// What every listing promises: labels in range (0 when a table has no label column), a name for
// every good entry, and field columns that hold each entry's value (none for a bad entry).
void check_listing(const dscache::SourceListing& l) {
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
    FUZZ_CHECK(!s.bad.empty() || !s.name.empty());
    for (size_t f = 0; f < l.fields.size(); ++f) {
      FUZZ_CHECK(c.offsets[f][e] <= c.offsets[f][e + 1]);
      const uint64_t bytes = c.get(f, e).bytes;
      if (!s.bad.empty()) FUZZ_CHECK(bytes == 0);
      if (s.bad.empty() && !l.fields[f].variable() &&
          l.fields[f].kind != dscache::FieldKind::kMask) {
        FUZZ_CHECK(bytes == l.fields[f].row_bytes());
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
  for (const char* name : {"list.csv", "list.tsv", "list.jsonl"}) {
    const std::string path = dir.file(name);
    dscache::fuzz::write_bytes(path, data, size);
    for (int variant = 0; variant < 3; ++variant) {
      dscache::SourceOptions opt;
      if (variant == 1) opt.class_names = {"cat", "dog", "0"};
      if (variant == 2) opt.field_kinds = {{"tags", "multi-hot"}, {"m", "mask"}, {"n", "int"}};
      try {
        check_listing(dscache::list_source(path, opt));
      } catch (const dscache::Error&) {
      }
    }
  }
  return 0;
}
