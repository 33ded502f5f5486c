// CacheDir: every file of a cache read through one directory descriptor and checked (see
// cache_dir.h).
#include "dscache/cache_dir.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "dscache/error.h"
#include "dscache/npy.h"
#include "dscache/remote.h"
#include "format/field_files.h"
#include "json/parse.h"
#include "remote/mirror.h"

namespace dscache {

namespace {

// A manifest lists every shard; even a million shards stay far below this.
constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 30;

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// Runs f(); an Error naming `used` (the /proc/self/fd name a library opened) is renamed to
// `shown`, the name the user knows.
template <typename F>
auto renamed(const std::string& used, const std::string& shown, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (used != shown && (e.path() == used || e.path().empty())) {
      throw Error(e.kind(), shown, e.reason());
    }
    throw;
  }
}

// The header of an npy array that must say `descr`, C order and `shape`, its file size checked
// against it (check_npy_size): its data can then be read in pieces.
NpyHeader check_array(const File& f, const char* descr, const std::vector<uint64_t>& shape) {
  const NpyHeader h = read_npy_header(f);
  if (h.descr != descr) {
    throw Error(ErrorKind::kCorruption, f.path(),
                "dtype is '" + h.descr + "', expected '" + descr + "'");
  }
  if (h.fortran_order) throw Error(ErrorKind::kCorruption, f.path(), "array is in Fortran order");
  if (h.shape != shape) {
    throw Error(ErrorKind::kCorruption, f.path(),
                "shape is " + shape_text(h.shape) + ", expected " + shape_text(shape));
  }
  check_npy_size(h, f.size(), f.path());  // before allocating what the header claims
  return h;
}

// A whole npy array of 8-byte elements (check_array), read straight into its typed vector: no
// byte copy beside it, so a reader holds 8 bytes per element, not 16.
template <typename T>
std::vector<T> read_array(const File& f, const char* descr, const std::vector<uint64_t>& shape) {
  static_assert(sizeof(T) == 8, "npy arrays of 8-byte elements");
  const NpyHeader h = check_array(f, descr, shape);
  std::vector<T> out(static_cast<size_t>((f.size() - h.data_offset) / sizeof(T)));
  if (!out.empty()) f.read_at(h.data_offset, out.size() * sizeof(T), out.data());
  return out;
}

// Calls each(line) for every line of a jsonl file, read in pieces (memory: one piece and the
// longest line, whatever the file's size). Lines as a split of the whole text on '\n' gives
// them: a last line without '\n' counts, an empty last piece does not.
template <typename F>
void for_each_line(const File& f, F each) {
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  const uint64_t size = f.size();
  std::string piece, line;
  for (uint64_t at = 0; at < size;) {
    const uint64_t n = std::min(kPiece, size - at);
    piece.resize(static_cast<size_t>(n));
    f.read_at(at, n, piece.data());
    at += n;
    size_t from = 0;
    for (size_t nl; (nl = piece.find('\n', from)) != std::string::npos; from = nl + 1) {
      line.append(piece, from, nl - from);
      each(line);
      line.clear();
    }
    line.append(piece, from, std::string::npos);
  }
  if (!line.empty()) each(line);
}

// The number of lines for_each_line() gives, counted without keeping any.
uint64_t count_lines(const File& f) {
  uint64_t lines = 0;
  for_each_line(f, [&](const std::string&) { ++lines; });
  return lines;
}

}  // namespace

struct CacheDir::Impl {
  std::string dir;
  std::string real;
  int fd = -1;
  Manifest manifest;
  std::shared_ptr<remote::HeldMirror> held;  // a remote cache: its local copy, held open

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
};

