// Cache's fields: the field files mapped at open, and one sample's value served from them.
#include <string>

#include "format/field_files.h"
#include "read/cache_impl.h"

namespace dscache {

void map_fields(Cache::Impl& c, size_t k, std::vector<FieldShardFile>* files) {
  const Manifest& m = c.manifest;
  if (c.value_bytes.empty()) {
    for (const FieldSpec& f : m.fields) {
      c.value_bytes.push_back(detail::fixed_value_bytes(f, m.layout, m.height, m.width));
    }
    c.fields.resize(m.shards.size());
  }
  for (size_t f = 0; f < files->size(); ++f) {
    FieldShardFile& file = (*files)[f];
    FieldState st;
    st.offsets = std::move(file.offsets);
    const uint64_t file_bytes = m.shards[k].fields[f].values.bytes;
    if (file.data_bytes > 0) {
      st.mapping = detail::MappedRegion::map_fd(file.values.fd(), file.values.path(), file_bytes);
      st.mapping.advise(madvice(c.options.hint));
      st.data = st.mapping.data() + file.data_offset;
    }
    c.fields[k].push_back(std::move(st));
  }
}

const std::vector<FieldSpec>& Cache::fields() const { return impl_->manifest.fields; }

FieldView Cache::field(uint64_t i, size_t f) const {
  const Impl& c = *impl_;
  c.check_index(i);
  if (f >= c.manifest.fields.size()) {
    throw Error(ErrorKind::kInvalidArgument, c.dir,
                "field " + std::to_string(f) + " does not exist (the cache has " +
                    std::to_string(c.manifest.fields.size()) + ")");
  }
  const ShardState& s = c.find_shard(i);
  const size_t k = static_cast<size_t>(&s - c.shards.data());
  const FieldState& st = c.fields[k][f];
  const uint64_t j = i - s.entry.first;
  if (st.offsets.empty()) {
    const uint64_t n = c.value_bytes[f];
    const FieldSpec& spec = c.manifest.fields[f];
    return FieldView{st.data + j * n, n,
                     spec.kind == FieldKind::kMask ? uint64_t{c.shape.height} * c.shape.width : 1};
  }
  const uint64_t row = c.manifest.fields[f].kind == FieldKind::kMask
                           ? element_bytes(c.manifest.fields[f].dtype)
                           : c.manifest.fields[f].row_bytes();
  const uint64_t first = static_cast<uint64_t>(st.offsets[j]);
  const uint64_t rows = static_cast<uint64_t>(st.offsets[j + 1]) - first;
  return FieldView{st.data == nullptr ? nullptr : st.data + first * row, rows * row, rows};
}

void Cache::copy_field(uint64_t i, size_t f, uint8_t* out) const {
  const FieldView v = field(i, f);
  if (v.bytes == 0) return;
  const Impl& c = *impl_;
  const size_t k = static_cast<size_t>(&c.find_shard(i) - c.shards.data());
  const std::string path = c.files->path(c.manifest.shards[k].fields[f].values.file);
  detail::guarded_copy(out, v.data, static_cast<size_t>(v.bytes), path);
  // FORMAT.md: text is UTF-8. A damaged value is the cache's fault: Corruption naming the file
  // and the sample (Python's Cache.field would otherwise raise a bare UnicodeDecodeError).
  const FieldSpec& spec = c.manifest.fields[f];
  if (spec.kind == FieldKind::kText && !detail::valid_utf8(out, v.bytes)) {
    throw Error(
        ErrorKind::kCorruption, path,
        "sample " + std::to_string(i) + ": field '" + spec.name + "': text is not valid UTF-8");
  }
}

size_t Cache::field_index(const std::string& name) const {
  const auto& fields = impl_->manifest.fields;
  std::string known;
  for (size_t f = 0; f < fields.size(); ++f) {
    if (fields[f].name == name) return f;
    known += (f ? ", " : "") + fields[f].name;
  }
  throw Error(ErrorKind::kInvalidArgument, impl_->dir,
              "no field '" + name + "' (the cache has: " + (known.empty() ? "none" : known) + ")");
}

}  // namespace dscache
