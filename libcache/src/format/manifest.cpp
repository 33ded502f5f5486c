// manifest.json: serialization and validation (nlohmann/json stays inside libcache/src).
#include "dscache/manifest.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/enum_table.h"
#include "dscache/error.h"
#include "format/manifest_reader.h"
#include "json/parse.h"

namespace dscache {

int format_version_for(Codec c, bool has_fields) {
  if (has_fields) return 3;
  return c == Codec::kRaw ? 1 : 2;
}

const char* channel_order_for(uint32_t channels) {
  switch (channels) {
    case 1:
      return "L";
    case 3:
      return "RGB";
    case 4:
      return "RGBA";
    default:
      return nullptr;
  }
}

std::string field_file_name(const std::string& field, uint64_t shard, bool offsets) {
  char num[24];
  std::snprintf(num, sizeof num, "%05llu", static_cast<unsigned long long>(shard));
  return field + (offsets ? "-offsets-" : "-") + num + ".npy";
}

bool has_offsets(const FieldSpec& f, Layout layout) {
  return f.variable() || (f.kind == FieldKind::kMask && layout == Layout::kRagged);
}

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // keeps the documented key order on output
using Reader = detail::ManifestReader;

OrderedJson file_json(const FileEntry& f) {
  OrderedJson j;
  j["file"] = f.file;
  j["bytes"] = f.bytes;
  j["xxh64"] = hex64(f.xxh64);
  return j;
}

OrderedJson fields_json(const std::vector<FieldSpec>& fields) {
  OrderedJson a = OrderedJson::array();
  for (const FieldSpec& f : fields) {
    OrderedJson j;
    j["name"] = f.name;
    j["kind"] = to_string(f.kind);
    j["dtype"] = to_string(f.dtype);
    j["shape"] = f.shape;
    if (!f.rows_of.empty()) j["rows_of"] = f.rows_of;
    if (!f.classes.empty()) j["classes"] = f.classes;
    if (f.allow_nonfinite) j["allow_nonfinite"] = true;
    a.push_back(std::move(j));
  }
  return a;
}

OrderedJson shard_fields_json(const Manifest& m, const ShardEntry& s) {
  OrderedJson j = OrderedJson::object();
  for (size_t k = 0; k < m.fields.size() && k < s.fields.size(); ++k) {
    OrderedJson f;
    f["values"] = file_json(s.fields[k].values);
    if (has_offsets(m.fields[k], m.layout)) f["offsets"] = file_json(s.fields[k].offsets);
    j[m.fields[k].name] = std::move(f);
  }
  return j;
}

bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  if (b > std::numeric_limits<uint64_t>::max() - a) return true;
  *out = a + b;
  return false;
}

}  // namespace