CacheDir::CacheDir(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CacheDir::~CacheDir() = default;

std::shared_ptr<const CacheDir> CacheDir::open(const std::string& location, bool allow_streaming) {
  auto impl = std::make_unique<Impl>();
  // A remote cache is served from its verified local copy (remote/mirror.h), held for as long
  // as this CacheDir lives so that no other process evicts it; every check below then runs on
  // the copy exactly as on a local cache.
  if (is_remote_location(location)) {
    impl->held = remote::mirror(location, remote_options(), nullptr, allow_streaming);
  }
  const std::string dir = impl->held ? impl->held->dir() : location;
  impl->dir = dir;
  do {
    impl->fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (impl->fd < 0 && errno == EINTR);
  if (impl->fd < 0) {
    if (errno == ENOENT) throw Error(ErrorKind::kNotFound, dir, "no such cache directory");
    if (errno == ENOTDIR) throw Error(ErrorKind::kNotFound, dir, "not a directory");
    throw_errno(dir, "open directory");
  }
  // Where the directory is now: what symlinks inside it must lead into.
  char buf[PATH_MAX + 1];
  const std::string link = "/proc/self/fd/" + std::to_string(impl->fd);
  const ssize_t n = ::readlink(link.c_str(), buf, PATH_MAX);
  if (n > 0 && buf[0] == '/') {
    impl->real.assign(buf, static_cast<size_t>(n));
  } else {
    char* resolved = ::realpath(dir.c_str(), nullptr);
    if (resolved == nullptr) throw_errno(dir, "realpath");
    impl->real = resolved;
    std::free(resolved);
  }
  const std::string mpath = dir + "/manifest.json";
  File f;
  try {
    f = File::open_inside(impl->fd, impl->real, "manifest.json", mpath);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) {
      throw Error(ErrorKind::kNotFound, mpath, "no manifest.json: not a cache directory");
    }
    throw;
  }
  impl->manifest = manifest_from_json(f.read_all(kMaxManifestBytes), mpath);
  return std::shared_ptr<const CacheDir>(new CacheDir(std::move(impl)));
}

const Manifest& CacheDir::manifest() const { return impl_->manifest; }
const std::string& CacheDir::dir() const { return impl_->dir; }
const std::string& CacheDir::real_path() const { return impl_->real; }
int CacheDir::fd() const { return impl_->fd; }
const std::shared_ptr<remote::HeldMirror>& CacheDir::remote_copy() const { return impl_->held; }
bool CacheDir::streamed() const { return impl_->held && impl_->held->streamed(); }
std::string CacheDir::path(const std::string& name) const { return impl_->dir + "/" + name; }

File CacheDir::open_file(const std::string& name) const {
  const std::string shown = path(name);
  try {
    return File::open_inside(impl_->fd, impl_->real, name, shown);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) throw;
    throw Error(ErrorKind::kNotFound, shown, "no such file (the manifest names it)");
  }
}

File CacheDir::open_file(const std::string& name, uint64_t expected_bytes) const {
  File f = open_file(name);
  if (f.size() != expected_bytes) {
    throw Error(ErrorKind::kCorruption, f.path(),
                "file holds " + std::to_string(f.size()) + " bytes, manifest says " +
                    std::to_string(expected_bytes));
  }
  return f;
}

std::vector<FileEntry> CacheDir::named_files() const {
  return dscache::named_files(impl_->manifest);
}

std::vector<FileEntry> named_files(const Manifest& m) {
  std::vector<FileEntry> named;
  for (const ShardEntry& s : m.shards) named.push_back({s.file, s.bytes, s.xxh64});
  for (const FileEntry* f : {&m.labels, &m.checksums, &m.sources, &m.skips}) named.push_back(*f);
  if (m.has_index()) named.push_back(m.index);
  for (const ShardEntry& s : m.shards) {
    for (const FieldFiles& f : s.fields) {
      named.push_back(f.values);
      if (!f.offsets.file.empty()) named.push_back(f.offsets);
    }
  }
  return named;
}

void CacheDir::check_files() const {
  for (const FileEntry& f : named_files()) open_file(f.file, f.bytes);
}

std::vector<int64_t> CacheDir::labels() const {
  const Manifest& m = impl_->manifest;
  const File f = open_file(m.labels.file, m.labels.bytes);
  std::vector<int64_t> labels = read_array<int64_t>(f, "<i8", {m.count});
  if (m.classes.empty()) return labels;
  const int64_t classes = static_cast<int64_t>(m.classes.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw Error(ErrorKind::kCorruption, f.path(),
                  "label of sample " + std::to_string(i) + " is " + std::to_string(labels[i]) +
                      ", outside [0, " + std::to_string(classes) + ") classes");
    }
  }
  return labels;
}

std::vector<uint64_t> CacheDir::checksums() const {
  const Manifest& m = impl_->manifest;
  const File f = open_file(m.checksums.file, m.checksums.bytes);
  return read_array<uint64_t>(f, "<u8", checksums_shape());
}

