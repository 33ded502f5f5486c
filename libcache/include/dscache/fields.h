// Fields: the named, typed values a sample carries besides its image and class label (masks,
// boxes, multi-label and regression targets, captions) — format_version 3 (docs/FORMAT.md,
// "Fields").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/enum_table.h"

namespace dscache {

// What a field's values are, and how a sample's geometric transform moves them. Stored in the
// manifest as the names of kFieldKindNames; never renamed.
enum class FieldKind {
  kMask,    // "mask": an image-valued target, one channel of class ids (uint8 or uint16), the
            // image's height x width; cropped, resized (nearest) and flipped with the image
  kScalar,  // "scalar": one int64 or float32 per sample (a regression target, an id)
  kArray,   // "array": a fixed shape per sample (a multi-hot vector, a fixed keypoint set)
  kBoxes,   // "boxes": n rows of float32 x1 y1 x2 y2 per sample, in the stored image's pixels
            // (0 <= x1 < x2 <= width, 0 <= y1 < y2 <= height); mapped, clipped and dropped
            // with the image's crop and flip
  kRows,    // "rows": n rows of a fixed row shape per sample (n varies); with `rows_of` naming a
            // boxes field, one row per box, dropped with its box (a box's class, its crowd flag)
  kBytes,   // "bytes": any bytes per sample (a JSON blob, an encoded payload)
  kText,    // "text": UTF-8 per sample (a caption)
};

// The element type of a field's values. Stored as the names of kFieldTypeNames: "uint8",
// "uint16", "int64", "float32".
enum class FieldType { kUint8, kUint16, kInt64, kFloat32 };

extern const EnumTable<FieldKind> kFieldKindNames;
extern const EnumTable<FieldType> kFieldTypeNames;
const char* to_string(FieldKind k);
const char* to_string(FieldType t);
// Bytes of one element: 1, 2, 8, 4.
uint32_t element_bytes(FieldType t);
// Element k of little-endian values of type t at `data`, as a double (int64 beyond 2^53 rounds).
double element_at(FieldType t, const uint8_t* data, uint64_t k);
// The npy descr of the type: "|u1", "<u2", "<i8", "<f4".
const char* npy_descr(FieldType t);

// One field of a cache, as the manifest lists it.
struct FieldSpec {
  // [a-z0-9_]{1,64}, starting with a letter; not "image", "images", "label" or "index";
  // unique in the cache
  std::string name;
  FieldKind kind = FieldKind::kScalar;
  FieldType dtype = FieldType::kInt64;  // mask: uint8/uint16; scalar: int64/float32; boxes:
                                        // float32; bytes/text: uint8; array/rows: any
  std::vector<uint32_t> shape;  // array: the shape of one sample's value (each > 0, at most 4
                                // dims); rows: the shape of one row ([] = one element); boxes:
                                // [4]; mask, scalar, bytes, text: []
  std::string rows_of;          // rows only: the boxes field whose rows these follow; "" = none
  std::vector<std::string> classes;  // mask, class-valued rows and multi-hot arrays: names of
                                     // the values (informational; inspect uses them); may be
                                     // empty
  bool allow_nonfinite = false;      // float32 kinds but boxes: NaN and +-inf are values the field
                                     // may hold (a missing target); false: the writer and verify
                                     // refuse them

  // True for the kinds whose values vary in length (boxes, rows, bytes, text), stored as a flat
  // value array plus per-sample offsets. A mask is stored that way too in the ragged layout,
  // where its size follows its image: see has_offsets() in manifest.h.
  bool variable() const;
  // Elements in one fixed-size value (scalar 1, array the product of shape) or one row (boxes
  // 4, rows the product of shape, bytes/text 1). A mask: 1 (times the image's pixels).
  uint64_t row_elements() const;
  uint64_t row_bytes() const { return row_elements() * element_bytes(dtype); }
};

// Every member equal (two caches with equal fields can be merged).
bool operator==(const FieldSpec& a, const FieldSpec& b);
inline bool operator!=(const FieldSpec& a, const FieldSpec& b) { return !(a == b); }

// Checks one spec on its own (name, kind/dtype/shape agreement) and a list together (unique
// names, every rows_of naming a boxes field). Throws Error(kInvalidArgument, context, reason)
// naming the field: "fields[2] 'boxes': kind boxes needs dtype float32".
void validate_field(const FieldSpec& spec, const std::string& context);
void validate_fields(const std::vector<FieldSpec>& specs, const std::string& context);

// One sample's value of one field, handed to CacheWriter::append (not owned; read during the
// call only). Fixed-size kinds: exactly row_bytes() bytes (a mask: height * width *
// element_bytes). Variable kinds: any multiple of row_bytes(), 0 included (n rows; bytes/text:
// n bytes). Elements are little-endian, in the field's dtype.
struct FieldData {
  const void* data = nullptr;
  uint64_t bytes = 0;
};

// Checks one sample's value of `f` (for an image of height x width): its size (fixed kinds
// exactly one value, a mask height x width elements; variable kinds whole rows), box coordinates
// (finite, 0 <= x1 < x2 <= width, 0 <= y1 < y2 <= height), text being UTF-8, float32 values
// finite unless the field has allow_nonfinite. Returns its rows
// (1 for fixed kinds but masks, which count their pixels). Error(kInvalidArgument, source,
// "field 'boxes': box 2 (...) is not ...") otherwise. What CacheWriter::append and `dscache
// verify` check.
uint64_t check_field_value(const FieldSpec& f, const FieldData& v, uint32_t height, uint32_t width,
                           const std::string& source);

// One sample's value of one field as stored (a view into the cache; valid while the Cache
// lives). `rows` is the number of rows (variable kinds) or 1 (fixed); a mask in any layout has
// `rows` = height * width of its sample.
struct FieldView {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint64_t rows = 0;
};

}  // namespace dscache
