// Fuzz target: the CSV/TSV list parser (list_source on a .csv and on a .tsv file holding the
// input). Listed paths are relative to a temp dir holding a few real files.
// Seeds: lists as users write them (header row, quoted fields with "" escapes, class names or
// numbers, absolute paths, CRLF, blank lines).
#include <cstddef>
#include <cstdint>

#include "dscache/ingest/source_list.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dscache::fuzz::TempDir dir;
  static const bool made = [] {
    for (const char* n : {"a.png", "b.jpg", "c d.png"})
      dscache::fuzz::write_bytes(dir.file(n), "x", 1);
    return true;
  }();
  (void)made;
  for (const char* name : {"list.csv", "list.tsv"}) {
    const std::string path = dir.file(name);
    dscache::fuzz::write_bytes(path, data, size);
    for (bool named : {false, true}) {
      dscache::SourceOptions opt;
      if (named) opt.class_names = {"cat", "dog", "0"};
      try {
        const dscache::SourceListing l = dscache::list_source(path, opt);
        FUZZ_CHECK(l.kind == "list");
        for (const dscache::SourceEntry& e : l.entries) {
          FUZZ_CHECK(e.label >= 0 && static_cast<uint64_t>(e.label) < l.classes.size());
          FUZZ_CHECK(!e.name.empty());
        }
      } catch (const dscache::Error&) {
      }
    }
  }
  return 0;
}