void CacheDir::for_each_source(
    const std::function<void(uint64_t i, std::string&& source)>& each) const {
  const Manifest& m = impl_->manifest;
  const File f = open_file(m.sources.file, m.sources.bytes);
  const uint64_t lines = count_lines(f);  // the count first, as a whole read would
  if (lines != m.count) {
    throw Error(ErrorKind::kCorruption, f.path(),
                "holds " + std::to_string(lines) + " lines, manifest says " +
                    std::to_string(m.count) + " samples");
  }
  uint64_t i = 0;
  for_each_line(f, [&](const std::string& line) {
    const auto j = parse_json_or_discarded(line);
    if (j.is_discarded() || !j.is_string()) {
      throw Error(ErrorKind::kCorruption, f.path(),
                  "line " + std::to_string(i + 1) + " is not a JSON string");
    }
    each(i++, j.get<std::string>());
  });
}

std::vector<std::string> CacheDir::sources() const {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(impl_->manifest.count));
  for_each_source([&](uint64_t, std::string&& s) { out.push_back(std::move(s)); });
  return out;
}

void CacheDir::for_each_skip(const std::function<void(SkipRecord&& skip)>& each) const {
  const Manifest& m = impl_->manifest;
  const File f = open_file(m.skips.file, m.skips.bytes);
  const uint64_t lines = count_lines(f);
  if (lines != m.skipped) {
    throw Error(ErrorKind::kCorruption, f.path(),
                "holds " + std::to_string(lines) + " lines, manifest says " +
                    std::to_string(m.skipped) + " skipped entries");
  }
  uint64_t i = 0;
  for_each_line(f, [&](const std::string& line) {
    const auto j = parse_json_or_discarded(line);
    const bool ok = !j.is_discarded() && j.is_object() && j.contains("source") &&
                    j["source"].is_string() && j.contains("reason") && j["reason"].is_string();
    if (!ok) {
      throw Error(ErrorKind::kCorruption, f.path(),
                  "line " + std::to_string(i + 1) +
                      " is not a skip record {\"source\": string, \"reason\": string}");
    }
    ++i;
    each({j["source"].get<std::string>(), j["reason"].get<std::string>()});
  });
}

std::vector<SkipRecord> CacheDir::skips() const {
  std::vector<SkipRecord> out;
  for_each_skip([&](SkipRecord&& s) { out.push_back(std::move(s)); });
  return out;
}

ShardFile CacheDir::open_shard(size_t k) const {
  const Manifest& m = impl_->manifest;
  if (k >= m.shards.size()) {
    throw Error(ErrorKind::kInvalidArgument, impl_->dir,
                "shard " + std::to_string(k) + " does not exist");
  }
  const ShardEntry& e = m.shards[k];
  ShardFile s;
  s.file = open_file(e.file, e.bytes);
  const std::string used = s.file.fd_path();  // the very file we opened, for HDF5's sake
  const std::string& shown = s.file.path();
  const SampleShape shape{m.height, m.width, m.channels};
  if (m.has_index()) {
    s.loc = renamed(used, shown, [&] { return locate_ragged_shard(m.storage, used); });
    s.data_bytes = s.loc.count;  // bytes; the index accounts for them
  } else {
    s.loc = renamed(used, shown, [&] { return locate_shard(m.storage, used, shape); });
    if (s.loc.count != e.count) {
      throw Error(ErrorKind::kCorruption, shown,
                  "header says " + std::to_string(s.loc.count) + " samples, manifest says " +
                      std::to_string(e.count));
    }
    // locate_shard checked count * sample bytes for overflow and against the file.
    s.data_bytes = s.loc.count * shape.bytes();
  }
  if (s.loc.file_bytes != e.bytes) {  // changed since it was opened
    throw Error(ErrorKind::kCorruption, shown,
                "file holds " + std::to_string(s.loc.file_bytes) + " bytes, manifest says " +
                    std::to_string(e.bytes));
  }
  return s;
}

std::vector<IndexRow> CacheDir::index() const {
  std::vector<uint64_t> data;
  for (size_t k = 0; k < impl_->manifest.shards.size(); ++k) {
    data.push_back(open_shard(k).data_bytes);
  }
  return index(data);
}

