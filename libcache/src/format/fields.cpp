// Field kinds and types: their stored names, sizes and the rules a field spec must follow.
#include "dscache/fields.h"

#include <cstring>
#include <set>

#include "dscache/error.h"

namespace dscache {
namespace {

constexpr EnumName<FieldKind> kFieldKind[] = {
    {FieldKind::kMask, "mask"},   {FieldKind::kScalar, "scalar"}, {FieldKind::kArray, "array"},
    {FieldKind::kBoxes, "boxes"}, {FieldKind::kRows, "rows"},     {FieldKind::kBytes, "bytes"},
    {FieldKind::kText, "text"},
};
constexpr EnumName<FieldType> kFieldType[] = {
    {FieldType::kUint8, "uint8"},
    {FieldType::kUint16, "uint16"},
    {FieldType::kInt64, "int64"},
    {FieldType::kFloat32, "float32"},
};

// Names a field may not take: they are the sample's other parts (and would collide with the
// images shards' file names).
const std::set<std::string> kReservedNames = {"image", "images", "label", "index"};

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64 || n[0] < 'a' || n[0] > 'z') return false;
  for (char c : n) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace

constexpr EnumTable<FieldKind> kFieldKindNames(kFieldKind);
constexpr EnumTable<FieldType> kFieldTypeNames(kFieldType);

const char* to_string(FieldKind k) { return kFieldKindNames.to_string(k); }
const char* to_string(FieldType t) { return kFieldTypeNames.to_string(t); }

double element_at(FieldType t, const uint8_t* data, uint64_t k) {
  switch (t) {
    case FieldType::kUint8:
      return data[k];
    case FieldType::kUint16: {
      uint16_t v;
      std::memcpy(&v, data + 2 * k, 2);
      return v;
    }
    case FieldType::kInt64: {
      int64_t v;
      std::memcpy(&v, data + 8 * k, 8);
      return static_cast<double>(v);
    }
    case FieldType::kFloat32: {
      float v;
      std::memcpy(&v, data + 4 * k, 4);
      return v;
    }
  }
  return 0;
}

uint32_t element_bytes(FieldType t) {
  switch (t) {
    case FieldType::kUint8:
      return 1;
    case FieldType::kUint16:
      return 2;
    case FieldType::kInt64:
      return 8;
    case FieldType::kFloat32:
      return 4;
  }
  return 0;
}

const char* npy_descr(FieldType t) {
  switch (t) {
    case FieldType::kUint8:
      return "|u1";
    case FieldType::kUint16:
      return "<u2";
    case FieldType::kInt64:
      return "<i8";
    case FieldType::kFloat32:
      return "<f4";
  }
  return "?";
}

bool FieldSpec::variable() const {
  return kind == FieldKind::kBoxes || kind == FieldKind::kRows || kind == FieldKind::kBytes ||
         kind == FieldKind::kText;
}

uint64_t FieldSpec::row_elements() const {
  uint64_t n = 1;
  if (kind == FieldKind::kArray || kind == FieldKind::kRows || kind == FieldKind::kBoxes) {
    for (uint32_t d : shape) n *= d;
  }
  return n;
}

bool operator==(const FieldSpec& a, const FieldSpec& b) {
  return a.name == b.name && a.kind == b.kind && a.dtype == b.dtype && a.shape == b.shape &&
         a.rows_of == b.rows_of && a.classes == b.classes && a.allow_nonfinite == b.allow_nonfinite;
}

void validate_field(const FieldSpec& f, const std::string& context) {
  const std::string who = "field '" + f.name + "'";
  auto fail = [&](const std::string& reason) {
    throw Error(ErrorKind::kInvalidArgument, context, who + ": " + reason);
  };
  if (!valid_name(f.name)) {
    fail("a name is 1..64 of [a-z0-9_], starting with a letter");
  }
  if (kReservedNames.count(f.name)) fail("the name is reserved (image, images, label, index)");
  if (kFieldKindNames.to_string(f.kind)[0] == '?') fail("unknown kind");
  if (kFieldTypeNames.to_string(f.dtype)[0] == '?') fail("unknown dtype");
  const std::string kind = to_string(f.kind);
  auto need_types = [&](std::initializer_list<FieldType> ok, const char* names) {
    for (FieldType t : ok) {
      if (t == f.dtype) return;
    }
    fail("kind " + kind + " needs dtype " + names + ", not " + to_string(f.dtype));
  };
  switch (f.kind) {
    case FieldKind::kMask:
      need_types({FieldType::kUint8, FieldType::kUint16}, "uint8 or uint16");
      break;
    case FieldKind::kScalar:
      need_types({FieldType::kInt64, FieldType::kFloat32}, "int64 or float32");
      break;
    case FieldKind::kBoxes:
      need_types({FieldType::kFloat32}, "float32");
      break;
    case FieldKind::kBytes:
    case FieldKind::kText:
      need_types({FieldType::kUint8}, "uint8");
      break;
    case FieldKind::kArray:
    case FieldKind::kRows:
      break;
  }
  if (f.kind == FieldKind::kBoxes) {
    if (f.shape != std::vector<uint32_t>{4}) fail("kind boxes has shape [4]");
  } else if (f.kind == FieldKind::kArray || f.kind == FieldKind::kRows) {
    if (f.kind == FieldKind::kArray && f.shape.empty()) fail("kind array needs a shape");
    if (f.shape.size() > 4) fail("a shape has at most 4 dimensions");
    uint64_t n = 1;
    for (uint32_t d : f.shape) {
      if (d == 0) fail("every dimension of the shape must be > 0");
      n *= d;
      if (n > (uint64_t{1} << 32)) fail("the shape holds more than 2^32 elements");
    }
  } else if (!f.shape.empty()) {
    fail("kind " + kind + " has shape []");
  }
  if (!f.rows_of.empty() && f.kind != FieldKind::kRows) fail("only kind rows may have rows_of");
  if (f.allow_nonfinite && (f.dtype != FieldType::kFloat32 || f.kind == FieldKind::kBoxes)) {
    fail("allow_nonfinite applies to float32 fields other than boxes (which are always finite)");
  }
}

void validate_fields(const std::vector<FieldSpec>& specs, const std::string& context) {
  std::set<std::string> names;
  for (const FieldSpec& f : specs) {
    validate_field(f, context);
    if (!names.insert(f.name).second) {
      throw Error(ErrorKind::kInvalidArgument, context, "field '" + f.name + "' is listed twice");
    }
  }
  for (const FieldSpec& f : specs) {
    if (f.rows_of.empty()) continue;
    bool found = false;
    for (const FieldSpec& g : specs)
      found = found || (g.name == f.rows_of && g.kind == FieldKind::kBoxes);
    if (!found) {
      throw Error(ErrorKind::kInvalidArgument, context,
                  "field '" + f.name + "': rows_of '" + f.rows_of + "' is not a boxes field");
    }
  }
}

}  // namespace dscache
