// CacheWriter's shards: committing each with its sidecar, taking them over on a resume, and the
// side files and manifest at the end (cache_writer_impl.h; crash states in cache_writer.h).
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/crash_point.h"
#include "dscache/file.h"
#include "dscache/npy.h"
#include "json/parse.h"
#include "write/cache_writer_impl.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Writes `name` into `dir` as a .npy file of int64/uint64 values and returns its entry.
template <typename T>
FileEntry write_npy(const std::string& dir, const std::string& name, const char* descr,
                    const std::vector<T>& values, std::vector<uint64_t> shape) {
  write_npy_file(dir + "/" + name, descr, shape, values.data(), values.size() * sizeof(T));
  FileEntry e = hash_file(dir + "/" + name);
  e.file = name;
  crash_point("side-file");
  return e;
}

FileEntry write_text(const std::string& dir, const std::string& name, const std::string& text) {
  FileEntry e = write_file_atomic(dir + "/" + name, text.data(), text.size());
  e.file = name;
  crash_point("side-file");
  return e;
}

json file_json(const FileEntry& f) {
  return {{"file", f.file}, {"bytes", f.bytes}, {"xxh64", f.xxh64}};
}

FileEntry file_from_json(const json& j) {
  return FileEntry{j.at("file").get<std::string>(), j.at("bytes").get<uint64_t>(),
                   j.at("xxh64").get<uint64_t>()};
}

// True when `e` (a sidecar's record) names a file of the partial directory with its size and
// XXH64.
bool file_agrees(const std::string& dir, const FileEntry& e) {
  if (e.file.empty() || !path_exists(dir + "/" + e.file)) return false;
  const FileEntry actual = hash_file(dir + "/" + e.file);
  return actual.bytes == e.bytes && actual.xxh64 == e.xxh64;
}

}  // namespace

void CacheWriter::Impl::check_fields(const FieldData* fields, uint32_t height, uint32_t width,
                                     const std::string& source) {
  field_rows.clear();
  field_sums.clear();
  if (opt.fields.empty()) return;
  const std::string& who = source.empty() ? output : source;
  if (fields == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, who,
                "the cache has " + std::to_string(opt.fields.size()) +
                    " fields; append() needs one value for each");
  }
  for (size_t f = 0; f < opt.fields.size(); ++f) {
    field_rows.push_back(check_field_value(opt.fields[f], fields[f], height, width, who));
    field_sums.push_back(xxh64(fields[f].data, fields[f].bytes));
  }
  for (size_t f = 0; f < opt.fields.size(); ++f) {
    const FieldSpec& spec = opt.fields[f];
    if (spec.rows_of.empty()) continue;
    for (size_t b = 0; b < opt.fields.size(); ++b) {
      if (opt.fields[b].name == spec.rows_of && field_rows[b] != field_rows[f]) {
        throw Error(ErrorKind::kInvalidArgument, who,
                    "field '" + spec.name + "' has " + std::to_string(field_rows[f]) +
                        " rows, its boxes '" + spec.rows_of + "' " + std::to_string(field_rows[b]) +
                        " (one row per box)");
      }
    }
  }
}

void CacheWriter::Impl::open_field_writers() {
  if (opt.fields.empty() || !field_writers.empty()) return;
  const uint32_t h = opt.layout == Layout::kFixed ? opt.recipe.height : 0;
  const uint32_t w = opt.layout == Layout::kFixed ? opt.recipe.width : 0;
  for (const FieldSpec& f : opt.fields) {
    field_writers.push_back(
        std::make_unique<detail::FieldShardWriter>(partial, f, opt.layout, h, w, shard_index));
  }
}

void CacheWriter::Impl::write_fields(const FieldData* fields) {
  for (size_t f = 0; f < field_writers.size(); ++f)
    field_writers[f]->append(fields[f], field_rows[f]);
}

// Done here rather than with std::filesystem::copy_file, which reports a short copy onto a full
// disk as EIO.
void copy_file_checked(const File& from, const std::string& src, const std::string& dst,
                       const FileEntry& e) {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::string buf(static_cast<size_t>(std::min<uint64_t>(kChunk, std::max<uint64_t>(e.bytes, 1))),
                  '\0');
  AtomicFile out(dst);  // removes its temp file unless committed: a failed copy leaves nothing
  for (uint64_t done = 0; done < e.bytes;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), e.bytes - done);
    from.read_at(done, n, buf.data());
    out.write(buf.data(), static_cast<size_t>(n));
    done += n;
  }
  const FileEntry got = out.commit();
  if (got.bytes != e.bytes || got.xxh64 != e.xxh64) {
    ::unlink(dst.c_str());
    throw Error(ErrorKind::kCorruption, src,
                "does not match its manifest entry (size or XXH64); run dscache verify");
  }
}