std::vector<IndexRow> CacheDir::index(const std::vector<uint64_t>& shard_data_bytes) const {
  const Manifest& m = impl_->manifest;
  if (!m.has_index()) {
    throw Error(ErrorKind::kInvalidArgument, impl_->dir, "a raw fixed cache has no index");
  }
  if (shard_data_bytes.size() != m.shards.size()) {
    throw Error(ErrorKind::kInvalidArgument, impl_->dir, "one data size per shard is needed");
  }
  const File f = open_file(m.index.file, m.index.bytes);
  const std::string& path = f.path();
  const bool jpeg = m.codec == Codec::kJpeg;
  const uint64_t cols = jpeg ? 4 : 3;
  const NpyHeader header = check_array(f, "<i8", {m.count, cols});
  // The rows are read a block at a time (in sample order): the file is not held beside the
  // rows made of it.
  constexpr uint64_t kBlockRows = 8192;
  std::vector<int64_t> block;
  uint64_t block_first = 0, block_rows = 0;
  auto row_at = [&](uint64_t i) -> const int64_t* {
    if (i < block_first || i >= block_first + block_rows) {
      block_first = i;
      block_rows = std::min(kBlockRows, m.count - i);
      block.resize(static_cast<size_t>(block_rows * cols));
      f.read_at(header.data_offset + i * cols * 8, block_rows * cols * 8, block.data());
    }
    return &block[static_cast<size_t>((i - block_first) * cols)];
  };
  std::vector<IndexRow> index(static_cast<size_t>(m.count));
  const uint64_t channels = m.channels;
  // A JPEG frame header holds each side in 16 bits, and libjpeg refuses sides above 65500
  // (JPEG_MAX_DIMENSION): a larger claim can only be a lie, or a sample no reader can decode.
  // Checked here, at open, so it is Corruption naming the index, the sample and its shard.
  const int64_t max_side = jpeg ? 65500 : std::numeric_limits<uint32_t>::max();
  for (size_t k = 0; k < m.shards.size(); ++k) {
    const ShardEntry& s = m.shards[k];
    const bool known = shard_data_bytes[k] != kUnknownDataBytes;
    // Unknown (a streamed shard): every row must still fit in 64 bits.
    const uint64_t data_bytes = known ? shard_data_bytes[k] : kUnknownDataBytes - 1;
    uint64_t next = 0;  // where the next sample of this shard must start
    for (uint64_t i = s.first; i < s.first + s.count; ++i) {
      const int64_t* r = row_at(i);
      const int64_t offset = r[0], length = jpeg ? r[1] : 0, h = r[cols - 2], w = r[cols - 1];
      const std::string row = "row " + std::to_string(i) + " (" + s.file + ")";
      if (offset < 0 || (jpeg && length <= 0) || h <= 0 || w <= 0 || h > max_side || w > max_side) {
        std::string values = std::to_string(offset) + ", ";
        if (jpeg) values += std::to_string(length) + ", ";
        values += std::to_string(h) + ", " + std::to_string(w);
        throw Error(ErrorKind::kCorruption, path,
                    row + ", sample " + std::to_string(i) + ", is (" + values +
                        "): needs offset >= 0, " +
                        (jpeg ? "length > 0, and 0 < h, w <= 65500 (libjpeg's limit)"
                              : "and 0 < h, w < 2^32"));
      }
      if (m.layout == Layout::kFixed && (uint64_t(h) != m.height || uint64_t(w) != m.width)) {
        throw Error(ErrorKind::kCorruption, path,
                    row + " is " + std::to_string(h) + "x" + std::to_string(w) +
                        ", the fixed layout's samples are " + std::to_string(m.height) + "x" +
                        std::to_string(m.width));
      }
      const uint64_t off = static_cast<uint64_t>(offset);
      uint64_t n = static_cast<uint64_t>(length);
      if (!jpeg) {
        const uint64_t pixels = uint64_t(h) * uint64_t(w);  // < 2^64: both < 2^32
        n = pixels > data_bytes / channels ? data_bytes + 1 : pixels * channels;
      }
      if (n > data_bytes || off > data_bytes - n) {
        throw Error(ErrorKind::kCorruption, path,
                    row + ": sample at offset " + std::to_string(off) + " (" +
                        (jpeg ? std::to_string(length) + " bytes"
                              : std::to_string(h) + "x" + std::to_string(w) + "x" +
                                    std::to_string(channels)) +
                        ") passes the end of the shard's " + std::to_string(data_bytes) +
                        " data bytes");
      }
      if (off != next) {
        throw Error(ErrorKind::kCorruption, path,
                    row + ": offset is " + std::to_string(off) + ", expected " +
                        std::to_string(next) + " (a shard's samples are back to back)");
      }
      next = off + n;
      index[static_cast<size_t>(i)] =
          IndexRow{off, n, static_cast<uint32_t>(h), static_cast<uint32_t>(w)};
    }
    if (known && next != data_bytes) {
      throw Error(ErrorKind::kCorruption, path,
                  "the rows of " + s.file + " cover " + std::to_string(next) +
                      " bytes, the shard holds " + std::to_string(data_bytes));
    }
  }
  return index;
}

