// Field files (internal): the per-shard `<name>-NNNNN.npy` values and `<name>-offsets-NNNNN.npy`
// row offsets of docs/FORMAT.md "Fields" -- written by CacheWriter, checked by CacheDir, so the
// two agree on one set of rules (value sizes, npy shapes, offsets).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/fields.h"
#include "dscache/manifest.h"

namespace dscache {
namespace detail {

// True when [p, p + n) is well-formed UTF-8 (no overlong forms, no surrogates, <= U+10FFFF):
// what a text field holds.
bool valid_utf8(const uint8_t* p, uint64_t n);

// Bytes of one fixed-size value of `f` in a cache of `m`'s layout and shape (a fixed-layout
// mask: height * width elements); 0 for the kinds stored with offsets.
uint64_t fixed_value_bytes(const FieldSpec& f, Layout layout, uint32_t height, uint32_t width);

// The npy shape of field `f`'s values file for a shard of `count` samples holding `rows` rows
// (variable kinds and ragged masks; ignored otherwise).
std::vector<uint64_t> values_shape(const FieldSpec& f, Layout layout, uint32_t height,
                                   uint32_t width, uint64_t count, uint64_t rows);

// Streams one field's values for one shard into `<name>-NNNNN.npy` (under a temp name, header
// sized for any row count and rewritten at commit) and keeps its offsets, written at commit as
// `<name>-offsets-NNNNN.npy` for the kinds that have them. Not thread-safe.
class FieldShardWriter {
 public:
  FieldShardWriter(const std::string& dir, const FieldSpec& spec, Layout layout, uint32_t height,
                   uint32_t width, uint64_t shard);
  // One sample's value, already checked (check_value), of `rows` rows.
  void append(const FieldData& v, uint64_t rows);
  // Writes both files into place; returns their entries (offsets' file "" when none).
  FieldFiles commit();

 private:
  std::string dir_;
  FieldSpec spec_;
  Layout layout_;
  uint32_t height_, width_;
  uint64_t shard_;
  bool offsets_;
  AtomicFile values_;
  std::string header_;  // as written at create
  uint64_t count_ = 0;
  std::vector<int64_t> row_offsets_{0};
};

}  // namespace detail
}  // namespace dscache
