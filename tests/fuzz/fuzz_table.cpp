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
#include "listing_checks.h"

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
      dscache::fuzz::check_listing(dscache::list_source(path, opt));
    } catch (const dscache::Error&) {
    }
  }
  return 0;
}