FieldShardFile CacheDir::open_field(size_t k, size_t f, const std::vector<IndexRow>* index) const {
  const Manifest& m = impl_->manifest;
  if (k >= m.shards.size() || f >= m.fields.size()) {
    throw Error(ErrorKind::kInvalidArgument, impl_->dir,
                "shard " + std::to_string(k) + ", field " + std::to_string(f) + " does not exist");
  }
  const ShardEntry& s = m.shards[k];
  const FieldSpec& spec = m.fields[f];
  const FieldFiles& files = s.fields[f];
  FieldShardFile out;
  out.values = open_file(files.values.file, files.values.bytes);
  const std::string& vpath = out.values.path();
  const NpyHeader h = read_npy_header(out.values);
  if (h.descr != npy_descr(spec.dtype)) {
    throw Error(ErrorKind::kCorruption, vpath,
                "dtype is '" + h.descr + "', field '" + spec.name + "' is " +
                    to_string(spec.dtype) + " ('" + npy_descr(spec.dtype) + "')");
  }
  if (h.fortran_order) throw Error(ErrorKind::kCorruption, vpath, "array is in Fortran order");
  check_npy_size(h, out.values.size(), vpath);
  out.data_offset = h.data_offset;
  out.data_bytes = h.data_bytes();
  if (!has_offsets(spec, m.layout)) {
    out.rows = s.count;
  } else {
    const File of = open_file(files.offsets.file, files.offsets.bytes);
    out.offsets = read_array<int64_t>(of, "<i8", {s.count + 1});
    for (size_t i = 0; i < out.offsets.size(); ++i) {
      const int64_t prev = i == 0 ? 0 : out.offsets[i - 1];
      if (out.offsets[i] < prev || (i == 0 && out.offsets[0] != 0)) {
        // Offset i ends sample i - 1 of the shard (and starts sample i): name the sample.
        const uint64_t sample = s.first + (i == 0 ? 0 : i - 1);
        throw Error(ErrorKind::kCorruption, of.path(),
                    "sample " + std::to_string(sample) + ": offset " + std::to_string(i) + " is " +
                        std::to_string(out.offsets[i]) +
                        (i == 0 ? ", expected 0"
                                : ", below the one before it (" + std::to_string(prev) + ")"));
      }
    }
    out.rows = static_cast<uint64_t>(out.offsets.back());
    if (index != nullptr && spec.kind == FieldKind::kMask) {
      for (uint64_t i = 0; i < s.count; ++i) {
        const IndexRow& r = (*index)[s.first + i];
        const uint64_t want = uint64_t{r.height} * r.width;
        const uint64_t got = static_cast<uint64_t>(out.offsets[i + 1] - out.offsets[i]);
        if (got != want) {
          throw Error(ErrorKind::kCorruption, of.path(),
                      "sample " + std::to_string(s.first + i) + "'s mask holds " +
                          std::to_string(got) + " pixels, its image " + std::to_string(r.height) +
                          "x" + std::to_string(r.width));
        }
      }
    }
  }
  const std::vector<uint64_t> want =
      detail::values_shape(spec, m.layout, m.height, m.width, s.count, out.rows);
  if (h.shape != want) {
    throw Error(ErrorKind::kCorruption, vpath,
                "shape is " + shape_text(h.shape) + ", expected " + shape_text(want) +
                    (has_offsets(spec, m.layout) ? " (rows from " + files.offsets.file + ")" : ""));
  }
  return out;
}

}  // namespace dscache
