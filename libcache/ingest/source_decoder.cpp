#include "dscache/ingest/source_decoder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/remote.h"

namespace dscache {

bool read_whole_file(const std::string& path, std::vector<uint8_t>& buf, std::string& reason) {
  if (is_remote_location(path)) {
    try {
      read_remote(path, &buf);
      return true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotFound) throw;
      reason = "no such object (HTTP 404)";
      return false;
    }
  }
  File file;
  try {
    file = File::open(path);  // never blocks on a FIFO; refuses devices (/dev/zero never ends)
  } catch (const Error& e) {
    reason =
        e.kind() == ErrorKind::kNotFound ? "cannot open: No such file or directory" : e.reason();
    return false;
  }
  buf.resize(static_cast<size_t>(file.size()));
  size_t got = 0;
  while (true) {
    if (got == buf.size()) buf.resize(got + (got >> 1) + 4096);  // file grew while we read
    ssize_t n = ::read(file.fd(), buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      reason = std::string("read error: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  buf.resize(got);
  return true;
}

namespace {

// The bytes just read are those the listing saw (its size and modification time, recorded in
// the manifest's source digest) only if the file still has that size and time now: a file
// deleted, truncated or rewritten since the listing is refused, never a sample of other bytes.
bool unchanged_since_listing(const std::string& path, const SourceEntry& e, size_t bytes_read,
                             std::string* reason) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    *reason = "vanished while the build ran";
    return false;
  }
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  if (bytes_read != e.size || static_cast<uint64_t>(st.st_size) != e.size ||
      mtime_ns != e.mtime_ns) {
    *reason = "changed while the build ran (listed " + std::to_string(e.size) + " bytes, read " +
              std::to_string(bytes_read) + ", now " + std::to_string(st.st_size) +
              (mtime_ns != e.mtime_ns ? ", modified)" : ")");
    return false;
  }
  return true;
}

// A source on object storage: the object's bytes, if it is still what the listing saw (its size
// and ETag, none when the listing found no such object; verify --source has no listing); a
// missing object is a skip like a missing file, and so is one that changed. Any
// other failure (refused, the server gone after the retries) stops the build: skipping every
// image of an unreachable bucket would publish an empty cache.
const std::vector<uint8_t>* read_listed_object(const std::string& url, const SourceEntry* e,
                                               std::string* reason) {
  thread_local std::vector<uint8_t> bytes;
  std::string etag;
  try {
    etag = read_remote(url, &bytes);
  } catch (const Error& err) {
    if (err.kind() != ErrorKind::kNotFound) throw;
    // An object the listing saw has an ETag; one a table names that was not there has none.
    *reason = e != nullptr && !e->etag.empty() ? "vanished while the build ran (HTTP 404)"
                                               : "no such object (HTTP 404)";
    return nullptr;
  }
  if (e != nullptr && (bytes.size() != e->size || etag != e->etag)) {
    *reason = "changed while the build ran (listed " + std::to_string(e->size) + " bytes, ETag " +
              e->etag + "; read " + std::to_string(bytes.size()) + " bytes, ETag " + etag + ")";
    return nullptr;
  }
  return &bytes;
}

// The file's bytes, in a buffer of the calling thread's (grows to the largest file it has read),
// or null with *reason.
const std::vector<uint8_t>* read_listed_file(const std::string& path, const SourceEntry* listed,
                                             std::string* reason) {
  thread_local std::vector<uint8_t> bytes;
  if (is_remote_location(path)) return read_listed_object(path, listed, reason);
  if (!read_whole_file(path, bytes, *reason)) return nullptr;
  if (listed != nullptr && !unchanged_since_listing(path, *listed, bytes.size(), reason)) {
    return nullptr;
  }
  return &bytes;
}

}  // namespace

RecipeDecoder::RecipeDecoder(const BuildRecipe& r, Layout layout)
    : layout_(layout), max_side_(r.max_side) {
  const bool ragged = layout == Layout::kRagged;
  opt_.height = ragged ? 1 : r.height;  // unused by the ragged decode
  opt_.width = ragged ? 1 : r.width;
  opt_.channels = r.channels;
  opt_.resize = r.resize;
  opt_.reduced_decode = r.reduced_decode;
  opt_.max_pixels = r.max_pixels;
  opt_.alpha = r.alpha;
  std::copy(r.background, r.background + 3, opt_.background);
}

size_t RecipeDecoder::fixed_bytes() const {
  return layout_ == Layout::kRagged ? 0 : size_t{opt_.height} * opt_.width * opt_.channels;
}

bool RecipeDecoder::decode_file(const std::string& path, const SourceEntry* listed,
                                std::vector<uint8_t>* out, uint32_t* h, uint32_t* w,
                                std::string* reason, SampleGeometry* geometry,
                                bool* transparent) const {
  const std::vector<uint8_t>* bytes = read_listed_file(path, listed, reason);
  if (bytes == nullptr) return false;
  DecodeResult d;
  if (layout_ == Layout::kRagged) {
    d = decode_image_ragged(bytes->data(), bytes->size(), opt_, max_side_, out, h, w);
  } else {
    out->resize(fixed_bytes());
    d = decode_image(bytes->data(), bytes->size(), opt_, out->data());
    *h = opt_.height;
    *w = opt_.width;
  }
  *reason = d.reason;
  if (transparent != nullptr) *transparent = d.transparent;
  if (d.ok && geometry != nullptr) {
    *geometry = layout_ == Layout::kRagged
                    ? ragged_geometry(d.decoded_width, d.decoded_height, d.reduction, *w, *h)
                    : fixed_geometry(d.decoded_width, d.decoded_height, d.reduction, opt_);
    if (d.reduction == 1) {
      geometry->source_width = d.decoded_width;
      geometry->source_height = d.decoded_height;
    } else {
      geometry->source_width = d.source_width;
      geometry->source_height = d.source_height;
    }
  }
  return d.ok;
}

bool RecipeDecoder::decode_file(const std::string& path, const SourceEntry* listed, uint8_t* out,
                                std::string* reason) const {
  if (layout_ == Layout::kRagged) {
    throw Error(ErrorKind::kInvalidArgument, path, "ragged samples need a growable buffer");
  }
  const std::vector<uint8_t>* bytes = read_listed_file(path, listed, reason);
  if (bytes == nullptr) return false;
  const DecodeResult d = decode_image(bytes->data(), bytes->size(), opt_, out);
  *reason = d.reason;
  return d.ok;
}

void RecipeDecoder::decode_pixels(const uint8_t* src, uint32_t src_h, uint32_t src_w,
                                  uint32_t src_channels, std::vector<uint8_t>* out, uint32_t* h,
                                  uint32_t* w) const {
  if (layout_ == Layout::kRagged) {
    resize_pixels_ragged(src, src_h, src_w, src_channels, opt_.channels, max_side_, out, h, w);
    return;
  }
  out->resize(fixed_bytes());
  resize_pixels(src, src_h, src_w, src_channels, opt_, out->data());
  *h = opt_.height;
  *w = opt_.width;
}

SourceDecoder::SourceDecoder(const Manifest& m, std::vector<std::string> names, std::string root)
    : SourceDecoder(m, std::move(names), std::move(root), UINT64_MAX) {}

SourceDecoder::SourceDecoder(const Manifest& m, std::vector<std::string> names, std::string root,
                             uint64_t samples)
    : m_(m), names_(std::move(names)), root_(std::move(root)), decoder_(m.recipe, m.layout) {
  // A COCO source's images are under its image root (source.labels), not beside the JSON.
  if (m.source.kind == "coco" && root_ == m.source.root) root_ = m.source.labels;
  // As the build decoded them: a sample with a mask or boxes ignores EXIF orientation.
  for (const FieldSpec& f : m.fields) {
    if (f.kind == FieldKind::kMask || f.kind == FieldKind::kBoxes) {
      decoder_.set_ignore_orientation(true);
    }
  }
  if (m.source.kind == "idx") {
    uint64_t records = UINT64_MAX;  // all
    if (samples < names_.size()) {
      records = 0;  // one past the highest record samples [0, samples) name
      for (uint64_t i = 0; i < samples; ++i) {
        const auto hash = names_[i].rfind('#');
        if (hash == std::string::npos) continue;
        records = std::max<uint64_t>(records,
                                     std::strtoull(names_[i].c_str() + hash + 1, nullptr, 10) + 1);
      }
    }
    idx_ = std::make_shared<IdxImages>(read_idx_images(root_, records));
  }
}

std::string SourceDecoder::path(uint64_t i) const {
  return source_entry_path(m_.source.kind, root_, names_[i]);
}

bool SourceDecoder::decode(uint64_t i, std::vector<uint8_t>* out, std::string* reason) const {
  uint32_t h = 0, w = 0;
  if (idx_) {
    const std::string& n = names_[i];
    const auto hash = n.rfind('#');
    const uint64_t k =
        hash == std::string::npos ? UINT64_MAX : std::strtoull(n.c_str() + hash + 1, nullptr, 10);
    if (k >= idx_->count) {
      *reason = "no image '" + n + "' in " + root_;
      return false;
    }
    decoder_.decode_pixels(idx_->image(k), idx_->rows, idx_->cols, 1, out, &h, &w);
    return true;
  }
  const std::string p = path(i);
  std::string why;
  if (decoder_.decode_file(p, nullptr, out, &h, &w, &why)) return true;
  *reason = p + ": " + why;
  return false;
}

}  // namespace dscache
