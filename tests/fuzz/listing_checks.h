// What every list or table listing promises, checked by the fuzz targets that list sources
// (fuzz_source_list, fuzz_table): one entry per row, a reason for each bad one, labels in range,
// field columns holding each good entry's value (none for a bad one), fixed-size values of
// their row size, multi-hot vectors of 0/1, and no good entry named with a NUL byte.
#pragma once

#include <cstdint>
#include <string>

#include "dscache/ingest/source_list.h"
#include "fuzz_util.h"

namespace dscache::fuzz {

inline void check_listing(const SourceListing& l) {
  FUZZ_CHECK(l.kind == "list");
  const FieldColumns& c = l.columns;
  FUZZ_CHECK(c.values.size() == l.fields.size() && c.offsets.size() == l.fields.size());
  for (size_t f = 0; f < l.fields.size(); ++f) {
    FUZZ_CHECK(c.offsets[f].size() == l.entries.size() + 1 && c.offsets[f][0] == 0);
    FUZZ_CHECK(c.offsets[f].back() == c.values[f].size());
  }
  for (size_t e = 0; e < l.entries.size(); ++e) {
    const SourceEntry& s = l.entries[e];
    FUZZ_CHECK(s.label >= 0);
    FUZZ_CHECK(static_cast<uint64_t>(s.label) < l.classes.size() || s.label == 0);
    if (s.bad.empty()) FUZZ_CHECK(!s.name.empty() && s.name.find('\0') == std::string::npos);
    for (size_t f = 0; f < l.fields.size(); ++f) {
      const FieldSpec& spec = l.fields[f];
      FUZZ_CHECK(c.offsets[f][e] <= c.offsets[f][e + 1]);
      const FieldData v = c.get(f, e);
      if (!s.bad.empty()) {
        FUZZ_CHECK(v.bytes == 0);
        continue;
      }
      if (!spec.variable() && spec.kind != FieldKind::kMask)
        FUZZ_CHECK(v.bytes == spec.row_bytes());
      if (spec.kind != FieldKind::kArray || spec.classes.empty()) continue;  // multi-hot only
      FUZZ_CHECK(v.bytes == spec.classes.size());
      for (uint64_t k = 0; k < v.bytes; ++k) {
        FUZZ_CHECK(static_cast<const uint8_t*>(v.data)[k] <= 1);
      }
    }
  }
}

}  // namespace dscache::fuzz