void CacheWriter::Impl::write_sources(const std::vector<std::string>& lines) {
  if (!sources_file) sources_file = std::make_unique<AtomicFile>(path("sources.jsonl"));
  std::string text;
  for (const auto& s : lines) text += json(s).dump() + "\n";
  sources_file->write(text.data(), text.size());
}

void CacheWriter::Impl::adopt_finished() {
  for (uint64_t k = 0;; ++k) {
    const std::string side = path(sidecar_name(k));
    const std::string shard = path(shard_file_name(opt.storage, k));
    if (!path_exists(side) || !path_exists(shard)) break;
    json j;
    ShardEntry e;
    std::vector<int64_t> rows;
    try {
      j = parse_json(File::open(side).read_all(uint64_t{1} << 30),  // never a FIFO
                     JsonOrigin{side, ErrorKind::kCorruption});
      e.file = j.at("shard").at("file");
      e.first = j.at("shard").at("first");
      e.count = j.at("shard").at("count");
      e.bytes = j.at("shard").at("bytes");
      e.xxh64 = j.at("shard").at("xxh64");
      if (j.contains("index")) rows = j["index"].get<std::vector<int64_t>>();
      const json fields = j.value("fields", json::array());
      if (fields.size() != opt.fields.size()) break;
      for (const json& f : fields) {
        FieldFiles files;
        files.values = file_from_json(f.at("values"));
        if (f.contains("offsets")) files.offsets = file_from_json(f.at("offsets"));
        e.fields.push_back(std::move(files));
      }
    } catch (const std::exception&) {
      break;  // torn or foreign sidecar: redo this shard
    }
    const FileEntry actual = hash_file(shard);
    if (actual.bytes != e.bytes || actual.xxh64 != e.xxh64 || e.first != next_first) break;
    bool fields_agree = true;
    for (const FieldFiles& f : e.fields) {
      fields_agree = fields_agree && file_agrees(partial, f.values) &&
                     (f.offsets.file.empty() || file_agrees(partial, f.offsets));
    }
    if (!fields_agree) break;
    shards.push_back(e);
    next_first += e.count;
    for (auto& v : j["labels"]) labels.push_back(v.get<int64_t>());
    for (auto& v : j["checksums"]) checksums.push_back(v.get<uint64_t>());
    write_sources(j["sources"].get<std::vector<std::string>>());
    for (auto& v : j["skips"]) skips.push_back({v["source"], v["reason"]});
    if (j.contains("transparent")) {
      transparent += j["transparent"].get<uint64_t>();
    } else {
      transparent_lost = true;
    }
    index.insert(index.end(), rows.begin(), rows.end());
    position = j["src_end"];
    shard_index = k + 1;
  }
  // Anything else in the directory is an unfinished shard or a temp file: remove it.
  for (const auto& ent : fs::directory_iterator(partial)) {
    const std::string name = ent.path().filename().string();
    if (name == kFingerprintFile) continue;
    if (sources_file && name == fs::path(sources_file->temp_path()).filename().string()) {
      continue;  // the kept shards' sources, written just now
    }
    bool keep = false;
    for (uint64_t k = 0; k < shard_index && !keep; ++k) {
      keep = name == sidecar_name(k) || name == shard_file_name(opt.storage, k);
      for (const FieldFiles& f : shards[k].fields) {
        keep = keep || name == f.values.file || name == f.offsets.file;
      }
    }
    if (!keep) fs::remove_all(ent.path());
  }
  shard_skip_begin = skips.size();
  shard_sample_begin = labels.size();
  shard_transparent_begin = transparent;
  resumed = labels.size();
}

