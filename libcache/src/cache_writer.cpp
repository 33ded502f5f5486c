// CacheWriter: shards in order, sidecars per committed shard, side files and manifest at the
// end, then the publish (partial_dir.cpp). The crash states are in cache_writer.h.
#include "dscache/cache_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/crash_point.h"
#include "dscache/file.h"
#include "dscache/jpeg.h"
#include "dscache/lock.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "partial_dir.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string sidecar_name(uint64_t shard) {
  char buf[48];
  std::snprintf(buf, sizeof buf, ".shard-%05llu.json", static_cast<unsigned long long>(shard));
  return buf;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string strip_slashes(const std::string& path) {
  std::string p = fs::absolute(fs::path(path)).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

bool byte_shards(const CacheWriterOptions& o) {
  return o.layout == Layout::kRagged || o.codec == Codec::kJpeg;
}

[[noreturn]] void bad_option(const std::string& field, const std::string& reason) {
  throw Error(ErrorKind::kInvalidArgument, field, reason);
}

void validate(const CacheWriterOptions& o) {
  const BuildRecipe& r = o.recipe;
  if (r.channels != 1 && r.channels != 3) {
    bad_option("channels", std::to_string(r.channels) + ": expected 1 or 3");
  }
  if (o.layout == Layout::kFixed && (r.height == 0 || r.width == 0)) {
    bad_option("shape", "a fixed-layout cache needs a height and width > 0");
  }
  if (o.layout == Layout::kFixed && (r.height > 65500 || r.width > 65500)) {
    bad_option("shape", std::to_string(r.height) + "x" + std::to_string(r.width) +
                            ": a side may be at most 65500");
  }
  if (r.shard_bytes == 0) bad_option("shard_bytes", "must be > 0");
  if (o.codec == Codec::kJpeg) {
    if (!jpeg_supported()) {
      throw Error(ErrorKind::kUnsupported, "codec",
                  "jpeg: this dscache was built without JPEG support (meson feature jpeg)");
    }
    if (r.quality < 1 || r.quality > 100) {
      bad_option("quality", std::to_string(r.quality) + ": expected 1..100");
    }
  }
  if (o.storage == Storage::kHdf5 && !hdf5_supported()) {
    throw Error(ErrorKind::kUnsupported, "storage",
                "hdf5: this dscache was built without HDF5 support (meson feature hdf5)");
  }
}

// The fingerprint a write gets when its caller names none.
json default_fingerprint(const CacheWriterOptions& o) {
  const BuildRecipe& r = o.recipe;
  return {{"writer", 1},
          {"storage", to_string(o.storage)},
          {"layout", to_string(o.layout)},
          {"codec", to_string(o.codec)},
          {"height", o.layout == Layout::kFixed ? r.height : 0},
          {"width", o.layout == Layout::kFixed ? r.width : 0},
          {"channels", r.channels},
          {"quality", o.codec == Codec::kJpeg ? r.quality : 0},
          {"shard_bytes", r.shard_bytes},
          {"classes", o.classes}};
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

// Copies `from` (open, `e.bytes` long) to `dst` through a temp file renamed into place. Done
// here rather than with std::filesystem::copy_file, which reports a short copy onto a full disk
// as EIO: a write error keeps its errno (ENOSPC, EDQUOT, EFBIG) and names the file.
void copy_shard(const File& from, const std::string& src, const std::string& dst,
                const ShardEntry& e) {
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

}  // namespace

struct CacheWriter::Impl {
  std::string output, partial;
  CacheWriterOptions opt;
  std::unique_ptr<PathLock> lock;
  OutputPlan plan;
  bool begun = false;
  bool complete = false;  // OUTPUT is already this write
  bool finished = false;  // manifest.json written
  bool published = false;
  Manifest manifest;  // once finished (or complete)

  uint64_t per_shard = 0;  // fixed layout: samples per shard
  std::unique_ptr<ShardWriter> fixed;
  std::unique_ptr<RaggedShardWriter> bytes;
  bool shard_open = false;  // cut_shard() opened none: an empty shard is still written
  uint64_t shard_index = 0;
  uint64_t next_first = 0;
  uint64_t position = 0;
  uint64_t resumed = 0;
  size_t shard_sample_begin = 0;
  size_t shard_skip_begin = 0;
  std::vector<ShardEntry> shards;
  std::vector<int64_t> labels;
  std::vector<uint64_t> checksums;
  std::vector<std::string> sources;
  std::vector<SkipRecord> skips;
  std::vector<int64_t> index;    // byte shards: (offset, [length,] height, width) per sample
  std::vector<uint8_t> encoded;  // append() with codec kJpeg: the stream

  uint64_t index_columns() const { return opt.codec == Codec::kJpeg ? 4 : 3; }
  std::string path(const std::string& name) const { return partial + "/" + name; }

  void check_writable(const char* what) const {
    if (!begun)
      throw Error(ErrorKind::kInvalidArgument, output, std::string(what) + " before begin()");
    if (complete || finished) {
      throw Error(ErrorKind::kInvalidArgument, output,
                  std::string(what) + " after the cache was finished");
    }
  }

  void check_label(int64_t label, const std::string& source) const {
    if (opt.classes.empty()) return;  // an unlabeled cache takes any label
    if (label < 0 || static_cast<uint64_t>(label) >= opt.classes.size()) {
      throw Error(ErrorKind::kInvalidArgument, source.empty() ? output : source,
                  "label " + std::to_string(label) + " is not a class index (0.." +
                      std::to_string(opt.classes.size() - 1) + ")");
    }
  }

  void record(int64_t label, uint64_t checksum, const std::string& source) {
    labels.push_back(label);
    checksums.push_back(checksum);
    sources.push_back(source);
    ++position;
    crash_point("sample");
  }

  void adopt_finished();
  void commit_shard();
  // The shard now at shard_file_name(shard_index), holding the samples recorded since the
  // previous one: its sidecar, then the bookkeeping.
  void record_shard(ShardEntry e);
  void append_bytes(const uint8_t* data, uint64_t n, uint32_t height, uint32_t width, int64_t label,
                    const std::string& source, uint64_t checksum);
  Manifest write_side_files();
};

void CacheWriter::Impl::adopt_finished() {
  for (uint64_t k = 0;; ++k) {
    const std::string side = path(sidecar_name(k));
    const std::string shard = path(shard_file_name(opt.storage, k));
    if (!path_exists(side) || !path_exists(shard)) break;
    json j;
    ShardEntry e;
    std::vector<int64_t> rows;
    try {
      j = json::parse(File::open(side).read_all(uint64_t{1} << 30));  // never a FIFO
      e.file = j.at("shard").at("file");
      e.first = j.at("shard").at("first");
      e.count = j.at("shard").at("count");
      e.bytes = j.at("shard").at("bytes");
      e.xxh64 = j.at("shard").at("xxh64");
      if (j.contains("index")) rows = j["index"].get<std::vector<int64_t>>();
    } catch (const std::exception&) {
      break;  // torn or foreign sidecar: redo this shard
    }
    const FileEntry actual = hash_file(shard);
    if (actual.bytes != e.bytes || actual.xxh64 != e.xxh64 || e.first != next_first) break;
    shards.push_back(e);
    next_first += e.count;
    for (auto& v : j["labels"]) labels.push_back(v.get<int64_t>());
    for (auto& v : j["checksums"]) checksums.push_back(v.get<uint64_t>());
    for (auto& v : j["sources"]) sources.push_back(v.get<std::string>());
    for (auto& v : j["skips"]) skips.push_back({v["source"], v["reason"]});
    index.insert(index.end(), rows.begin(), rows.end());
    position = j["src_end"];
    shard_index = k + 1;
  }
  // Anything else in the directory is an unfinished shard or a temp file: remove it.
  for (const auto& ent : fs::directory_iterator(partial)) {
    const std::string name = ent.path().filename().string();
    if (name == kFingerprintFile) continue;
    bool keep = false;
    for (uint64_t k = 0; k < shard_index && !keep; ++k) {
      keep = name == sidecar_name(k) || name == shard_file_name(opt.storage, k);
    }
    if (!keep) fs::remove_all(ent.path());
  }
  shard_skip_begin = skips.size();
  shard_sample_begin = labels.size();
  resumed = labels.size();
}

void CacheWriter::Impl::commit_shard() {
  if (!fixed && !bytes && !shard_open) return;
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
  fixed.reset();
  bytes.reset();
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
  side["src_end"] = position;
  side["labels"] = std::vector<int64_t>(labels.begin() + shard_sample_begin, labels.end());
  side["checksums"] =
      std::vector<uint64_t>(checksums.begin() + shard_sample_begin, checksums.end());
  side["sources"] = std::vector<std::string>(sources.begin() + shard_sample_begin, sources.end());
  json skipped = json::array();
  for (size_t i = shard_skip_begin; i < skips.size(); ++i) {
    skipped.push_back({{"source", skips[i].source}, {"reason", skips[i].reason}});
  }
  side["skips"] = std::move(skipped);
  if (byte_shards(opt)) {
    side["index"] = std::vector<int64_t>(
        index.begin() + static_cast<ptrdiff_t>(index_columns() * shard_sample_begin), index.end());
  }
  const std::string text = side.dump();
  write_file_atomic(path(sidecar_name(shard_index)), text.data(), text.size());
  crash_point("sidecar-written");
  shards.push_back(e);
  shard_sample_begin = labels.size();
  shard_skip_begin = skips.size();
  ++shard_index;
  crash_point("shard-committed");
}

void CacheWriter::Impl::append_bytes(const uint8_t* data, uint64_t n, uint32_t height,
                                     uint32_t width, int64_t label, const std::string& source,
                                     uint64_t checksum) {
  const uint64_t cap = opt.recipe.shard_bytes;
  if (bytes && bytes->count() > 0 && bytes->bytes() + n > cap) {
    commit_shard();  // this sample opens the next shard
  }
  if (!bytes) {
    bytes = RaggedShardWriter::create(opt.storage, path(shard_file_name(opt.storage, shard_index)),
                                      opt.recipe.channels, std::max(cap, n));
  }
  if (opt.codec == Codec::kJpeg) {
    const uint64_t offset = bytes->append_bytes(data, n, label);
    index.insert(index.end(), {static_cast<int64_t>(offset), static_cast<int64_t>(n),
                               int64_t{height}, int64_t{width}});
  } else {
    const uint64_t offset = bytes->append(data, height, width, label);
    index.insert(index.end(), {static_cast<int64_t>(offset), int64_t{height}, int64_t{width}});
  }
  record(label, checksum, source);
}

Manifest CacheWriter::Impl::write_side_files() {
  const BuildRecipe& r = opt.recipe;
  const bool ragged = opt.layout == Layout::kRagged;
  Manifest m;
  m.codec = opt.codec;
  m.format_version = format_version_for(opt.codec);
  m.layout = opt.layout;
  m.storage = opt.storage;
  m.height = ragged ? 0 : r.height;
  m.width = ragged ? 0 : r.width;
  m.channels = r.channels;
  m.channel_order = r.channels == 3 ? "RGB" : "L";
  m.count = labels.size();
  m.classes = opt.classes;
  m.class_counts.assign(opt.classes.size(), 0);
  if (!opt.classes.empty()) {
    for (int64_t l : labels) ++m.class_counts[static_cast<size_t>(l)];
  }
  m.shards = shards;
  m.labels = write_npy(partial, "labels.npy", "<i8", labels, {m.count});
  m.checksums = write_npy(partial, "checksums.npy", "<u8", checksums, {m.count});
  if (m.has_index()) {
    m.index = write_npy(partial, opt.codec == Codec::kJpeg ? "jpeg-index.npy" : "ragged-index.npy",
                        "<i8", index, {m.count, index_columns()});
  }
  std::string text;
  for (const auto& s : sources) text += json(s).dump() + "\n";
  m.sources = write_text(partial, "sources.jsonl", text);
  text.clear();
  for (const auto& s : skips)
    text += json{{"source", s.source}, {"reason", s.reason}}.dump() + "\n";
  m.skips = write_text(partial, "skipped.jsonl", text);
  m.skipped = skips.size();
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
static Manifest finish_partial(const std::string& partial) {
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

std::string CacheWriter::partial_dir_for(const std::string& output) {
  fs::path p = fs::path(output);
  return (p.parent_path() / ("." + p.filename().string() + ".partial")).string();
}

CacheWriter::CacheWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CacheWriter::~CacheWriter() = default;

std::unique_ptr<CacheWriter> CacheWriter::claim(const std::string& output,
                                                const CacheWriterOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->output = strip_slashes(output);
  impl->partial = partial_dir_for(impl->output);
  // One writer per output: the lock file lives beside OUTPUT (the directories are swapped).
  fs::create_directories(fs::path(impl->output).parent_path());
  impl->lock = PathLock::acquire(impl->output, options.command);
  recover_interrupted(impl->output, impl->partial);
  impl->plan = check_output(impl->output, impl->partial, options.force, options.resume);
  impl->opt.force = options.force;
  impl->opt.resume = options.resume;
  return std::unique_ptr<CacheWriter>(new CacheWriter(std::move(impl)));
}

void CacheWriter::begin(const CacheWriterOptions& options) {
  Impl& w = *impl_;
  if (w.begun) throw Error(ErrorKind::kInvalidArgument, w.output, "begin() called twice");
  validate(options);
  const bool force = w.opt.force, resume = w.opt.resume;
  w.opt = options;
  w.opt.force = force;  // as claimed
  w.opt.resume = resume;
  w.begun = true;
  w.position = options.first_position;
  const SampleShape shape{options.recipe.height, options.recipe.width, options.recipe.channels};
  w.per_shard =
      byte_shards(options) ? 0 : std::max<uint64_t>(1, options.recipe.shard_bytes / shape.bytes());
  json fp = default_fingerprint(options);
  if (!options.fingerprint.empty()) {
    try {
      fp = json::parse(options.fingerprint);
    } catch (const std::exception& e) {
      bad_option("fingerprint", std::string("is not JSON: ") + e.what());
    }
  }
  if (w.plan.maybe_done) {
    // resume and no interrupted write: done if OUTPUT is this very write (killed after its
    // publish), refused as any existing OUTPUT otherwise.
    Manifest done;
    try {
      done = read_manifest(w.output);
    } catch (const Error&) {
      throw_output_exists(w.output);
    }
    if (options.is_this_write && options.is_this_write(done)) {
      w.complete = true;
      w.manifest = done;
      w.labels.resize(done.count);  // count() reports the cache's
      w.resumed = done.count;
      return;
    }
    if (!force) throw_output_exists(w.output);
  }
  // The partial directory and its fingerprint: a resumed write must be the same write.
  open_partial(w.partial, fp);
  crash_point("partial-open");
  if (path_exists(w.partial + "/manifest.json")) {
    // Killed after the manifest was written: only the publish is left.
    w.manifest = finish_partial(w.partial);
    w.finished = true;
    w.labels.resize(w.manifest.count);
    w.resumed = w.manifest.count;
    return;
  }
  w.adopt_finished();
}

std::unique_ptr<CacheWriter> CacheWriter::open(const std::string& output,
                                               const CacheWriterOptions& options) {
  auto w = claim(output, options);
  w->begin(options);
  return w;
}

void CacheWriter::append(const uint8_t* pixels, uint32_t height, uint32_t width, int64_t label,
                         const std::string& source, const uint64_t* checksum) {
  Impl& w = *impl_;
  w.check_writable("append()");
  w.check_label(label, source);
  const BuildRecipe& r = w.opt.recipe;
  const uint64_t n = uint64_t{height} * width * r.channels;
  if (w.opt.layout == Layout::kFixed && (height != r.height || width != r.width)) {
    throw Error(ErrorKind::kInvalidArgument, source.empty() ? w.output : source,
                "sample is " + std::to_string(height) + "x" + std::to_string(width) +
                    ", the cache's samples are " + std::to_string(r.height) + "x" +
                    std::to_string(r.width));
  }
  if (height == 0 || width == 0 || height > 65500 || width > 65500) {
    throw Error(ErrorKind::kInvalidArgument, source.empty() ? w.output : source,
                "sample is " + std::to_string(height) + "x" + std::to_string(width) +
                    ": each side must be 1..65500");
  }
  if (w.opt.codec == Codec::kJpeg) {
    w.encoded.clear();
    jpeg_encode(pixels, height, width, r.channels, static_cast<int>(r.quality), &w.encoded);
    append_encoded(w.encoded.data(), w.encoded.size(), height, width, label, source, nullptr);
    return;
  }
  const uint64_t sum = checksum != nullptr ? *checksum : xxh64(pixels, n);
  if (byte_shards(w.opt)) {
    w.append_bytes(pixels, n, height, width, label, source, sum);
    return;
  }
  if (!w.fixed) {
    w.fixed =
        ShardWriter::create(w.opt.storage, w.path(shard_file_name(w.opt.storage, w.shard_index)),
                            SampleShape{r.height, r.width, r.channels}, w.per_shard);
  }
  w.fixed->append(pixels, label);
  w.record(label, sum, source);
  if (w.fixed->count() == w.per_shard) w.commit_shard();
}

void CacheWriter::append_encoded(const uint8_t* data, uint64_t size, uint32_t height,
                                 uint32_t width, int64_t label, const std::string& source,
                                 const uint64_t* checksum) {
  Impl& w = *impl_;
  w.check_writable("append_encoded()");
  if (w.opt.codec != Codec::kJpeg) {
    throw Error(ErrorKind::kInvalidArgument, w.output,
                "append_encoded() needs a JPEG cache (codec jpeg); this one is raw");
  }
  w.check_label(label, source);
  if (size == 0) throw Error(ErrorKind::kInvalidArgument, source, "an empty JPEG stream");
  if (w.opt.layout == Layout::kFixed &&
      (height != w.opt.recipe.height || width != w.opt.recipe.width)) {
    throw Error(ErrorKind::kInvalidArgument, source.empty() ? w.output : source,
                "sample is " + std::to_string(height) + "x" + std::to_string(width) +
                    ", the cache's samples are " + std::to_string(w.opt.recipe.height) + "x" +
                    std::to_string(w.opt.recipe.width));
  }
  const uint64_t sum = checksum != nullptr ? *checksum : xxh64(data, size);
  w.append_bytes(data, size, height, width, label, source, sum);
}

void CacheWriter::skip(const std::string& source, const std::string& reason) {
  Impl& w = *impl_;
  w.check_writable("skip()");
  w.skips.push_back({source, reason});
  ++w.position;
}

void CacheWriter::cut_shard() {
  Impl& w = *impl_;
  w.check_writable("cut_shard()");
  w.shard_open = true;
  w.commit_shard();
}

bool CacheWriter::add_shard(const CacheDir& from, size_t k, const ShardRecords& rec) {
  Impl& w = *impl_;
  w.check_writable("add_shard()");
  const ShardEntry& e = from.manifest().shards.at(k);
  const std::string src = from.path(e.file);
  const uint64_t columns = byte_shards(w.opt) ? w.index_columns() : 0;
  if (rec.labels.size() != e.count || rec.checksums.size() != e.count ||
      rec.sources.size() != e.count || rec.index.size() != e.count * columns) {
    throw Error(ErrorKind::kInvalidArgument, src, "add_shard(): records do not match its count");
  }
  for (int64_t l : rec.labels) w.check_label(l, src);
  w.commit_shard();
  // Opened through the part's validated directory: a regular file inside it (never a FIFO or a
  // symlink out), of its manifest's size, its header agreeing with the manifest.
  const ShardFile shard = from.open_shard(k);
  struct stat opened;
  if (::fstat(shard.file.fd(), &opened) != 0) throw_errno(src, "cannot stat");
  const std::string dst = w.path(shard_file_name(w.opt.storage, w.shard_index));
  if (path_exists(dst)) fs::remove(dst);  // an unfinished copy or link of a killed run
  bool copied = false;
  if (::linkat(from.fd(), e.file.c_str(), AT_FDCWD, dst.c_str(), 0) == 0) {
    struct stat linked;
    if (::stat(dst.c_str(), &linked) != 0 || linked.st_ino != opened.st_ino ||
        linked.st_dev != opened.st_dev) {
      ::unlink(dst.c_str());
      throw Error(ErrorKind::kCorruption, src, "was replaced while the merge read it");
    }
  } else {
    if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
      throw_errno(dst, "cannot hard-link " + src);
    }
    copy_shard(shard.file, src, dst, e);
    copied = true;
  }
  crash_point("shard-placed");
  w.labels.insert(w.labels.end(), rec.labels.begin(), rec.labels.end());
  w.checksums.insert(w.checksums.end(), rec.checksums.begin(), rec.checksums.end());
  w.sources.insert(w.sources.end(), rec.sources.begin(), rec.sources.end());
  w.index.insert(w.index.end(), rec.index.begin(), rec.index.end());
  ++w.position;
  w.record_shard(e);
  return copied;
}

Manifest CacheWriter::finish() {
  Impl& w = *impl_;
  if (!w.begun) throw Error(ErrorKind::kInvalidArgument, w.output, "finish() before begin()");
  if (w.complete || w.finished) return w.manifest;
  w.commit_shard();
  w.manifest = w.write_side_files();
  w.finished = true;
  return w.manifest;
}

Manifest CacheWriter::publish() {
  Impl& w = *impl_;
  if (w.complete || w.published) return w.manifest;
  finish();
  dscache::publish(w.partial, w.output, w.plan.replace);
  w.published = true;
  return w.manifest;
}

void CacheWriter::abandon() {
  Impl& w = *impl_;
  w.fixed.reset();
  w.bytes.reset();
  if (w.begun && !w.complete && !w.published && path_exists(w.partial)) remove_tree(w.partial);
}

bool CacheWriter::complete() const { return impl_->complete; }
bool CacheWriter::finished() const { return impl_->finished; }
uint64_t CacheWriter::position() const { return impl_->position; }
uint64_t CacheWriter::count() const { return impl_->labels.size(); }
uint64_t CacheWriter::resumed() const { return impl_->resumed; }
uint64_t CacheWriter::skipped() const {
  return impl_->finished || impl_->complete ? impl_->manifest.skipped : impl_->skips.size();
}
uint64_t CacheWriter::shard_count() const { return impl_->shard_index; }
const std::string& CacheWriter::output() const { return impl_->output; }
const std::string& CacheWriter::partial() const { return impl_->partial; }

}  // namespace dscache
