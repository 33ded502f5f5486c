// The Loader's fields: selection, per-slot buffers, and one sample's values moved into a batch
// with the sample's SpatialTransform.
#include "serve/field_fill.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "dscache/error.h"
#include "format/field_files.h"
#include "read/mapped_file.h"

namespace dscache {
namespace detail {

namespace {

constexpr size_t kAlign = 64;

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

std::string where(const FieldSpec& spec, uint64_t sample) {
  return "field '" + spec.name + "' of sample " + std::to_string(sample);
}

Error corrupt(const FieldSpec& spec, uint64_t sample, const std::string& reason) {
  return Error(ErrorKind::kCorruption, "", where(spec, sample) + ": " + reason);
}

// guarded_copy out of a source's view; a file truncated under its mapping names the field.
void copy_out(void* dst, const void* src, size_t n, const FieldSpec& spec, uint64_t sample) {
  static const std::string kNoPath;
  try {
    guarded_copy(dst, src, n, kNoPath);
  } catch (const Error& e) {
    throw Error(e.kind(), e.path(), where(spec, sample) + ": " + e.reason());
  }
}

// Sample `sample`'s view of field `f`, its size checked: `rows` rows of spec.row_bytes() (a
// mask: one element per pixel).
FieldView checked_view(const SampleSource& source, uint64_t sample, size_t f,
                       const FieldSpec& spec) {
  const FieldView v = source.field(sample, f);
  const uint64_t row = spec.kind == FieldKind::kMask ? element_bytes(spec.dtype) : spec.row_bytes();
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(v.rows, row, &bytes) || bytes != v.bytes ||
      (v.bytes > 0 && v.data == nullptr)) {
    throw corrupt(spec, sample,
                  "the source's value holds " + std::to_string(v.bytes) + " bytes for " +
                      std::to_string(v.rows) + " rows of " + std::to_string(row) + " bytes");
  }
  if (bytes > SIZE_MAX) throw corrupt(spec, sample, "value does not fit in memory");
  return v;
}

template <typename T>
void grow(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

}  // namespace

void AlignedBuffer::Free::operator()(uint8_t* p) const {
  if (allocator != nullptr && allocator->release) {
    allocator->release(p);
  } else {
    std::free(p);
  }
}

uint8_t* AlignedBuffer::allocate(size_t bytes) const {
  const Free& f = p_.get_deleter();
  const bool own = f.allocator != nullptr && f.allocator->allocate;
  void* p = own ? f.allocator->allocate(bytes) : std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) throw std::bad_alloc();
  if (reinterpret_cast<uintptr_t>(p) % kAlign != 0) {
    f(static_cast<uint8_t*>(p));
    throw invalid(std::string("loader.") + f.name + " returned memory not aligned to " +
                  std::to_string(kAlign) + " bytes");
  }
  return static_cast<uint8_t*>(p);
}

void AlignedBuffer::reserve(size_t bytes, size_t keep) {
  if (bytes <= capacity_) return;
  size_t cap = std::max<size_t>(capacity_ > SIZE_MAX / 2 ? bytes : 2 * capacity_, 256);
  cap = std::max(cap, bytes);
  if (cap > SIZE_MAX - kAlign) throw std::bad_alloc();
  cap = (cap + kAlign - 1) / kAlign * kAlign;
  uint8_t* p = allocate(cap);
  if (keep > 0) std::memcpy(p, p_.get(), keep);
  p_.reset(p);
  capacity_ = cap;
}

void AlignedBuffer::renew() {
  if (capacity_ > 0) p_.reset(allocate(capacity_));  // the new first: a throw changes nothing
}

FieldFill::FieldFill(const SampleSource& source,
                     const std::optional<std::vector<std::string>>& names,
                     double min_box_visibility, uint32_t out_h, uint32_t out_w)
    : source_(source), min_box_visibility_(min_box_visibility), out_h_(out_h), out_w_(out_w) {
  if (!(min_box_visibility >= 0.0 && min_box_visibility <= 1.0)) {
    throw invalid("loader.min_box_visibility " + std::to_string(min_box_visibility) +
                  " is outside [0, 1]");
  }
  const std::vector<FieldSpec>& specs = source.fields();
  auto index_of = [&](const std::string& name) -> size_t {
    for (size_t f = 0; f < specs.size(); ++f) {
      if (specs[f].name == name) return f;
    }
    return specs.size();
  };
  std::vector<size_t> chosen;
  if (!names) {
    for (size_t f = 0; f < specs.size(); ++f) chosen.push_back(f);
  } else {
    for (const std::string& name : *names) {
      // The arrays every batch holds (their names are reserved: no field has them), accepted
      // in a selection as what they are, e.g. fields = {"image", "mask"}.
      if (name == "image" || name == "label" || name == "index") continue;
      const size_t f = index_of(name);
      if (f == specs.size()) {
        std::string known;
        for (const FieldSpec& s : specs) known += (known.empty() ? "" : ", ") + s.name;
        throw invalid("loader.fields: unknown field '" + name +
                      "' (the source's fields: " + (known.empty() ? "none" : known) + ")");
      }
      if (std::find(chosen.begin(), chosen.end(), f) != chosen.end()) {
        throw invalid("loader.fields: field '" + name + "' is named twice");
      }
      chosen.push_back(f);
    }
  }
  // Boxes groups: every selected boxes field, and the boxes a selected rows_of field follows
  // (read to know which rows survive the crop, even when not served themselves).
  auto group_of = [&](size_t f) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].source_index == f) return static_cast<int>(g);
    }
    groups_.push_back(Group{f, -1});
    return static_cast<int>(groups_.size() - 1);
  };
  for (size_t f : chosen) {
    const FieldSpec& spec = specs[f];
    Selected s;
    s.spec = &spec;
    s.source_index = f;
    switch (spec.kind) {
      case FieldKind::kMask: {
        const uint32_t eb = element_bytes(spec.dtype);
        if (eb != 1 && eb != 2) {
          throw invalid("loader.fields: field '" + spec.name + "': a mask of " +
                        to_string(spec.dtype) + " (masks are uint8 or uint16)");
        }
        if (__builtin_mul_overflow(uint64_t{out_h} * out_w, eb, &s.value_bytes)) {
          throw invalid("loader.fields: field '" + spec.name + "': a " + std::to_string(out_h) +
                        "x" + std::to_string(out_w) + " mask does not fit in 64 bits");
        }
        break;
      }
      case FieldKind::kScalar:
      case FieldKind::kArray:
        s.value_bytes = spec.row_bytes();
        break;
      case FieldKind::kBoxes:
        if (spec.row_bytes() != 4 * sizeof(float) || spec.dtype != FieldType::kFloat32) {
          throw invalid("loader.fields: field '" + spec.name + "': boxes must be float32 x 4");
        }
        s.group = group_of(f);
        groups_[s.group].selected = static_cast<int>(selected_.size());
        break;
      case FieldKind::kRows:
        if (!spec.rows_of.empty()) {
          const size_t b = index_of(spec.rows_of);
          if (b == specs.size() || specs[b].kind != FieldKind::kBoxes ||
              specs[b].row_bytes() != 4 * sizeof(float)) {
            throw invalid("loader.fields: field '" + spec.name + "' follows '" + spec.rows_of +
                          "', which is not a boxes field of the source");
          }
          s.group = group_of(b);
        }
        break;
      case FieldKind::kBytes:
      case FieldKind::kText:
        break;
    }
    selected_.push_back(s);
  }
}

