// EnumTable: the one list of an options enum's spellings, for parsing, printing and messages.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "dscache/error.h"

namespace dscache {

// One spelling of one value. Names are stored (manifest, checkpoints) or typed by users
// (command lines, Python keywords): never rename one.
template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// A view of a static array of EnumName: owns nothing, copies nothing, and is constexpr, so a
// table defined as a namespace-scope constant is ready before any code runs. Immutable, so
// thread-safe. Names match exactly (case-sensitive): "Fixed" is not "fixed".
//
//   constexpr EnumName<Storage> kStorage[] = {{Storage::kNpy, "npy"}, {Storage::kHdf5, "hdf5"}};
//   constexpr EnumTable<Storage> kStorageNames(kStorage);
//   kStorageNames.parse("hdf5", "--storage");  // Storage::kHdf5
//   kStorageNames.parse("zarr", "--storage");  // throws: --storage: 'zarr' is not one of ...
template <typename E>
class EnumTable {
 public:
  template <size_t N>
  constexpr explicit EnumTable(const EnumName<E> (&names)[N]) : names_(names), size_(N) {}

  // The name of `value`; "?" for a value outside the table (an integer cast to E).
  const char* to_string(E value) const {
    for (size_t i = 0; i < size_; ++i) {
      if (names_[i].value == value) return names_[i].name;
    }
    return "?";
  }

  // The value spelled exactly `text`, or nullopt.
  std::optional<E> find(std::string_view text) const {
    for (size_t i = 0; i < size_; ++i) {
      if (text == names_[i].name) return names_[i].value;
    }
    return std::nullopt;
  }

  // find(text), or throws Error(kInvalidArgument, "", unknown(text, field)).
  E parse(std::string_view text, std::string_view field) const {
    if (std::optional<E> v = find(text)) return *v;
    throw Error(ErrorKind::kInvalidArgument, "", unknown(text, field));
  }

  // Every name in table order, comma-separated: "npy, hdf5".
  std::string names() const {
    std::string out;
    for (size_t i = 0; i < size_; ++i) {
      if (i > 0) out += ", ";
      out += names_[i].name;
    }
    return out;
  }

  // The message for a spelling that is not in the table, naming the field:
  // "FIELD: 'TEXT' is not one of npy, hdf5".
  std::string unknown(std::string_view text, std::string_view field) const {
    return std::string(field) + ": '" + std::string(text) + "' is not one of " + names();
  }

  size_t size() const { return size_; }
  const EnumName<E>* begin() const { return names_; }
  const EnumName<E>* end() const { return names_ + size_; }

 private:
  const EnumName<E>* names_;
  size_t size_;
};

}  // namespace dscache
