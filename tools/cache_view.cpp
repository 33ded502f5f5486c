#include "cache_view.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dscache/error.h"
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
                  "truncated: holds " + std::to_string(h.data_offset + got) + " bytes, header needs " +
                      std::to_string(h.data_offset + out.size()));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
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

void CacheView::read_sample(uint64_t i, uint8_t* out) {
  if (i >= m_.count) {
    throw Error(ErrorKind::kInvalidArgument, dir_,
                "sample " + std::to_string(i) + " out of range (count " +
                    std::to_string(m_.count) + ")");
  }
  const ShardEntry& s = shard_of(i);
  size_t k = static_cast<size_t>(&s - m_.shards.data());
  SampleShape shape{m_.height, m_.width, m_.channels};
  auto it = located_.find(k);
  if (it == located_.end()) {
    ShardLocation loc = locate_shard(m_.storage, path(s.file), shape);
    if (loc.count != s.count) {
      throw Error(ErrorKind::kCorruption, path(s.file),
                  "holds " + std::to_string(loc.count) + " samples, manifest says " +
                      std::to_string(s.count));
    }
    it = located_.emplace(k, loc).first;
  }
  read_shard_samples(m_.storage, path(s.file), it->second, shape, i - s.first, 1, out);
}

}  // namespace dscache