bool FieldFill::fixed_bytes_per_sample(uint64_t* out) const {
  uint64_t total = 0;
  for (const Selected& s : selected_) {
    if (__builtin_add_overflow(total, s.value_bytes, &total)) return false;
  }
  *out = total;
  return true;
}

FieldBuffers FieldFill::make_buffers(uint32_t batch_size, const BufferAllocator* allocator) const {
  FieldBuffers b;
  b.fields.resize(selected_.size());
  for (FieldBuffers::Field& f : b.fields) f.data = AlignedBuffer(allocator, "field_allocator");
  for (size_t i = 0; i < selected_.size(); ++i) {
    const Selected& s = selected_[i];
    if (s.spec->variable()) {
      b.fields[i].offsets.assign(size_t{batch_size} + 1, 0);
      b.fields[i].data.reserve(kAlign, 0);
    } else {
      // The Loader checked that the ring (these included) fits in memory.
      b.fields[i].data.reserve(static_cast<size_t>(s.value_bytes * batch_size), 0);
    }
  }
  b.kept.resize(groups_.size());
  b.kept_count.assign(groups_.size(), 0);
  b.group_rows.assign(groups_.size(), 0);
  return b;
}

void FieldFill::hand_off(FieldBuffers* b) {
  for (FieldBuffers::Field& f : b->fields) f.data.renew();
}