void CacheWriter::Impl::commit_shard() {
  if (!fixed && !bytes && !shard_open) return;
  open_field_writers();  // an empty shard still has its (empty) field files
  ShardEntry e;
  if (fixed) {
    e = fixed->commit();
  } else if (bytes) {
    e = bytes->commit();
  } else {  // cut_shard() with no sample: an empty shard
    const std::string file = path(shard_file_name(opt.storage, shard_index));
    if (byte_shards(opt)) {
      e = RaggedShardWriter::create(opt.storage, file, opt.recipe.channels, 1)->commit();
    } else {
      e = ShardWriter::create(opt.storage, file,
                              SampleShape{opt.recipe.height, opt.recipe.width, opt.recipe.channels},
                              1)
              ->commit();
    }
  }
  for (auto& f : field_writers) e.fields.push_back(f->commit());
  fixed.reset();
  bytes.reset();
  field_writers.clear();
  shard_open = false;
  crash_point("shard-renamed");
  record_shard(e);
}

void CacheWriter::Impl::record_shard(ShardEntry e) {
  e.file = shard_file_name(opt.storage, shard_index);
  e.first = next_first;
  next_first += e.count;
  json side;
  side["shard"] = {{"file", e.file},
                   {"first", e.first},
                   {"count", e.count},
                   {"bytes", e.bytes},
                   {"xxh64", e.xxh64}};
  json fields = json::array();
  for (size_t f = 0; f < e.fields.size(); ++f) {
    FieldFiles& files = e.fields[f];
    files.values.file = field_file_name(opt.fields[f].name, shard_index, false);
    json j = {{"values", file_json(files.values)}};
    if (!files.offsets.file.empty()) {
      files.offsets.file = field_file_name(opt.fields[f].name, shard_index, true);
      j["offsets"] = file_json(files.offsets);
    }
    fields.push_back(std::move(j));
  }
  side["fields"] = std::move(fields);
  side["src_end"] = position;
  json skipped = json::array();
  for (size_t i = shard_skip_begin; i < skips.size(); ++i) {
    skipped.push_back({{"source", skips[i].source}, {"reason", skips[i].reason}});
  }
  side["skips"] = std::move(skipped);
  side["transparent"] = transparent - shard_transparent_begin;
  // The per-sample arrays go into the text directly, not through json values (a node per
  // value, several times the text): a shard may hold millions of samples.
  std::string text = side.dump();
  text.pop_back();  // the object's '}'
  auto numbers = [&](const char* key, const auto& values, size_t from) {
    text += std::string(",\"") + key + "\":[";
    for (size_t i = from; i < values.size(); ++i) {
      if (i > from) text += ',';
      text += std::to_string(values[i]);
    }
    text += ']';
  };
  numbers("labels", labels, shard_sample_begin);
  numbers("checksums", checksums, checksum_columns() * shard_sample_begin);
  if (byte_shards(opt)) numbers("index", index, index_columns() * shard_sample_begin);
  text += ",\"sources\":[";  // the shard's own: the committed ones are in sources_file
  for (size_t i = 0; i < sources.size(); ++i) {
    if (i > 0) text += ',';
    text += json(sources[i]).dump();
  }
  text += "]}";
  write_file_atomic(path(sidecar_name(shard_index)), text.data(), text.size());
  crash_point("sidecar-written");
  write_sources(sources);  // a crash before it: a resume writes them again from the sidecar
  sources.clear();
  shards.push_back(e);
  shard_sample_begin = labels.size();
  shard_skip_begin = skips.size();
  shard_transparent_begin = transparent;
  ++shard_index;
  crash_point("shard-committed");
}

void CacheWriter::Impl::append_bytes(const uint8_t* data, uint64_t n, uint32_t height,
                                     uint32_t width, int64_t label, const std::string& source,
                                     uint64_t checksum, const FieldData* fields) {
  const uint64_t cap = opt.recipe.shard_bytes;
  if (bytes && bytes->count() > 0 && bytes->bytes() + n > cap) {
    commit_shard();  // this sample opens the next shard
  }
  if (!bytes) {
    bytes = RaggedShardWriter::create(opt.storage, path(shard_file_name(opt.storage, shard_index)),
                                      opt.recipe.channels, std::max(cap, n));
  }
  open_field_writers();
  if (opt.codec == Codec::kJpeg) {
    const uint64_t offset = bytes->append_bytes(data, n, label);
    index.insert(index.end(), {static_cast<int64_t>(offset), static_cast<int64_t>(n),
                               int64_t{height}, int64_t{width}});
  } else {
    const uint64_t offset = bytes->append(data, height, width, label);
    index.insert(index.end(), {static_cast<int64_t>(offset), int64_t{height}, int64_t{width}});
  }
  write_fields(fields);
  record(label, checksum, source);
}

