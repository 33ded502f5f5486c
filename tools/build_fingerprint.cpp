#include "build_fingerprint.h"

namespace dscache {
namespace {

using json = nlohmann::json;

json fingerprint(const std::string& kind, const std::string& root, const std::string& labels,
                 uint64_t entries, uint64_t digest, const std::vector<std::string>& classes,
                 const BuildRecipe& r, Storage storage, Codec codec, uint32_t part_index,
                 uint32_t part_count, const std::vector<FieldSpec>& fields) {
  json fp{{"source_kind", kind},
          {"source_root", root},
          {"source_labels", labels},
          {"source_entries", entries},
          {"source_digest", digest},
          {"classes", classes},
          {"storage", to_string(storage)},
          {"height", r.height},
          {"width", r.width},
          {"channels", r.channels},
          {"resize", to_string(r.resize)},
          {"reduced_decode", r.reduced_decode},
          {"max_pixels", r.max_pixels},
          {"shard_bytes", r.shard_bytes},
          {"layout", r.max_side > 0 ? "ragged" : "fixed"},
          {"max_side", r.max_side}};
  if (r.shuffled) fp["shuffle_seed"] = r.shuffle_seed;  // absent otherwise, as before --shuffle
  if (codec != Codec::kRaw) {                           // absent for raw, as before --codec
    fp["codec"] = to_string(codec);
    fp["quality"] = r.quality;
  }
  if (r.alpha != AlphaMode::kDrop) fp["alpha"] = to_string(r.alpha);  // absent, as before --alpha
  if (r.alpha == AlphaMode::kComposite) {
    fp["background"] = {r.background[0], r.background[1], r.background[2]};
  }
  if (part_count != 0) fp["part"] = {part_index, part_count};  // absent, as before --part
  if (!fields.empty()) {  // absent without fields, as before them
    json a = json::array();
    for (const FieldSpec& f : fields) {
      a.push_back({f.name, to_string(f.kind), to_string(f.dtype), f.shape, f.rows_of, f.classes});
    }
    fp["fields"] = std::move(a);
  }
  return fp;
}

}  // namespace

json build_fingerprint(const SourceListing& src, const BuildRecipe& r, Storage storage, Codec codec,
                       uint32_t part_index, uint32_t part_count) {
  return fingerprint(src.kind, src.root, src.labels_path, src.entries.size(), src.digest,
                     src.classes, r, storage, codec, part_index, part_count, src.fields);
}

json build_fingerprint(const Manifest& m) {
  return fingerprint(m.source.kind, m.source.root, m.source.labels, m.source.entries,
                     m.source.digest, m.classes, m.recipe, m.storage, m.codec,
                     m.has_part ? m.part.index : 0, m.has_part ? m.part.count : 0, m.fields);
}

}  // namespace dscache
