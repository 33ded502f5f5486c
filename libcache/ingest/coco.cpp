// COCO instances annotations: sniffing, opening and reading segmentations again, and listing
// them as build entries with fields. The streamed parse: coco_parse.cpp. Masks (RLE strings,
// rasterising, mask images): coco_mask.cpp.
#include "dscache/ingest/coco.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coco_parse.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/remote.h"
#include "json/stream.h"
#include "list_internal.h"

namespace dscache {
namespace {

using json = nlohmann::json;
using ingest_detail::BytesAt;
using ingest_detail::kMaxJsonBytes;

// read_segmentations reads an image's annotations with one read when fewer bytes than this lie
// between them.
constexpr uint64_t kSpanSlack = uint64_t{64} << 10;

[[noreturn]] void corrupt(const std::string& path, const std::string& reason) {
  throw Error(ErrorKind::kCorruption, path, reason);
}

// Stops at the first event that tells: the top level is not an object (false), or it has shown
// all three arrays (true).
class CocoSniffer : public nlohmann::json_sax<json> {
 public:
  bool is_coco() const { return found_ == 7; }
  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool string(string_t&) override { return scalar(); }
  bool binary(binary_t&) override { return scalar(); }
  bool start_object(std::size_t) override {
    if (depth_ == 0 && started_) return false;
    started_ = true;
    ++depth_;
    key_.clear();
    return true;
  }
  bool end_object() override { return --depth_ > 0; }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = k;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 0) return false;
    if (depth_ == 1) {
      if (key_ == "images") found_ |= 1;
      if (key_ == "annotations") found_ |= 2;
      if (key_ == "categories") found_ |= 4;
      if (found_ == 7) return false;
    }
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool scalar() { return depth_ > 0; }
  int depth_ = 0;
  bool started_ = false;
  int found_ = 0;
  std::string key_;
};

template <typename T>
void append_le(std::vector<uint8_t>& out, T v) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8, "element size");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  for (size_t b = 0; b < sizeof v; ++b) out.push_back(static_cast<uint8_t>(bits >> (8 * b)));
}

}  // namespace

bool is_coco_instances(const std::string& path) {
  try {
    File f = File::open(path);
    // A first look: JSON objects start with '{' (after a BOM and blanks); anything else is
    // told apart without reading the whole file.
    char head[64];
    const uint64_t n = std::min<uint64_t>(sizeof head, f.size());
    f.read_at(0, n, head);
    size_t i = (n >= 3 && std::memcmp(head, "\xEF\xBB\xBF", 3) == 0) ? 3 : 0;
    while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')) {
      ++i;
    }
    if (i == n || head[i] != '{' || f.size() > kMaxJsonBytes) return false;
    JsonStreamBuf in(f, nullptr);
    std::istream stream(&in);
    CocoSniffer sniffer;
    json::sax_parse(stream, &sniffer);
    return sniffer.is_coco();
  } catch (const std::exception&) {
    return false;
  }
}

namespace {

// The file at `abs`, open, with its mtime, refused past kMaxJsonBytes (as read_all refuses it).
File open_json(const std::string& abs, int64_t* mtime_ns) {
  File f = File::open(abs);
  if (f.size() > kMaxJsonBytes) {
    corrupt(abs, "file holds " + std::to_string(f.size()) + " bytes, more than the " +
                     std::to_string(kMaxJsonBytes) + " allowed");
  }
  struct stat st;
  if (::fstat(f.fd(), &st) != 0) throw_errno(abs, "fstat");
  *mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return f;
}

BytesAt file_bytes(const File& f) {
  return [&f](uint64_t offset, uint32_t length) {
    std::string out(length, '\0');
    f.read_at(offset, length, &out[0]);
    return out;
  };
}

// Parses the open file `f` at `abs`, feeding its bytes to `hash` when not null.
CocoInstances parse_coco_file(const File& f, int64_t mtime_ns, const std::string& abs,
                              Xxh64* hash) {
  JsonStreamBuf in(f, hash);
  CocoInstances coco = ingest_detail::parse_coco(in, abs, file_bytes(f));
  coco.file_size = f.size();
  coco.file_mtime_ns = mtime_ns;
  return coco;
}

SourceListing list_parsed(std::shared_ptr<CocoInstances> coco, Xxh64 h,
                          const SourceOptions& options);

}  // namespace

