#include "build_finish.h"

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "build_partial.h"
#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/npy.h"
#include "test_hooks.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

}  // namespace

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

FileEntry write_text(const std::string& dir, const std::string& name, const std::string& text) {
  FileEntry e = write_file_atomic(dir + "/" + name, text.data(), text.size());
  e.file = name;
  crash_point("side-file");
  return e;
}

FileEntry write_npy(const std::string& dir, const std::string& name, const std::string& descr,
                    const void* data, std::vector<uint64_t> shape, size_t item) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  write_npy_file(dir + "/" + name, descr, shape, data, n * item);
  FileEntry e = hash_file(dir + "/" + name);
  e.file = name;
  crash_point("side-file");
  return e;
}

}  // namespace

Manifest finish_partial(const std::string& partial) {
  Manifest m = read_manifest(partial);
  std::vector<std::string> keep{"manifest.json",  kFingerprintFile, m.labels.file,
                                m.checksums.file, m.sources.file,   m.skips.file};
  if (m.has_index()) keep.push_back(m.index.file);
  for (const ShardEntry& s : m.shards) keep.push_back(s.file);
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

Manifest finish_cache(const std::string& partial, const SourceListing& src, const BuildRecipe& r,
                      Storage storage, bool ragged, Codec codec, BuildWriter& writer,
                      const PartRecord* part) {
  Manifest m;
  m.codec = codec;
  m.format_version = format_version_for(codec);
  m.layout = ragged ? Layout::kRagged : Layout::kFixed;
  m.storage = storage;
  m.height = ragged ? 0 : r.height;
  m.width = ragged ? 0 : r.width;
  m.channels = r.channels;
  m.channel_order = r.channels == 3 ? "RGB" : "L";
  m.count = writer.count();
  m.classes = src.classes;
  m.class_counts.assign(src.classes.size(), 0);
  for (int64_t l : writer.labels()) ++m.class_counts[static_cast<size_t>(l)];
  m.shards = writer.shards();
  m.labels = write_npy(partial, "labels.npy", "<i8", writer.labels().data(), {m.count}, 8);
  m.checksums = write_npy(partial, "checksums.npy", "<u8", writer.checksums().data(), {m.count}, 8);
  if (m.has_index()) {
    m.index = write_npy(partial, codec == Codec::kJpeg ? "jpeg-index.npy" : "ragged-index.npy",
                        "<i8", writer.index().data(), {m.count, writer.index_columns()}, 8);
  }
  std::string text;
  for (const auto& s : writer.sources()) text += json(s).dump() + "\n";
  m.sources = write_text(partial, "sources.jsonl", text);
  text.clear();
  for (const auto& s : writer.skips()) {
    text += json{{"source", s.source}, {"reason", s.reason}}.dump() + "\n";
  }
  m.skips = write_text(partial, "skipped.jsonl", text);
  m.skipped = writer.skipped();
  m.source.kind = src.kind;
  m.source.root = src.root;
  m.source.labels = src.labels_path;
  m.source.entries = src.entries.size();
  m.source.digest = src.digest;
  m.recipe = r;
  m.tool_version = DSCACHE_VERSION;
  m.created_utc = utc_now();
  if (part != nullptr) {
    m.has_part = true;
    m.part = *part;
  }

  // The manifest is the partial directory's commit point: from here a --resume publishes it as
  // it is (finish_partial). The fingerprint stays until the publish (build_partial.h).
  write_manifest(partial, m);
  crash_point("manifest-written");
  writer.remove_sidecars();
  fsync_directory(partial);
  return m;
}

}  // namespace dscache
