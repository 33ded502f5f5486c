#include "cache_view.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/npy.h"

namespace dscache {

std::vector<uint8_t> read_npy_vector(const std::string& path, const std::string& descr,
                                     uint64_t count) {
  NpyHeader h = read_npy_header(path);
  if (h.descr != descr || h.shape.size() != 1 || h.shape[0] != count) {
    std::string shape;
    for (auto d : h.shape) shape += std::to_string(d) + ",";
    throw Error(ErrorKind::kCorruption, path,
                "expected (" + std::to_string(count) + ",) " + descr + ", header says (" + shape +
                    ") " + h.descr);
  }
  return read_npy_data(path, h);
}

std::vector<uint8_t> read_npy_data(const std::string& path, const NpyHeader& h) {
  std::vector<uint8_t> out(h.data_bytes());
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(path, "open");
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd, out.data() + got, out.size() - got, h.data_offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      if (n < 0) throw_errno(path, "read");
      throw Error(ErrorKind::kCorruption, path,
                  "truncated: holds " + std::to_string(h.data_offset + got) +
                      " bytes, header needs " + std::to_string(h.data_offset + out.size()));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

std::vector<uint8_t> read_npy_vector_2d(const std::string& path, uint64_t rows, uint64_t cols) {
  NpyHeader h = read_npy_header(path);
  if (h.descr != "<i8" || h.shape.size() != 2 || h.shape[0] != rows || h.shape[1] != cols) {
    throw Error(
        ErrorKind::kCorruption, path,
        "expected a (" + std::to_string(rows) + ", " + std::to_string(cols) + ") <i8 array");
  }
  return read_npy_data(path, h);
}

CacheView::CacheView(std::string dir) : dir_(std::move(dir)), m_(read_manifest(dir_)) {}

std::vector<int64_t> CacheView::labels() const {
  auto raw = read_npy_vector(path(m_.labels.file), "<i8", m_.count);
  std::vector<int64_t> out(m_.count);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::vector<uint64_t> CacheView::checksums() const {
  auto raw = read_npy_vector(path(m_.checksums.file), "<u8", m_.count);
  std::vector<uint64_t> out(m_.count);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::vector<std::string> CacheView::sources() const {
  std::string p = path(m_.sources.file);
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(ErrorKind::kNotFound, p, "cannot open");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    try {
      out.push_back(nlohmann::json::parse(line).get<std::string>());
    } catch (const std::exception&) {
      throw Error(ErrorKind::kCorruption, p,
                  "line " + std::to_string(out.size() + 1) + " is not a JSON string");
    }
  }
  if (out.size() != m_.count) {
    throw Error(ErrorKind::kCorruption, p,
                "holds " + std::to_string(out.size()) + " lines, manifest says " +
                    std::to_string(m_.count) + " samples");
  }
  return out;
}

std::vector<SkipRecord> CacheView::skips() const {
  std::string p = path(m_.skips.file);
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(ErrorKind::kNotFound, p, "cannot open");
  std::vector<SkipRecord> out;
  std::string line;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      out.push_back({j.at("source").get<std::string>(), j.at("reason").get<std::string>()});
    } catch (const std::exception&) {
      throw Error(ErrorKind::kCorruption, p,
                  "line " + std::to_string(out.size() + 1) + " is not a skip record");
    }
  }
  return out;
}

const ShardEntry& CacheView::shard_of(uint64_t i) const {
  auto it = std::upper_bound(m_.shards.begin(), m_.shards.end(), i,
                             [](uint64_t v, const ShardEntry& s) { return v < s.first; });
  return *(it - 1);
}

std::vector<int64_t> CacheView::index() const {
  auto raw = read_npy_vector_2d(path(m_.index.file), m_.count, index_columns());
  std::vector<int64_t> out(raw.size() / 8);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

void CacheView::read_sample(uint64_t i, std::vector<uint8_t>* out, uint32_t* height,
                            uint32_t* width) {
  if (m_.codec != Codec::kJpeg) {
    read_stored(i, out, height, width);
    return;
  }
  std::vector<uint8_t> stored;
  read_stored(i, &stored, height, width);
  out->resize(size_t{*height} * *width * m_.channels);
  JpegScratch scratch;
  try {
    jpeg_decode(stored.data(), stored.size(), *height, *width, m_.channels, out->data(), &scratch);
  } catch (const Error& e) {
    throw Error(e.kind(), path(shard_of(i).file),
                "sample " + std::to_string(i) + ": " + e.reason());
  }
}

void CacheView::read_stored(uint64_t i, std::vector<uint8_t>* out, uint32_t* height,
                            uint32_t* width) {
  if (i >= m_.count) {
    throw Error(
        ErrorKind::kInvalidArgument, dir_,
        "sample " + std::to_string(i) + " out of range (count " + std::to_string(m_.count) + ")");
  }
  const ShardEntry& s = shard_of(i);
  size_t k = static_cast<size_t>(&s - m_.shards.data());
  const bool ragged = m_.has_index();  // byte shards located through the index
  SampleShape shape{m_.height, m_.width, m_.channels};
  auto it = located_.find(k);
  if (it == located_.end()) {
    ShardLocation loc = ragged ? locate_ragged_shard(m_.storage, path(s.file))
                               : locate_shard(m_.storage, path(s.file), shape);
    if (!ragged && loc.count != s.count) {
      throw Error(ErrorKind::kCorruption, path(s.file),
                  "holds " + std::to_string(loc.count) + " samples, manifest says " +
                      std::to_string(s.count));
    }
    it = located_.emplace(k, loc).first;
  }
  if (!ragged) {
    *height = m_.height;
    *width = m_.width;
    out->resize(shape.bytes());
    read_shard_samples(m_.storage, path(s.file), it->second, shape, i - s.first, 1, out->data());
    return;
  }
  if (index_.empty()) index_ = index();
  const uint64_t cols = index_columns();
  const int64_t* row = &index_[cols * i];
  const int64_t h = row[cols - 2], w = row[cols - 1];
  const bool sides_ok = h > 0 && w > 0 && h <= UINT32_MAX && w <= UINT32_MAX;
  // Raw: h*w*C (< 2^66 / 2^2 for sides < 2^32); JPEG: the stored length.
  const uint64_t bytes = !sides_ok   ? 0
                         : cols == 4 ? (row[1] > 0 ? static_cast<uint64_t>(row[1]) : 0)
                                     : uint64_t(h) * uint64_t(w) * m_.channels;
  const uint64_t data = it->second.count;
  if (row[0] < 0 || bytes == 0 || bytes > data || static_cast<uint64_t>(row[0]) > data - bytes) {
    throw Error(ErrorKind::kCorruption, path(m_.index.file),
                "row " + std::to_string(i) + " points outside " + s.file);
  }
  *height = static_cast<uint32_t>(h);
  *width = static_cast<uint32_t>(w);
  out->resize(bytes);
  read_shard_bytes(m_.storage, path(s.file), it->second, static_cast<uint64_t>(row[0]), bytes,
                   out->data());
}

}  // namespace dscache
