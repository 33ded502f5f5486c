// Read access to a built cache's side files and samples, for inspect and verify.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {

struct SkipRecord {
  std::string source;  // as recorded in skipped.jsonl
  std::string reason;
};

// Opens a cache by its manifest; reads everything else on demand. Not thread-safe.
class CacheView {
 public:
  explicit CacheView(std::string dir);  // throws NotFound / Corruption

  const Manifest& manifest() const { return m_; }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }

  // Each throws Corruption naming the file when it disagrees with the manifest.
  std::vector<int64_t> labels() const;
  std::vector<uint64_t> checksums() const;
  std::vector<std::string> sources() const;
  std::vector<SkipRecord> skips() const;

  // Values per index row: 3 for raw ragged (offset in its shard's data, height, width), 4 for
  // JPEG (offset, length, height, width).
  uint64_t index_columns() const { return m_.codec == Codec::kJpeg ? 4 : 3; }
  // The index (raw ragged layout, JPEG caches): index_columns() values per sample.
  std::vector<int64_t> index() const;

  // Copies sample i's pixels into *out (resized to its bytes; JPEG samples are decoded) and sets
  // its size. Any layout and codec.
  void read_sample(uint64_t i, std::vector<uint8_t>* out, uint32_t* height, uint32_t* width);
  // Sample i's bytes as stored (the JPEG stream for codec jpeg), with its decoded size.
  void read_stored(uint64_t i, std::vector<uint8_t>* out, uint32_t* height, uint32_t* width);
  // The shard holding sample i.
  const ShardEntry& shard_of(uint64_t i) const;

 private:
  std::string dir_;
  Manifest m_;
  std::map<size_t, ShardLocation> located_;
  std::vector<int64_t> index_;  // the index, loaded on first use
};

struct NpyHeader;
// The data of an .npy file whose header is `h`. Throws Corruption when the file is short.
std::vector<uint8_t> read_npy_data(const std::string& path, const NpyHeader& h);
// Reads a (rows, cols) <i8 .npy array's bytes. Throws Corruption naming it.
std::vector<uint8_t> read_npy_vector_2d(const std::string& path, uint64_t rows, uint64_t cols);

// Reads a 1-d .npy array of `count` items with the given descr. Throws Corruption naming it.
std::vector<uint8_t> read_npy_vector(const std::string& path, const std::string& descr,
                                     uint64_t count);

}  // namespace dscache
