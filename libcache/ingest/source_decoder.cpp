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
#include "dscache/ingest/source_list.h"

namespace dscache {

bool read_whole_file(const std::string& path, std::vector<uint8_t>& buf, std::string& reason) {
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

SourceDecoder::SourceDecoder(const Manifest& m, std::vector<std::string> names, std::string root)
    : SourceDecoder(m, std::move(names), std::move(root), UINT64_MAX) {}

SourceDecoder::SourceDecoder(const Manifest& m, std::vector<std::string> names, std::string root,
                             uint64_t samples)
    : m_(m), names_(std::move(names)), root_(std::move(root)) {
  const bool ragged = m.layout == Layout::kRagged;
  opt_.height = ragged ? 1 : m.recipe.height;  // unused by the ragged decode
  opt_.width = ragged ? 1 : m.recipe.width;
  opt_.channels = m.recipe.channels;
  opt_.resize = m.recipe.resize;
  opt_.reduced_decode = m.recipe.reduced_decode;
  opt_.max_pixels = m.recipe.max_pixels;
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
  const bool ragged = m_.layout == Layout::kRagged;
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
    if (ragged) {
      resize_pixels_ragged(idx_->image(k), idx_->rows, idx_->cols, 1, opt_.channels,
                           m_.recipe.max_side, out, &h, &w);
    } else {
      out->resize(m_.sample_bytes());
      resize_pixels(idx_->image(k), idx_->rows, idx_->cols, 1, opt_, out->data());
    }
    return true;
  }
  thread_local std::vector<uint8_t> file;
  const std::string p = path(i);
  std::string why;
  if (!read_whole_file(p, file, why)) {
    *reason = p + ": " + why;
    return false;
  }
  DecodeResult d;
  if (ragged) {
    d = decode_image_ragged(file.data(), file.size(), opt_, m_.recipe.max_side, out, &h, &w);
  } else {
    out->resize(m_.sample_bytes());
    d = decode_image(file.data(), file.size(), opt_, out->data());
  }
  if (!d.ok) *reason = p + ": " + d.reason;
  return d.ok;
}

}  // namespace dscache
