// CacheWriter's public calls: claim and begin (checks, fingerprint, resume), appends and their
// checks, finish and publish. Shards, sidecars and side files: cache_writer_shards.cpp; the
// partial directory and the publish itself: partial_dir.cpp. Crash states: cache_writer.h.
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
#include "json/parse.h"
#include "write/cache_writer_impl.h"
#include "write/open_files.h"
#include "write/partial_dir.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string strip_slashes(const std::string& path) {
  std::string p = fs::absolute(fs::path(path)).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

[[noreturn]] void bad_option(const std::string& field, const std::string& reason) {
  throw Error(ErrorKind::kInvalidArgument, field, reason);
}

void validate(const CacheWriterOptions& o) {
  const BuildRecipe& r = o.recipe;
  if (channel_order_for(r.channels) == nullptr) {
    bad_option("channels", std::to_string(r.channels) + ": expected 1, 3 or 4");
  }
  if ((r.alpha == AlphaMode::kKeep) != (r.channels == 4)) {
    bad_option("channels", std::to_string(r.channels) +
                               ": 4 channels (RGBA) go with recipe.alpha keep, and only they");
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
    if (r.channels == 4) bad_option("codec", "jpeg cannot store an alpha channel (4 channels)");
  }
  if (o.storage == Storage::kHdf5 && !hdf5_supported()) {
    throw Error(ErrorKind::kUnsupported, "storage",
                "hdf5: this dscache was built without HDF5 support (meson feature hdf5)");
  }
  validate_fields(o.fields, "fields");
}

json fields_fingerprint(const std::vector<FieldSpec>& fields) {
  json a = json::array();
  for (const FieldSpec& f : fields) {
    a.push_back({{"name", f.name},
                 {"kind", to_string(f.kind)},
                 {"dtype", to_string(f.dtype)},
                 {"shape", f.shape},
                 {"rows_of", f.rows_of},
                 {"classes", f.classes}});
  }
  return a;
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
          {"classes", o.classes},
          {"fields", fields_fingerprint(o.fields)}};
}

}  // namespace

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
  check_field_file_budget(options.fields.size(), w.output);
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
      fp = parse_json(options.fingerprint, JsonOrigin{w.output, ErrorKind::kInvalidArgument});
    } catch (const Error& e) {
      bad_option("fingerprint", "is not JSON: " + e.reason());
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
  try {
    open_partial(w.partial, fp);
  } catch (const Error&) {
    // resume + force and the interrupted write here is another one: force starts over.
    if (!force || !path_exists(w.partial)) throw;
    remove_tree(w.partial);
    open_partial(w.partial, fp);
  }
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
                         const std::string& source, const uint64_t* checksum,
                         const FieldData* fields) {
  Impl& w = *impl_;
  w.check_writable("append()");
  w.check_label(label, source);
  const BuildRecipe& r = w.opt.recipe;
  const uint64_t n = uint64_t{height} * width * r.channels;
  w.check_shape(height, width, source);
  if (w.opt.codec == Codec::kJpeg) {
    w.encoded.clear();
    jpeg_encode(pixels, height, width, r.channels, static_cast<int>(r.quality), &w.encoded);
    append_encoded(w.encoded.data(), w.encoded.size(), height, width, label, source, nullptr,
                   fields);
    return;
  }
  w.check_fields(fields, height, width, source);
  const uint64_t sum = checksum != nullptr ? *checksum : xxh64(pixels, n);
  if (byte_shards(w.opt)) {
    w.append_bytes(pixels, n, height, width, label, source, sum, fields);
    return;
  }
  if (!w.fixed) {
    w.fixed =
        ShardWriter::create(w.opt.storage, w.path(shard_file_name(w.opt.storage, w.shard_index)),
                            SampleShape{r.height, r.width, r.channels}, w.per_shard);
  }
  w.open_field_writers();
  w.fixed->append(pixels, label);
  w.write_fields(fields);
  w.record(label, sum, source);
  if (w.fixed->count() == w.per_shard) w.commit_shard();
}

void CacheWriter::append_encoded(const uint8_t* data, uint64_t size, uint32_t height,
                                 uint32_t width, int64_t label, const std::string& source,
                                 const uint64_t* checksum, const FieldData* fields) {
  Impl& w = *impl_;
  w.check_writable("append_encoded()");
  if (w.opt.codec != Codec::kJpeg) {
    throw Error(ErrorKind::kInvalidArgument, w.output,
                "append_encoded() needs a JPEG cache (codec jpeg); this one is raw");
  }
  w.check_label(label, source);
  if (size == 0) throw Error(ErrorKind::kInvalidArgument, source, "an empty JPEG stream");
  w.check_shape(height, width, source);
  w.check_fields(fields, height, width, source);
  const uint64_t sum = checksum != nullptr ? *checksum : xxh64(data, size);
  w.append_bytes(data, size, height, width, label, source, sum, fields);
}

