// An in-memory SampleSource with fields (every kind: masks of uint8 and uint16, boxes with a
// rows_of follower, a scalar, an array, a text), whose images, masks and boxes agree by
// construction (spatial_fixtures.h's Scene per sample), and batches' fields copied out of a
// Loader. For the Loader's field tests and any test that needs a source with fields without a
// cache on disk.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/loader.h"
#include "dscache/sample_source.h"
#include "dscache/transform.h"
#include "spatial_fixtures.h"

namespace dscache::test {

// A FieldSpec with the members a test sets (the others at their defaults).
inline FieldSpec field_spec(const char* name, FieldKind kind, FieldType dtype,
                            std::vector<uint32_t> shape = {}, const char* rows_of = "") {
  FieldSpec s;
  s.name = name;
  s.kind = kind;
  s.dtype = dtype;
  s.shape = std::move(shape);
  s.rows_of = rows_of;
  return s;
}

// Field numbers of FieldSource, in its field order.
enum FieldSourceField : size_t {
  kFsMask,     // "mask": uint8, the sample's class (1 + i % 7) on its rectangle
  kFsBoxes,    // "boxes": the rectangle's box, then (odd samples) a 6x5 box in the top-left corner
  kFsBoxId,    // "box_id": int64 rows_of "boxes": i * 100 + the box's row
  kFsScore,    // "score": float32 scalar i + 0.25
  kFsHot,      // "hot": uint8 array [3]: i % 2, i % 3, i % 5
  kFsCaption,  // "caption": text "s<i>" repeated i % 4 times (some samples empty)
  kFsMask16,   // "mask16": uint16, 1000 + i on the rectangle
  kFsCount
};

class FieldSource : public SampleSource {
 public:
  struct Options {
    uint64_t count = 24;    // samples
    uint32_t height = 40;   // fixed layout: every sample's rows
    uint32_t width = 48;    // fixed layout: every sample's columns
    uint32_t channels = 3;  // 1 or 3
    bool ragged = false;    // sizes vary per sample (30..49 x 32..56)
    bool encoded = false;   // stands in for a JPEG cache: view() is Unsupported and the
                            // Loader calls decode_crop (here crop_resize of the pixels)
  };

  explicit FieldSource(const Options& o) : o_(o) {
    specs_ = {field_spec("mask", FieldKind::kMask, FieldType::kUint8),
              field_spec("boxes", FieldKind::kBoxes, FieldType::kFloat32, {4}),
              field_spec("box_id", FieldKind::kRows, FieldType::kInt64, {}, "boxes"),
              field_spec("score", FieldKind::kScalar, FieldType::kFloat32),
              field_spec("hot", FieldKind::kArray, FieldType::kUint8, {3}),
              field_spec("caption", FieldKind::kText, FieldType::kUint8),
              field_spec("mask16", FieldKind::kMask, FieldType::kUint16)};
    values_.assign(kFsCount, std::vector<std::vector<uint8_t>>(o.count));
    rows_.assign(kFsCount, std::vector<uint64_t>(o.count, 1));
    for (uint64_t i = 0; i < o.count; ++i) {
      const uint32_t h = o.ragged ? 30 + uint32_t(i * 5 % 20) : o.height;
      const uint32_t w = o.ragged ? 32 + uint32_t(i * 3 % 25) : o.width;
      // A rectangle at least 15 px thick, somewhere else in every sample.
      const uint32_t x1 = 2 + uint32_t(i * 7 % 11), y1 = 3 + uint32_t(i * 5 % 9);
      const uint32_t x2 = std::min(w, x1 + 15 + uint32_t(i * 3 % 13));
      const uint32_t y2 = std::min(h, y1 + 15 + uint32_t(i * 11 % 7));
      scenes_.emplace_back(h, w, o.channels, 1, x1, y1, x2, y2, uint16_t(1 + i % 7));
      const Scene& s = scenes_.back();
      values_[kFsMask][i] = s.mask;
      rows_[kFsMask][i] = uint64_t{h} * w;
      const Scene wide(h, w, o.channels, 2, x1, y1, x2, y2, uint16_t(1000 + i));
      values_[kFsMask16][i] = wide.mask;
      rows_[kFsMask16][i] = uint64_t{h} * w;
      std::vector<float> boxes = s.box;
      if (i % 2 == 1) boxes.insert(boxes.end(), {0, 0, 6, 5});
      put(kFsBoxes, i, boxes.data(), boxes.size() * sizeof(float), boxes.size() / 4);
      std::vector<int64_t> ids;
      for (size_t j = 0; j < boxes.size() / 4; ++j) ids.push_back(int64_t(i * 100 + j));
      put(kFsBoxId, i, ids.data(), ids.size() * sizeof(int64_t), ids.size());
      const float score = float(i) + 0.25f;
      put(kFsScore, i, &score, sizeof score, 1);
      const uint8_t hot[3] = {uint8_t(i % 2), uint8_t(i % 3), uint8_t(i % 5)};
      put(kFsHot, i, hot, 3, 1);
      std::string caption;
      for (uint64_t r = 0; r < i % 4; ++r) caption += "s" + std::to_string(i);
      put(kFsCaption, i, caption.data(), caption.size(), caption.size());
    }
  }

