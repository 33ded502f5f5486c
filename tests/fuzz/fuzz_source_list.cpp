// Fuzz target: the CSV/TSV list and table parsers (list_source on a .csv, a .tsv and a .jsonl
// file holding the input). Listed paths are relative to a temp dir holding a few real files.
// Seeds: lists as users write them (header row, quoted fields with "" escapes, class names or
// numbers, absolute paths, CRLF, blank lines) and tables (fields, bad rows, JSONL).
#include <cstddef>
#include <cstdint>

#include "dscache/ingest/source_list.h"
#include "fuzz_util.h"
#include "listing_checks.h"

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
        dscache::fuzz::check_listing(dscache::list_source(path, opt));
      } catch (const dscache::Error&) {
      }
    }
  }
  return 0;
}