void CacheWriter::skip(const std::string& source, const std::string& reason) {
  Impl& w = *impl_;
  w.check_writable("skip()");
  w.skips.push_back({source, reason});
  ++w.position;
}

void CacheWriter::note_transparent(uint64_t n) {
  Impl& w = *impl_;
  w.check_writable("note_transparent()");
  w.pending_transparent += n;
}

void CacheWriter::cut_shard() {
  Impl& w = *impl_;
  w.check_writable("cut_shard()");
  w.shard_open = true;
  w.commit_shard();
}

namespace {

// Puts file `name` of `from` (open as `opened`, described by `e`) at `dst`: a hard link, checked
// to be the very file opened, or a copy across filesystems. Returns true when copied.
bool place_file(const CacheDir& from, const File& opened, const FileEntry& e,
                const std::string& dst) {
  const std::string src = from.path(e.file);
  struct stat st;
  if (::fstat(opened.fd(), &st) != 0) throw_errno(src, "cannot stat");
  if (path_exists(dst)) fs::remove(dst);  // an unfinished copy or link of a killed run
  if (::linkat(from.fd(), e.file.c_str(), AT_FDCWD, dst.c_str(), 0) == 0) {
    struct stat linked;
    if (::stat(dst.c_str(), &linked) != 0 || linked.st_ino != st.st_ino ||
        linked.st_dev != st.st_dev) {
      ::unlink(dst.c_str());
      throw Error(ErrorKind::kCorruption, src, "was replaced while the merge read it");
    }
    return false;
  }
  if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
    throw_errno(dst, "cannot hard-link " + src);
  }
  copy_file_checked(opened, src, dst, e);
  return true;
}

}  // namespace

bool CacheWriter::add_shard(const CacheDir& from, size_t k, const ShardRecords& rec) {
  Impl& w = *impl_;
  w.check_writable("add_shard()");
  const ShardEntry& e = from.manifest().shards.at(k);
  const std::string src = from.path(e.file);
  const uint64_t columns = byte_shards(w.opt) ? w.index_columns() : 0;
  if (rec.labels.size() != e.count || rec.checksums.size() != e.count * w.checksum_columns() ||
      rec.sources.size() != e.count || rec.index.size() != e.count * columns) {
    throw Error(ErrorKind::kInvalidArgument, src, "add_shard(): records do not match its count");
  }
  if (from.manifest().fields != w.opt.fields) {
    throw Error(ErrorKind::kInvalidArgument, from.path("manifest.json"),
                "add_shard(): its fields differ from this cache's");
  }
  for (int64_t l : rec.labels) w.check_label(l, src);
  w.commit_shard();
  // Opened through the part's validated directory: a regular file inside it (never a FIFO or a
  // symlink out), of its manifest's size, its header agreeing with the manifest.
  const ShardFile shard = from.open_shard(k);
  bool copied = place_file(from, shard.file, FileEntry{e.file, e.bytes, e.xxh64},
                           w.path(shard_file_name(w.opt.storage, w.shard_index)));
  ShardEntry placed = e;
  for (size_t f = 0; f < w.opt.fields.size(); ++f) {
    const std::string& name = w.opt.fields[f].name;
    FieldFiles& files = placed.fields.at(f);
    const File values = from.open_field(k, f).values;
    copied |=
        place_file(from, values, files.values, w.path(field_file_name(name, w.shard_index, false)));
    if (!files.offsets.file.empty()) {
      const File offsets = from.open_file(files.offsets.file, files.offsets.bytes);
      copied |= place_file(from, offsets, files.offsets,
                           w.path(field_file_name(name, w.shard_index, true)));
    }
  }
  crash_point("shard-placed");
  w.labels.insert(w.labels.end(), rec.labels.begin(), rec.labels.end());
  w.checksums.insert(w.checksums.end(), rec.checksums.begin(), rec.checksums.end());
  w.sources.insert(w.sources.end(), rec.sources.begin(), rec.sources.end());
  w.index.insert(w.index.end(), rec.index.begin(), rec.index.end());
  w.transparent += w.pending_transparent;
  w.pending_transparent = 0;
  ++w.position;
  w.record_shard(placed);
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
  w.field_writers.clear();  // their temp files go before the directory does
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
