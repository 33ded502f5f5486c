// The manifest reader's field accessors (internal to manifest.cpp's parser): each failure is
// Corruption naming the field's full path.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "dscache/enum_table.h"
#include "dscache/error.h"
#include "dscache/manifest.h"

namespace dscache {
namespace detail {

using Json = nlohmann::json;

// Reads fields out of the parsed document; every failure names the field's full path, e.g.
// "shards[3].first". Not thread-safe (holds the manifest path by reference).
class ManifestReader {
 public:
  explicit ManifestReader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& reason) const {
    throw Error(ErrorKind::kCorruption, path_, reason);
  }

  const Json& member(const Json& obj, const std::string& where, const char* key) const {
    const std::string field = join(where, key);
    if (!obj.is_object()) fail(where + " is not an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(field + " is missing");
    return *it;
  }

  uint64_t u64(const Json& v, const std::string& field) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) {
      fail(field + " is " + std::to_string(v.get<int64_t>()) + ", expected a non-negative integer");
    }
    fail(field + " is " + type_of(v) + ", expected a non-negative integer");
  }

  uint64_t u64(const Json& obj, const std::string& where, const char* key) const {
    return u64(member(obj, where, key), join(where, key));
  }

  uint32_t u32(const Json& obj, const std::string& where, const char* key) const {
    const uint64_t v = u64(obj, where, key);
    if (v > std::numeric_limits<uint32_t>::max()) {
      fail(join(where, key) + " is " + std::to_string(v) + ", larger than 4294967295");
    }
    return static_cast<uint32_t>(v);
  }

  std::string str(const Json& v, const std::string& field) const {
    if (!v.is_string()) fail(field + " is " + type_of(v) + ", expected a string");
    return v.get<std::string>();
  }

  std::string str(const Json& obj, const std::string& where, const char* key) const {
    return str(member(obj, where, key), join(where, key));
  }

  // A string naming one value of `table`; any other string fails listing the table's names.
  template <typename E>
  E choice(const Json& obj, const std::string& where, const char* key,
           const EnumTable<E>& table) const {
    const std::string s = str(obj, where, key);
    if (std::optional<E> v = table.find(s)) return *v;
    fail(join(where, key) + " is '" + s + "', expected one of " + table.names());
  }

  bool boolean(const Json& obj, const std::string& where, const char* key) const {
    const Json& v = member(obj, where, key);
    if (!v.is_boolean()) fail(join(where, key) + " is " + type_of(v) + ", expected true or false");
    return v.get<bool>();
  }

  uint64_t hex(const Json& obj, const std::string& where, const char* key) const {
    const std::string field = join(where, key);
    const std::string s = str(obj, where, key);
    uint64_t v = 0;
    bool ok = s.size() == 16;
    for (char c : s) {
      if (!ok) break;
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint64_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint64_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint64_t>(c - 'A' + 10);
      } else {
        ok = false;
      }
    }
    if (!ok) fail(field + " is '" + s + "', expected 16 hex digits");
    return v;
  }

  const Json& array(const Json& obj, const std::string& where, const char* key) const {
    const Json& v = member(obj, where, key);
    if (!v.is_array()) fail(join(where, key) + " is " + type_of(v) + ", expected an array");
    return v;
  }

  // A name inside the cache directory: never a path that could escape it.
  std::string file_name(const Json& obj, const std::string& where, const char* key) const {
    const std::string field = join(where, key);
    const std::string s = str(obj, where, key);
    if (s.empty()) fail(field + " is empty");
    if (s == "." || s == "..") fail(field + " is '" + s + "', not a file name");
    if (s.find('/') != std::string::npos) fail(field + " is '" + s + "', must not contain '/'");
    if (s.find('\0') != std::string::npos) fail(field + " contains a NUL character");
    return s;
  }

  FileEntry file_entry(const Json& obj, const std::string& where, const char* key) const {
    const std::string field = join(where, key);
    const Json& v = member(obj, where, key);
    if (!v.is_object()) fail(field + " is " + type_of(v) + ", expected an object");
    FileEntry f;
    f.file = file_name(v, field, "file");
    f.bytes = u64(v, field, "bytes");
    f.xxh64 = hex(v, field, "xxh64");
    return f;
  }

  static std::string join(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : where + "." + key;
  }

  static std::string index(const std::string& field, size_t i) {
    return field + "[" + std::to_string(i) + "]";
  }

 private:
  static std::string type_of(const Json& v) {
    if (v.is_number_float()) return "a float";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_null()) return "null";
    if (v.is_array()) return "an array";
    return "an object";
  }

  const std::string& path_;
};

// The fields parts of a version 3 manifest (manifest_fields.cpp): the specs, each valid on its
// own and together, and shard entry `e`'s files of each field (offsets exactly when the field
// has them).
void read_fields(const ManifestReader& r, const Json& j, Manifest* m);
void read_shard_fields(const ManifestReader& r, const Json& s, const std::string& where,
                       const Manifest& m, ShardEntry* e);

}  // namespace detail
}  // namespace dscache