std::string to_json(const Manifest& m) {
  OrderedJson j;
  j["format_version"] = m.format_version;
  j["layout"] = to_string(m.layout);
  j["storage"] = to_string(m.storage);
  if (m.format_version >= 2) j["codec"] = to_string(m.codec);
  if (m.format_version >= 3) j["fields"] = fields_json(m.fields);
  j["dtype"] = m.dtype;
  j["shape"] = OrderedJson::array({m.height, m.width, m.channels});
  j["channel_order"] = m.channel_order;
  j["count"] = m.count;
  j["classes"] = m.classes;
  j["class_counts"] = m.class_counts;
  OrderedJson shards = OrderedJson::array();
  for (const ShardEntry& s : m.shards) {
    OrderedJson e;
    e["file"] = s.file;
    e["first"] = s.first;
    e["count"] = s.count;
    e["bytes"] = s.bytes;
    e["xxh64"] = hex64(s.xxh64);
    if (m.format_version >= 3) e["fields"] = shard_fields_json(m, s);
    shards.push_back(std::move(e));
  }
  j["shards"] = std::move(shards);
  OrderedJson files;
  files["labels"] = file_json(m.labels);
  files["checksums"] = file_json(m.checksums);
  files["sources"] = file_json(m.sources);
  files["skips"] = file_json(m.skips);
  if (m.has_index()) files["index"] = file_json(m.index);
  j["files"] = std::move(files);
  j["skipped"] = m.skipped;
  OrderedJson source;
  source["kind"] = m.source.kind;
  source["root"] = m.source.root;
  source["labels"] = m.source.labels;
  source["entries"] = m.source.entries;
  source["digest"] = hex64(m.source.digest);
  j["source"] = std::move(source);
  OrderedJson recipe;
  recipe["height"] = m.recipe.height;
  recipe["width"] = m.recipe.width;
  recipe["channels"] = m.recipe.channels;
  recipe["resize"] = to_string(m.recipe.resize);
  recipe["reduced_decode"] = m.recipe.reduced_decode;
  recipe["max_pixels"] = m.recipe.max_pixels;
  recipe["shard_bytes"] = m.recipe.shard_bytes;
  recipe["max_side"] = m.recipe.max_side;
  if (m.recipe.shuffled) recipe["shuffle_seed"] = m.recipe.shuffle_seed;
  if (m.codec != Codec::kRaw) recipe["quality"] = m.recipe.quality;
  if (m.recipe.alpha != AlphaMode::kDrop) {  // absent for drop, as before --alpha
    recipe["alpha"] = to_string(m.recipe.alpha);
  }
  if (m.recipe.alpha == AlphaMode::kComposite) {
    const uint8_t* bg = m.recipe.background;
    recipe["background"] = OrderedJson::array({bg[0], bg[1], bg[2]});
  }
  j["recipe"] = std::move(recipe);
  if (m.transparent_known) j["transparent"] = m.transparent;
  j["tool_version"] = m.tool_version;
  j["created_utc"] = m.created_utc;
  if (m.has_part) {  // absent for a whole cache, as before --part
    OrderedJson part;
    part["index"] = m.part.index;
    part["count"] = m.part.count;
    part["first"] = m.part.first;
    part["entries"] = m.part.entries;
    j["part"] = std::move(part);
  }
  // Names come from file systems and may be any bytes: replace invalid UTF-8 rather than throw.
  return j.dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

namespace {

// The steps of manifest_from_json, in the order it runs them: each reads one part of the
// document into `m`, checking it against what the earlier steps read, and fails naming the field.

Json parse_document(const std::string& text, const std::string& path) {
  return parse_json<Json>(text, JsonOrigin{path, ErrorKind::kCorruption});
}

// The version first: a newer format may change anything else.
void read_version(const Reader& r, const Json& j, const std::string& path, Manifest* m) {
  const Json& version = r.member(j, "", "format_version");
  if (!version.is_number_integer()) r.fail("format_version is not an integer");
  const int64_t v = version.get<int64_t>();
  if (v > kFormatVersion) {
    throw Error(ErrorKind::kUnsupported, path,
                "format_version is " + std::to_string(v) + ", this library reads up to " +
                    std::to_string(kFormatVersion));
  }
  if (v < 1) r.fail("format_version is " + std::to_string(v) + ", expected >= 1");
  m->format_version = static_cast<int>(v);
}

// layout, storage, codec (version 2 added it; version 1 caches are raw), fields (version 3)
// and dtype.
void read_encoding(const Reader& r, const Json& j, Manifest* m) {
  m->layout = r.choice(j, "", "layout", kLayoutNames);
  m->storage = r.choice(j, "", "storage", kStorageNames);
  if (m->format_version >= 2) m->codec = r.choice(j, "", "codec", kCodecNames);
  if (m->format_version >= 3) {
    detail::read_fields(r, j, m);
  } else if (j.contains("fields")) {
    // Not an unknown key to ignore: a reader of this version would serve the images without
    // the targets the cache was built for (docs/FORMAT.md: absent below 3).
    r.fail("fields needs format_version 3, the manifest says " + std::to_string(m->format_version));
  }
  const int want = format_version_for(m->codec, !m->fields.empty());
  if (m->format_version != want) {
    r.fail("format_version is " + std::to_string(m->format_version) + ", expected " +
           std::to_string(want) + " for codec '" + to_string(m->codec) + "'" +
           (m->fields.empty() ? " without fields" : " with fields"));
  }
  m->dtype = r.str(j, "", "dtype");
  if (m->dtype != "uint8") r.fail("dtype is '" + m->dtype + "', expected 'uint8'");
}

// shape and channel_order. Ragged samples differ in size: the stored shape is [0, 0, C].
void read_shape(const Reader& r, const Json& j, Manifest* m) {
  const Json& shape = r.array(j, "", "shape");
  if (shape.size() != 3) {
    r.fail("shape has " + std::to_string(shape.size()) + " elements, expected [H, W, C]");
  }
  const bool ragged = m->layout == Layout::kRagged;
  uint32_t dims[3];
  for (size_t i = 0; i < 3; ++i) {
    const std::string field = Reader::index("shape", i);
    const uint64_t d = r.u64(shape[i], field);
    if (ragged && i < 2) {
      if (d != 0) {
        r.fail(field + " is " + std::to_string(d) +
               ", expected 0 for the ragged layout (shape [0, 0, C])");
      }
    } else if (d == 0 || d > std::numeric_limits<uint32_t>::max()) {
      r.fail(field + " is " + std::to_string(d) + ", expected a positive 32-bit integer");
    }
    dims[i] = static_cast<uint32_t>(d);
  }
  m->height = dims[0];
  m->width = dims[1];
  m->channels = dims[2];
  const char* want_order = channel_order_for(m->channels);
  if (want_order == nullptr) {
    r.fail("shape[2] is " + std::to_string(m->channels) + ", expected 1, 3 or 4 channels");
  }
  m->channel_order = r.str(j, "", "channel_order");
  if (m->channel_order != want_order) {
    r.fail("channel_order is '" + m->channel_order + "', expected '" + want_order + "' for " +
           std::to_string(m->channels) + " channels");
  }
}

// classes and class_counts, against count.
void read_classes(const Reader& r, const Json& j, Manifest* m) {
  const Json& classes = r.array(j, "", "classes");
  for (size_t i = 0; i < classes.size(); ++i) {
    m->classes.push_back(r.str(classes[i], Reader::index("classes", i)));
  }
  const Json& class_counts = r.array(j, "", "class_counts");
  uint64_t sum = 0;
  for (size_t i = 0; i < class_counts.size(); ++i) {
    const std::string field = Reader::index("class_counts", i);
    const uint64_t c = r.u64(class_counts[i], field);
    if (add_overflows(sum, c, &sum)) r.fail(field + " makes the class counts overflow");
    m->class_counts.push_back(c);
  }
  if (m->class_counts.size() != m->classes.size()) {
    r.fail("class_counts has " + std::to_string(m->class_counts.size()) + " entries, classes has " +
           std::to_string(m->classes.size()));
  }
  // An unlabeled cache has neither; otherwise every sample belongs to exactly one class.
  if (!m->classes.empty() && sum != m->count) {
    r.fail("class_counts sum to " + std::to_string(sum) + ", count is " + std::to_string(m->count));
  }
}

// shards: contiguous, in order, covering [0, count).
void read_shards(const Reader& r, const Json& j, Manifest* m) {
  const Json& shards = r.array(j, "", "shards");
  uint64_t next = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string where = Reader::index("shards", i);
    const Json& s = shards[i];
    if (!s.is_object()) r.fail(where + " is not an object");
    ShardEntry e;
    e.file = r.file_name(s, where, "file");
    e.first = r.u64(s, where, "first");
    e.count = r.u64(s, where, "count");
    e.bytes = r.u64(s, where, "bytes");
    e.xxh64 = r.hex(s, where, "xxh64");
    if (m->format_version >= 3) {
      detail::read_shard_fields(r, s, where, *m, &e);
    } else if (s.contains("fields")) {
      r.fail(where + ".fields needs format_version 3, the manifest says " +
             std::to_string(m->format_version));
    }
    if (e.first != next) {
      r.fail(where + ".first is " + std::to_string(e.first) + ", expected " + std::to_string(next));
    }
    if (add_overflows(next, e.count, &next)) r.fail(where + ".count overflows the sample index");
    m->shards.push_back(std::move(e));
  }
  if (next != m->count) {
    r.fail("shards cover " + std::to_string(next) + " samples, count is " +
           std::to_string(m->count));
  }
}

// files: the side files, with the index exactly when the layout and codec need one.
void read_files(const Reader& r, const Json& j, Manifest* m) {
  const Json& files = r.member(j, "", "files");
  if (!files.is_object()) r.fail("files is not an object");
  m->labels = r.file_entry(files, "files", "labels");
  m->checksums = r.file_entry(files, "files", "checksums");
  m->sources = r.file_entry(files, "files", "sources");
  m->skips = r.file_entry(files, "files", "skips");
  if (files.contains("index")) {
    if (!m->has_index()) {
      r.fail("files.index is present, but only the ragged layout and JPEG caches have an index");
    }
    m->index = r.file_entry(files, "files", "index");
  } else if (m->has_index()) {
    r.fail(m->layout == Layout::kRagged
               ? "files.index is missing (the ragged layout needs its index)"
               : "files.index is missing (a JPEG cache needs its index)");
  }
}

void read_source(const Reader& r, const Json& j, Manifest* m) {
  const Json& source = r.member(j, "", "source");
  if (!source.is_object()) r.fail("source is not an object");
  m->source.kind = r.str(source, "source", "kind");
  m->source.root = r.str(source, "source", "root");
  m->source.labels = r.str(source, "source", "labels");
  m->source.entries = r.u64(source, "source", "entries");
  m->source.digest = r.hex(source, "source", "digest");
}

void read_recipe(const Reader& r, const Json& j, Manifest* m) {
  const Json& recipe = r.member(j, "", "recipe");
  if (!recipe.is_object()) r.fail("recipe is not an object");
  BuildRecipe& b = m->recipe;
  b.height = r.u32(recipe, "recipe", "height");
  b.width = r.u32(recipe, "recipe", "width");
  b.channels = r.u32(recipe, "recipe", "channels");
  b.resize = r.choice(recipe, "recipe", "resize", kResizePolicyNames);
  b.reduced_decode = r.boolean(recipe, "recipe", "reduced_decode");
  b.max_pixels = r.u64(recipe, "recipe", "max_pixels");
  b.shard_bytes = r.u64(recipe, "recipe", "shard_bytes");
  // Optional: caches written before the ragged layout existed have no max_side (= 0, fixed).
  if (recipe.contains("max_side")) b.max_side = r.u32(recipe, "recipe", "max_side");
  if (recipe.contains("shuffle_seed")) {
    b.shuffled = true;
    b.shuffle_seed = r.u64(recipe, "recipe", "shuffle_seed");
  }
  if (m->codec == Codec::kJpeg) {
    b.quality = r.u32(recipe, "recipe", "quality");
    if (b.quality < 1 || b.quality > 100) {
      r.fail("recipe.quality is " + std::to_string(b.quality) + ", expected 1..100");
    }
  }
  if (m->layout == Layout::kRagged && b.max_side == 0) {
    r.fail("recipe.max_side is 0, expected > 0 for the ragged layout");
  }
  // Optional: absent for drop (and in caches written before --alpha).
  if (recipe.contains("alpha")) b.alpha = r.choice(recipe, "recipe", "alpha", kAlphaModeNames);
  if ((b.alpha == AlphaMode::kKeep) != (m->channels == 4)) {
    r.fail(std::string("recipe.alpha is '") + to_string(b.alpha) + "' with " +
           std::to_string(m->channels) + " channels: 4 channels (RGBA) go with alpha 'keep' only");
  }
  if (b.alpha == AlphaMode::kComposite) {
    const Json& bg = r.array(recipe, "recipe", "background");
    if (bg.size() != 3)
      r.fail("recipe.background has " + std::to_string(bg.size()) +
             " elements, expected [R, G, B]");
    for (size_t i = 0; i < 3; ++i) {
      const std::string field = Reader::index("recipe.background", i);
      const uint64_t v = r.u64(bg[i], field);
      if (v > 255) r.fail(field + " is " + std::to_string(v) + ", expected 0..255");
      b.background[i] = static_cast<uint8_t>(v);
    }
  }
}

// part: only in a part of a partitioned build; its slice must fit the source's listing.
void read_part(const Reader& r, const Json& j, Manifest* m) {
  if (!j.contains("part")) return;
  const Json& part = r.member(j, "", "part");
  if (!part.is_object()) r.fail("part is not an object");
  m->has_part = true;
  PartRecord& p = m->part;
  p.index = r.u32(part, "part", "index");
  p.count = r.u32(part, "part", "count");
  p.first = r.u64(part, "part", "first");
  p.entries = r.u64(part, "part", "entries");
  if (p.index >= p.count) {
    r.fail("part.index is " + std::to_string(p.index) + ", expected < part.count (" +
           std::to_string(p.count) + ")");
  }
  uint64_t end = 0;
  if (add_overflows(p.first, p.entries, &end) || end > m->source.entries) {
    r.fail("part covers positions past source.entries (" + std::to_string(m->source.entries) + ")");
  }
  if (m->count + m->skipped != p.entries) {
    r.fail("part.entries is " + std::to_string(p.entries) + ", count + skipped is " +
           std::to_string(m->count + m->skipped));
  }
}

}  // namespace