std::vector<FieldBatch> FieldFill::make_batch_fields() const {
  std::vector<FieldBatch> out(selected_.size());
  for (size_t i = 0; i < selected_.size(); ++i) {
    const FieldSpec& spec = *selected_[i].spec;
    FieldBatch& fb = out[i];
    fb.spec = &spec;
    fb.shape = {0};
    switch (spec.kind) {
      case FieldKind::kMask:
        fb.shape = {0, out_h_, out_w_};
        break;
      case FieldKind::kArray:
      case FieldKind::kRows:
      case FieldKind::kBoxes:
        fb.shape.insert(fb.shape.end(), spec.shape.begin(), spec.shape.end());
        break;
      case FieldKind::kScalar:
      case FieldKind::kBytes:
      case FieldKind::kText:
        break;
    }
  }
  return out;
}

void FieldFill::begin(FieldBuffers* b) const {
  for (FieldBuffers::Field& f : b->fields) {
    f.rows = 0;
    if (!f.offsets.empty()) f.offsets[0] = 0;
  }
}

void FieldFill::add(FieldBuffers* b, uint32_t k, const SampleSource& source, uint64_t sample,
                    uint32_t src_h, uint32_t src_w, const SpatialTransform& t) const {
  const std::vector<FieldSpec>& specs = source_.fields();
  // Boxes first: which rows survive decides what their rows_of followers keep.
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    const FieldSpec& spec = specs[group.source_index];
    const FieldView v = checked_view(source, sample, group.source_index, spec);
    const size_t n = static_cast<size_t>(v.rows);
    if (n > UINT32_MAX) throw corrupt(spec, sample, std::to_string(n) + " boxes");
    grow(&b->boxes_in, 4 * n);
    if (n > 0) copy_out(b->boxes_in.data(), v.data, v.bytes, spec, sample);
    grow(&b->kept[g], n);
    float* out;
    FieldBuffers::Field* served = nullptr;
    if (group.selected >= 0) {
      served = &b->fields[group.selected];
      const size_t have = static_cast<size_t>(served->rows) * 16;
      served->data.reserve(have + 16 * n, have);
      out = reinterpret_cast<float*>(served->data.data() + have);
    } else {
      grow(&b->boxes_out, 4 * n);
      out = b->boxes_out.data();
    }
    const size_t m = t.boxes(b->boxes_in.data(), n, min_box_visibility_, out, b->kept[g].data());
    b->kept_count[g] = m;
    b->group_rows[g] = n;
    if (served != nullptr) {
      served->rows += m;
      served->offsets[k + 1] = static_cast<int64_t>(served->rows);
    }
  }
  for (size_t i = 0; i < selected_.size(); ++i) {
    const Selected& s = selected_[i];
    const FieldSpec& spec = *s.spec;
    FieldBuffers::Field& f = b->fields[i];
    if (spec.kind == FieldKind::kBoxes) continue;  // above
    const FieldView v = checked_view(source, sample, s.source_index, spec);
    switch (spec.kind) {
      case FieldKind::kMask: {
        if (v.rows != uint64_t{src_h} * src_w) {
          throw corrupt(spec, sample,
                        std::to_string(v.rows) + " mask elements, the image is " +
                            std::to_string(src_h) + "x" + std::to_string(src_w));
        }
        const uint32_t eb = element_bytes(spec.dtype);
        uint8_t* out = f.data.data() + size_t{k} * s.value_bytes;
        const CropBox& box = t.box();
        if (box.height == src_h && box.width == src_w && src_h == out_h_ && src_w == out_w_ &&
            !box.flip) {
          copy_out(out, v.data, v.bytes, spec, sample);  // as stored
          break;
        }
        // Only the crop window is read out of the source (row by row, guarded); the same
        // transform, relative to the window, then resamples it.
        const size_t row = size_t{box.width} * eb, stride = size_t{src_w} * eb;
        grow(&b->window, size_t{box.height} * row);
        for (uint32_t y = 0; y < box.height; ++y) {
          copy_out(b->window.data() + y * row,
                   v.data + (size_t{box.y} + y) * stride + size_t{box.x} * eb, row, spec, sample);
        }
        const SpatialTransform local(CropBox{0, 0, box.height, box.width, box.flip}, box.height,
                                     box.width, out_h_, out_w_);
        local.mask(b->window.data(), eb, out);
        break;
      }
      case FieldKind::kScalar:
      case FieldKind::kArray:
        if (v.rows != 1) {
          throw corrupt(spec, sample, std::to_string(v.rows) + " rows for a fixed-size value");
        }
        copy_out(f.data.data() + size_t{k} * s.value_bytes, v.data, v.bytes, spec, sample);
        break;
      case FieldKind::kRows:
      case FieldKind::kBytes:
      case FieldKind::kText: {
        const size_t row = static_cast<size_t>(spec.row_bytes());
        const size_t have = static_cast<size_t>(f.rows) * row;
        if (s.group < 0) {
          f.data.reserve(have + v.bytes, have);
          if (v.bytes > 0) copy_out(f.data.data() + have, v.data, v.bytes, spec, sample);
          if (spec.kind == FieldKind::kText && !detail::valid_utf8(f.data.data() + have, v.bytes)) {
            throw corrupt(spec, sample, "text is not valid UTF-8");
          }
          f.rows += v.rows;
        } else {
          if (v.rows != b->group_rows[s.group]) {
            throw corrupt(spec, sample,
                          std::to_string(v.rows) + " rows for " +
                              std::to_string(b->group_rows[s.group]) + " boxes of '" +
                              spec.rows_of + "'");
          }
          grow(&b->value, static_cast<size_t>(v.bytes));
          if (v.bytes > 0) copy_out(b->value.data(), v.data, v.bytes, spec, sample);
          const size_t m = b->kept_count[s.group];
          f.data.reserve(have + m * row, have);
          const uint32_t* kept = b->kept[s.group].data();
          for (size_t j = 0; j < m; ++j) {
            std::memcpy(f.data.data() + have + j * row, b->value.data() + size_t{kept[j]} * row,
                        row);
          }
          f.rows += m;
        }
        f.offsets[k + 1] = static_cast<int64_t>(f.rows);
        break;
      }
      case FieldKind::kBoxes:
        break;
    }
  }
}

void FieldFill::finish(FieldBuffers* b, uint32_t count, std::vector<FieldBatch>* out) const {
  for (size_t i = 0; i < selected_.size(); ++i) {
    const Selected& s = selected_[i];
    FieldBuffers::Field& f = b->fields[i];
    FieldBatch& fb = (*out)[i];
    fb.data = f.data.data();
    if (s.spec->variable()) {
      fb.offsets = f.offsets.data();
      fb.rows = f.rows;
      fb.bytes = f.rows * s.spec->row_bytes();
    } else {
      fb.offsets = nullptr;
      fb.rows = count;
      fb.bytes = uint64_t{count} * s.value_bytes;
    }
    fb.shape[0] = fb.rows;
  }
}

}  // namespace detail
}  // namespace dscache