  uint64_t size() const override { return o_.count; }
  Layout layout() const override { return o_.ragged ? Layout::kRagged : Layout::kFixed; }
  SampleShape shape() const override {
    return o_.ragged ? SampleShape{0, 0, o_.channels}
                     : SampleShape{o_.height, o_.width, o_.channels};
  }
  int64_t label(uint64_t i) const override { return int64_t(i % 7); }
  uint64_t locality_block() const override { return 8; }
  SampleShape sample_shape(uint64_t i) const override {
    return SampleShape{scenes_[i].h, scenes_[i].w, o_.channels};
  }
  void copy_sample(uint64_t i, uint8_t* out) const override {
    std::memcpy(out, scenes_[i].image.data(), scenes_[i].image.size());
  }
  ImageView view(uint64_t i) const override {
    if (o_.encoded) throw Error(ErrorKind::kUnsupported, "", "encoded: no view");
    return view_of(i);
  }
  bool encoded() const override { return o_.encoded; }
  void decode_crop(uint64_t i, const CropBox& box, uint32_t out_h, uint32_t out_w,
                   uint8_t* out) const override {
    crop_resize(view_of(i), box, out_h, out_w, out);
  }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  FieldView field(uint64_t i, size_t f) const override {
    if (i >= o_.count || f >= specs_.size()) {
      throw Error(ErrorKind::kInvalidArgument, "",
                  "field(" + std::to_string(i) + ", " + std::to_string(f) + ") out of range");
    }
    const std::vector<uint8_t>& v = values_[f][i];
    return FieldView{v.data(), v.size(), rows_[f][i]};
  }

  // What the source holds (tests compare batches with it).
  const Scene& scene(uint64_t i) const { return scenes_[i]; }
  const std::vector<uint8_t>& value(size_t f, uint64_t i) const { return values_[f][i]; }
  uint64_t rows(size_t f, uint64_t i) const { return rows_[f][i]; }
  // Replaces sample i's value of field f (a test's bad value).
  void set_value(size_t f, uint64_t i, std::vector<uint8_t> bytes, uint64_t rows) {
    values_[f][i] = std::move(bytes);
    rows_[f][i] = rows;
  }

 private:
  ImageView view_of(uint64_t i) const {
    return ImageView{scenes_[i].image.data(), scenes_[i].h, scenes_[i].w, o_.channels, label(i)};
  }
  void put(size_t f, uint64_t i, const void* data, size_t bytes, uint64_t rows) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    values_[f][i].assign(p, p + bytes);
    rows_[f][i] = rows;
  }

  Options o_;
  std::vector<FieldSpec> specs_;
  std::vector<Scene> scenes_;
  std::vector<std::vector<std::vector<uint8_t>>> values_;  // [field][sample] bytes
  std::vector<std::vector<uint64_t>> rows_;                // [field][sample] rows
};

// One batch field, copied out of the Loader's buffers.
struct TakenField {
  std::string name;
  std::vector<uint8_t> data;
  std::vector<int64_t> offsets;  // variable kinds: size + 1
  uint64_t rows = 0;
  std::vector<uint64_t> shape;
  bool operator==(const TakenField& o) const {
    return name == o.name && data == o.data && offsets == o.offsets && rows == o.rows &&
           shape == o.shape;
  }
  // Sample k's bytes: a fixed kind's value, or a variable kind's rows (row_bytes each).
  std::vector<uint8_t> sample(uint32_t k, uint32_t size, uint64_t row_bytes) const {
    if (offsets.empty()) {
      const size_t each = data.size() / size;
      return std::vector<uint8_t>(data.begin() + k * each, data.begin() + (k + 1) * each);
    }
    return std::vector<uint8_t>(data.begin() + offsets[k] * row_bytes,
                                data.begin() + offsets[k + 1] * row_bytes);
  }
};

inline std::vector<TakenField> fields_of(const Batch& b) {
  std::vector<TakenField> out;
  for (const FieldBatch& f : b.fields) {
    TakenField t;
    REQUIRE(f.spec != nullptr);
    t.name = f.spec->name;
    CHECK(reinterpret_cast<uintptr_t>(f.data) % 64 == 0);
    t.data.assign(f.data, f.data + f.bytes);
    if (f.offsets != nullptr) t.offsets.assign(f.offsets, f.offsets + b.size + 1);
    t.rows = f.rows;
    t.shape = f.shape;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace dscache::test