Manifest CacheWriter::Impl::write_side_files() {
  const BuildRecipe& r = opt.recipe;
  const bool ragged = opt.layout == Layout::kRagged;
  Manifest m;
  m.codec = opt.codec;
  m.format_version = format_version_for(opt.codec, !opt.fields.empty());
  m.fields = opt.fields;
  m.layout = opt.layout;
  m.storage = opt.storage;
  m.height = ragged ? 0 : r.height;
  m.width = ragged ? 0 : r.width;
  m.channels = r.channels;
  m.channel_order = channel_order_for(r.channels);
  m.count = labels.size();
  m.classes = opt.classes;
  m.class_counts.assign(opt.classes.size(), 0);
  if (!opt.classes.empty()) {
    for (int64_t l : labels) ++m.class_counts[static_cast<size_t>(l)];
  }
  m.shards = shards;
  m.labels = write_npy(partial, "labels.npy", "<i8", labels, {m.count});
  m.checksums = write_npy(partial, "checksums.npy", "<u8", checksums,
                          m.fields.empty() ? std::vector<uint64_t>{m.count}
                                           : std::vector<uint64_t>{m.count, checksum_columns()});
  if (m.has_index()) {
    m.index = write_npy(partial, opt.codec == Codec::kJpeg ? "jpeg-index.npy" : "ragged-index.npy",
                        "<i8", index, {m.count, index_columns()});
  }
  if (!sources_file) write_sources({});  // no shard: an empty file
  m.sources = sources_file->commit();
  m.sources.file = "sources.jsonl";
  sources_file.reset();
  crash_point("side-file");
  std::string text;
  for (const auto& s : skips)
    text += json{{"source", s.source}, {"reason", s.reason}}.dump() + "\n";
  m.skips = write_text(partial, "skipped.jsonl", text);
  m.skipped = skips.size();
  m.transparent_known = opt.count_transparent && !transparent_lost;
  m.transparent = m.transparent_known ? transparent + pending_transparent : 0;
  m.source = opt.source;
  m.recipe = r;
  if (ragged && m.recipe.max_side == 0) {
    // No limit was given (a writer's caller, not a build): record the bound the samples meet,
    // the largest shorter side written.
    const size_t cols = index_columns();
    uint32_t most = 1;
    for (size_t i = 0; i + cols <= index.size(); i += cols) {
      const auto h = static_cast<uint32_t>(index[i + cols - 2]);
      const auto w = static_cast<uint32_t>(index[i + cols - 1]);
      most = std::max(most, std::min(h, w));
    }
    m.recipe.max_side = most;
  }
  m.tool_version = opt.tool_version.empty() ? DSCACHE_VERSION : opt.tool_version;
  m.created_utc = opt.created_utc.empty() ? utc_now() : opt.created_utc;
  m.has_part = opt.has_part;
  if (opt.has_part) m.part = opt.part;
  // The manifest is the partial directory's commit point: from here a resume publishes it as it
  // is. The fingerprint stays until the publish (partial_dir.h).
  write_manifest(partial, m);
  crash_point("manifest-written");
  for (uint64_t k = 0; k < shard_index; ++k) {
    fs::remove(path(sidecar_name(k)));
    crash_point("sidecar-removed");
  }
  fsync_directory(partial);
  return m;
}

// A partial directory whose manifest was written before a crash: removes what is left of the
// write's state but the fingerprint (sidecars, temp files) and returns the manifest.
Manifest finish_partial(const std::string& partial) {
  Manifest m = read_manifest(partial);
  std::vector<std::string> keep{"manifest.json",  kFingerprintFile, m.labels.file,
                                m.checksums.file, m.sources.file,   m.skips.file};
  if (m.has_index()) keep.push_back(m.index.file);
  for (const ShardEntry& s : m.shards) {
    keep.push_back(s.file);
    for (const FieldFiles& f : s.fields) {
      keep.push_back(f.values.file);
      if (!f.offsets.file.empty()) keep.push_back(f.offsets.file);
    }
  }
  for (const auto& ent : fs::directory_iterator(partial)) {
    const std::string name = ent.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) {
      fs::remove_all(ent.path());  // a sidecar or a temp file
      crash_point("sidecar-removed");
    }
  }
  fsync_directory(partial);
  return m;
}

}  // namespace dscache