CocoInstances read_coco_instances(const std::string& path) {
  const std::string abs = absolute_path(path);
  int64_t mtime_ns = 0;
  const File f = open_json(abs, &mtime_ns);
  return parse_coco_file(f, mtime_ns, abs, nullptr);
}

std::vector<CocoSegmentation> read_segmentations(const CocoInstances& coco, size_t k) {
  const CocoImage& img = coco.images.at(k);
  std::vector<CocoSegmentation> out;
  if (img.annotations.empty()) return out;
  out.reserve(img.annotations.size());
  std::optional<File> f;
  std::string span;
  BytesAt bytes_at;
  if (coco.held) {
    bytes_at = [&coco](uint64_t offset, uint32_t length) {
      if (offset > coco.held->size() || length > coco.held->size() - offset) {
        throw Error(ErrorKind::kInvalidArgument, coco.path,
                    "an annotation's bytes lie past the held text");
      }
      return coco.held->substr(offset, length);
    };
  } else {
    if (is_remote_location(coco.path)) {
      throw Error(ErrorKind::kUnsupported, coco.path,
                  "its annotations' bytes were not kept when it was listed (only "
                  "--coco-mask semantic keeps them for a file on object storage)");
    }
    int64_t mtime_ns = 0;
    f.emplace(File::open(coco.path));
    struct stat st;
    if (::fstat(f->fd(), &st) != 0) throw_errno(coco.path, "fstat");
    mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (f->size() != coco.file_size || mtime_ns != coco.file_mtime_ns) {
      throw Error(ErrorKind::kCorruption, coco.path,
                  "changed since it was listed (" + std::to_string(coco.file_size) +
                      " bytes then, " + std::to_string(f->size()) +
                      " now, or another mtime): its masks are read from it; list it again");
    }
    bytes_at = file_bytes(*f);
    // One read when the annotations lie together (files that list them image by image).
    uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
    for (const CocoAnnotation& a : img.annotations) {
      lo = std::min(lo, a.offset);
      hi = std::max(hi, a.offset + a.length);
      sum += a.length;
    }
    if (hi - lo <= sum + kSpanSlack) {
      span.resize(hi - lo);
      f->read_at(lo, span.size(), &span[0]);
      bytes_at = [&span, lo](uint64_t offset, uint32_t length) {
        return span.substr(offset - lo, length);
      };
    }
  }
  for (const CocoAnnotation& a : img.annotations) {
    out.push_back(ingest_detail::segmentation_at(bytes_at, a.offset, a.length, coco.path));
  }
  return out;
}

SourceListing list_coco(const std::string& path, const SourceOptions& options) {
  const std::string abs = absolute_path(path);
  int64_t mtime_ns = 0;
  const File f = open_json(abs, &mtime_ns);
  Xxh64 h;
  auto coco = std::make_shared<CocoInstances>(parse_coco_file(f, mtime_ns, abs, &h));
  return list_parsed(std::move(coco), h, options);
}

SourceListing ingest_detail::list_coco_text(const std::string& abs, const std::string& text,
                                            const SourceOptions& options) {
  const BytesAt text_bytes = [&text](uint64_t offset, uint32_t length) {
    return text.substr(offset, length);
  };
  JsonStreamBuf in(text);
  auto coco = std::make_shared<CocoInstances>(ingest_detail::parse_coco(in, abs, text_bytes));
  if (!is_remote_location(abs)) {
    // Masks read the annotations again from the file: it must be the text parsed here.
    const ingest_detail::FileStat st = ingest_detail::stat_follow(abs);
    if (st.size != text.size()) {
      throw Error(ErrorKind::kCorruption, abs,
                  "changed since it was listed (" + std::to_string(text.size()) + " bytes read, " +
                      std::to_string(st.size) + " now): list it again");
    }
    coco->file_size = st.size;
    coco->file_mtime_ns = st.mtime_ns;
  } else if (options.coco_mask == "semantic") {
    // Nothing to read again on object storage: keep the images' annotations' bytes (most of
    // the file, only when masks are made).
    uint64_t total = 0;
    for (const CocoImage& img : coco->images) {
      for (const CocoAnnotation& a : img.annotations) total += a.length;
    }
    auto held = std::make_shared<std::string>();
    held->reserve(total);
    for (CocoImage& img : coco->images) {
      for (CocoAnnotation& a : img.annotations) {
        const uint64_t at = held->size();
        held->append(text, a.offset, a.length);
        a.offset = at;
      }
    }
    coco->held = std::move(held);
  }
  Xxh64 h;
  h.update(text.data(), text.size());
  return list_parsed(std::move(coco), h, options);
}

