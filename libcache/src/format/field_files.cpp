// Field files: value checks, npy shapes, and the streaming writer of one field's shard files.
#include "format/field_files.h"

#include <cmath>
#include <cstring>

#include "dscache/error.h"
#include "dscache/npy.h"

namespace dscache {
namespace detail {

// True when [p, p + n) is well-formed UTF-8 (no overlong forms, no surrogates, <= U+10FFFF).
bool valid_utf8(const uint8_t* p, uint64_t n) {
  uint64_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (n - i < static_cast<uint64_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<uint64_t>(len);
  }
  return true;
}

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A float32 field's values must be finite unless the field allows NaN and inf (boxes check
// theirs with their coordinates).
template <typename Fail>
void check_finite(const FieldSpec& f, const uint8_t* p, uint64_t bytes, const Fail& fail) {
  if (f.dtype != FieldType::kFloat32 || f.allow_nonfinite) return;
  for (uint64_t k = 0; k < bytes / 4; ++k) {
    float v;
    std::memcpy(&v, p + 4 * k, 4);
    if (std::isfinite(v)) continue;
    fail("value " + std::to_string(k) + " is " + fmt(v) +
         "; a float32 field holds finite values unless it allows others (allow_nonfinite)");
  }
}

}  // namespace

uint64_t fixed_value_bytes(const FieldSpec& f, Layout layout, uint32_t height, uint32_t width) {
  if (has_offsets(f, layout)) return 0;
  if (f.kind == FieldKind::kMask) return uint64_t{height} * width * element_bytes(f.dtype);
  return f.row_bytes();
}

std::vector<uint64_t> values_shape(const FieldSpec& f, Layout layout, uint32_t height,
                                   uint32_t width, uint64_t count, uint64_t rows) {
  std::vector<uint64_t> shape;
  if (f.kind == FieldKind::kMask) {
    if (layout == Layout::kRagged) return {rows};
    return {count, height, width};
  }
  shape.push_back(f.variable() ? rows : count);
  for (uint32_t d : f.shape) shape.push_back(d);
  return shape;
}

}  // namespace detail

uint64_t check_field_value(const FieldSpec& f, const FieldData& v, uint32_t height, uint32_t width,
                           const std::string& source) {
  auto fail = [&](const std::string& reason) {
    throw Error(ErrorKind::kInvalidArgument, source, "field '" + f.name + "': " + reason);
  };
  if (v.data == nullptr && v.bytes != 0) fail("null data");
  const uint64_t elem = element_bytes(f.dtype);
  if (f.kind == FieldKind::kMask) {
    const uint64_t want = uint64_t{height} * width * elem;
    if (v.bytes != want) {
      fail("a mask of " + std::to_string(v.bytes) + " bytes; its image is " +
           std::to_string(height) + "x" + std::to_string(width) + " (" + std::to_string(want) +
           " bytes of " + to_string(f.dtype) + ")");
    }
    return uint64_t{height} * width;
  }
  const uint64_t row = f.row_bytes();
  if (!f.variable()) {
    if (v.bytes != row) {
      fail(std::to_string(v.bytes) + " bytes; one value is " + std::to_string(row) + " bytes");
    }
    detail::check_finite(f, static_cast<const uint8_t*>(v.data), v.bytes, fail);
    return 1;
  }
  if (v.bytes % row != 0) {
    fail(std::to_string(v.bytes) + " bytes is not a whole number of " + std::to_string(row) +
         "-byte rows");
  }
  const uint64_t rows = v.bytes / row;
  const auto* bytes = static_cast<const uint8_t*>(v.data);
  if (f.kind == FieldKind::kText && !detail::valid_utf8(bytes, v.bytes))
    fail("text is not valid UTF-8");
  if (f.kind != FieldKind::kBoxes) detail::check_finite(f, bytes, v.bytes, fail);
  if (f.kind == FieldKind::kBoxes) {
    for (uint64_t r = 0; r < rows; ++r) {
      float b[4];
      std::memcpy(b, bytes + r * 16, 16);
      const bool finite =
          std::isfinite(b[0]) && std::isfinite(b[1]) && std::isfinite(b[2]) && std::isfinite(b[3]);
      if (!finite || !(b[0] >= 0 && b[0] < b[2] && b[2] <= width) ||
          !(b[1] >= 0 && b[1] < b[3] && b[3] <= height)) {
        fail("box " + std::to_string(r) + " (" + detail::fmt(b[0]) + ", " + detail::fmt(b[1]) +
             ", " + detail::fmt(b[2]) + ", " + detail::fmt(b[3]) + ") is not 0 <= x1 < x2 <= " +
             std::to_string(width) + ", 0 <= y1 < y2 <= " + std::to_string(height) +
             " (x1 y1 x2 y2 in the image's pixels)");
      }
    }
  }
  return rows;
}

namespace detail {
namespace {

// A header long enough for any row count of this field, so the commit can rewrite it in place.
std::string initial_header(const FieldSpec& f, Layout layout, uint32_t h, uint32_t w) {
  constexpr uint64_t kMost = uint64_t{1} << 62;
  return format_npy_header(npy_descr(f.dtype), values_shape(f, layout, h, w, kMost, kMost));
}

}  // namespace

FieldShardWriter::FieldShardWriter(const std::string& dir, const FieldSpec& spec, Layout layout,
                                   uint32_t height, uint32_t width, uint64_t shard)
    : dir_(dir),
      spec_(spec),
      layout_(layout),
      height_(height),
      width_(width),
      shard_(shard),
      offsets_(has_offsets(spec, layout)),
      values_(dir + "/" + field_file_name(spec.name, shard, false)),
      header_(initial_header(spec, layout, height, width)) {
  values_.write(header_.data(), header_.size());
}

void FieldShardWriter::append(const FieldData& v, uint64_t rows) {
  if (v.bytes != 0) values_.write(v.data, static_cast<size_t>(v.bytes));
  ++count_;
  row_offsets_.push_back(row_offsets_.back() + static_cast<int64_t>(rows));
}

FieldFiles FieldShardWriter::commit() {
  const uint64_t rows = static_cast<uint64_t>(row_offsets_.back());
  const std::string header = format_npy_header(
      npy_descr(spec_.dtype), values_shape(spec_, layout_, height_, width_, count_, rows),
      header_.size());
  if (header.size() != header_.size()) {
    throw Error(ErrorKind::kInvalidArgument, values_.temp_path(), "npy header grew at commit");
  }
  values_.pwrite(header.data(), header.size(), 0);
  FieldFiles out;
  out.values = values_.commit();
  if (offsets_) {
    const std::string name = field_file_name(spec_.name, shard_, true);
    write_npy_file(dir_ + "/" + name, "<i8", {row_offsets_.size()}, row_offsets_.data(),
                   row_offsets_.size() * sizeof(int64_t));
    out.offsets = hash_file(dir_ + "/" + name);
    out.offsets.file = name;
  }
  return out;
}

}  // namespace detail
}  // namespace dscache