Manifest manifest_from_json(const std::string& text, const std::string& path) {
  const Json j = parse_document(text, path);
  Reader r(path);
  if (!j.is_object()) r.fail("manifest is not a JSON object");
  Manifest m;
  read_version(r, j, path, &m);
  read_encoding(r, j, &m);
  read_shape(r, j, &m);
  m.count = r.u64(j, "", "count");
  read_classes(r, j, &m);
  read_shards(r, j, &m);
  read_files(r, j, &m);
  m.skipped = r.u64(j, "", "skipped");
  read_source(r, j, &m);
  read_recipe(r, j, &m);
  m.tool_version = r.str(j, "", "tool_version");
  m.created_utc = r.str(j, "", "created_utc");
  // Optional: caches written before the count (or not by a build) have no "transparent".
  if (j.contains("transparent")) {
    m.transparent_known = true;
    m.transparent = r.u64(j, "", "transparent");
    if (m.transparent > m.count) {
      r.fail("transparent is " + std::to_string(m.transparent) + ", more than count (" +
             std::to_string(m.count) + ")");
    }
  }
  read_part(r, j, &m);
  return m;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  const std::string path = dir + "/manifest.json";
  const std::string text = to_json(m);
  // Refuse to publish a manifest no reader would accept.
  try {
    manifest_from_json(text, path);
  } catch (const Error& e) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "refusing to write an invalid manifest: " + e.reason());
  }
  write_file_atomic(path, text.data(), text.size());
}

}  // namespace dscache