namespace {

// The listing of parsed COCO instances; `h` has seen the file's bytes.
SourceListing list_parsed(std::shared_ptr<CocoInstances> coco, Xxh64 h,
                          const SourceOptions& options) {
  const std::string& abs = coco->path;
  // The file first: a broken one is named as such whatever the options.
  ingest_detail::check_options_apply(abs, options, false, true);
  if (options.image_root.empty()) {
    throw SourceOptionError(
        ErrorKind::kInvalidArgument, abs,
        "a COCO instances file needs --image-root (the folder its file_name are in)");
  }
  const bool mask = options.coco_mask == "semantic";
  if (!mask && !options.coco_mask.empty() && options.coco_mask != "none") {
    throw SourceOptionError(ErrorKind::kInvalidArgument, abs,
                            "--coco-mask " + options.coco_mask + ": expected none or semantic");
  }
  if (mask && coco->categories.size() > 255) {
    throw Error(ErrorKind::kUnsupported, abs,
                std::to_string(coco->categories.size()) +
                    " categories: --coco-mask semantic stores uint8 masks (at most 255)");
  }
  const std::string root = absolute_path(options.image_root);

  SourceListing out;
  out.kind = "coco";
  out.root = abs;
  out.labels_path = absolute_path(options.image_root);  // the manifest's source.labels: where
                                                        // the images are (verify --source)
  FieldSpec boxes{"boxes", FieldKind::kBoxes, FieldType::kFloat32, {4}, "", {}};
  FieldSpec labels{"box_labels", FieldKind::kRows, FieldType::kInt64,
                   {},           "boxes",          coco->categories};
  FieldSpec crowd{"box_crowd", FieldKind::kRows, FieldType::kUint8, {}, "boxes", {}};
  FieldSpec image_id{"image_id", FieldKind::kScalar, FieldType::kInt64, {}, "", {}};
  out.fields = {boxes, labels, crowd, image_id};
  if (mask) {
    FieldSpec m{"mask", FieldKind::kMask, FieldType::kUint8, {}, "", {"background"}};
    m.classes.insert(m.classes.end(), coco->categories.begin(), coco->categories.end());
    out.fields.push_back(std::move(m));
  }
  const size_t nf = out.fields.size();
  out.columns.values.assign(nf, {});
  out.columns.offsets.assign(nf, std::vector<uint64_t>{0});

  out.entries.set_path_prefix(root + "/");
  std::vector<std::string> paths;
  paths.reserve(coco->images.size());
  for (const CocoImage& img : coco->images) {
    paths.push_back(ingest_detail::resolve_listed_path(root, img.file_name));
  }
  std::vector<ingest_detail::FileStat> stats = ingest_detail::stat_listed(paths);
  for (size_t k = 0; k < coco->images.size(); ++k) {
    const CocoImage& img = coco->images[k];
    SourceEntry e;
    e.name = img.file_name;
    e.path = paths[k];
    if (stats[k].is_file) {
      e.size = stats[k].size;
      e.mtime_ns = stats[k].mtime_ns;
      e.etag = std::move(stats[k].etag);
    }
    e.bad = img.bad.empty()
                ? ingest_detail::path_problem(img.file_name, root, options.confine, "--image-root")
                : img.bad;
    auto& v = out.columns.values;
    if (e.bad.empty()) {
      for (const CocoAnnotation& a : img.annotations) {
        for (float c : a.box) append_le(v[0], c);
        append_le(v[1], static_cast<int64_t>(a.category));
        append_le(v[2], static_cast<uint8_t>(a.crowd ? 1 : 0));
      }
      append_le(v[3], img.id);
    }
    for (size_t f = 0; f < nf; ++f) out.columns.offsets[f].push_back(v[f].size());
    h.update(e.name.data(), e.name.size());
    h.update("\0", 1);
    h.update(&e.size, sizeof e.size);
    h.update(&e.mtime_ns, sizeof e.mtime_ns);
    if (!e.etag.empty()) h.update(e.etag.data(), e.etag.size() + 1);  // remote: what changes
    out.entries.push_back(std::move(e));
  }
  out.digest = h.digest();
  out.coco = std::move(coco);
  return out;
}

}  // namespace
}  // namespace dscache
