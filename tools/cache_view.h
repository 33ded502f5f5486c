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

  // Ragged layout: (offset in its shard's data, height, width) per sample, 3 values each.
  std::vector<int64_t> ragged_index() const;

  // Copies sample i into *out (resized to its bytes) and sets its size. Any layout.
  void read_sample(uint64_t i, std::vector<uint8_t>* out, uint32_t* height, uint32_t* width);
  // The shard holding sample i.
  const ShardEntry& shard_of(uint64_t i) const;

 private:
  std::string dir_;
  Manifest m_;
  std::map<size_t, ShardLocation> located_;
  std::vector<int64_t> index_;  // ragged index, loaded on first use
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
