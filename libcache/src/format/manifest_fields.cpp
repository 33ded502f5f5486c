// manifest.json's fields (format_version 3): the reader's steps for the specs and for each
// shard's field files (manifest_reader.h).
#include <limits>
#include <string>
#include <utility>

#include "dscache/enum_table.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/manifest.h"
#include "format/manifest_reader.h"

namespace dscache {
namespace detail {

using Reader = ManifestReader;

// fields (version 3): the specs, each valid on its own and together.
void read_fields(const Reader& r, const Json& j, Manifest* m) {
  const Json& fields = r.array(j, "", "fields");
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string where = Reader::index("fields", i);
    const Json& v = fields[i];
    if (!v.is_object()) r.fail(where + " is not an object");
    FieldSpec f;
    f.name = r.str(v, where, "name");
    f.kind = r.choice(v, where, "kind", kFieldKindNames);
    f.dtype = r.choice(v, where, "dtype", kFieldTypeNames);
    const Json& shape = r.array(v, where, "shape");
    for (size_t d = 0; d < shape.size(); ++d) {
      const uint64_t n = r.u64(shape[d], Reader::index(where + ".shape", d));
      if (n > std::numeric_limits<uint32_t>::max()) r.fail(where + ".shape is too large");
      f.shape.push_back(static_cast<uint32_t>(n));
    }
    if (v.contains("rows_of")) f.rows_of = r.str(v, where, "rows_of");
    if (v.contains("allow_nonfinite")) {
      f.allow_nonfinite = r.boolean(v, where, "allow_nonfinite");
    }
    if (v.contains("classes")) {
      const Json& classes = r.array(v, where, "classes");
      for (size_t c = 0; c < classes.size(); ++c) {
        f.classes.push_back(r.str(classes[c], Reader::index(where + ".classes", c)));
      }
    }
    m->fields.push_back(std::move(f));
  }
  try {
    validate_fields(m->fields, "fields");
  } catch (const Error& e) {
    r.fail(e.reason());
  }
}

// shards[i].fields (version 3): one entry per field, each with its offsets exactly when the
// field has them.
void read_shard_fields(const Reader& r, const Json& s, const std::string& where, const Manifest& m,
                       ShardEntry* e) {
  const Json& fields = r.member(s, where, "fields");
  const std::string fw = Reader::join(where, "fields");
  if (!fields.is_object()) r.fail(fw + " is not an object");
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    bool known = false;
    for (const FieldSpec& f : m.fields) known = known || f.name == it.key();
    if (!known) r.fail(fw + " names '" + it.key() + "', which is not in fields");
  }
  for (const FieldSpec& f : m.fields) {
    const std::string at = fw + "." + f.name;
    const Json& v = r.member(fields, fw, f.name.c_str());
    if (!v.is_object()) r.fail(at + " is not an object");
    FieldFiles files;
    files.values = r.file_entry(v, at, "values");
    if (has_offsets(f, m.layout)) {
      files.offsets = r.file_entry(v, at, "offsets");
    } else if (v.contains("offsets")) {
      r.fail(at + ".offsets is present, but field '" + f.name + "' has fixed-size values");
    }
    e->fields.push_back(std::move(files));
  }
}

}  // namespace detail
}  // namespace dscache
