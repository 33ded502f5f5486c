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

  // Copies sample i (manifest().sample_bytes() bytes) into out.
  void read_sample(uint64_t i, uint8_t* out);
  // The shard holding sample i.
  const ShardEntry& shard_of(uint64_t i) const;

 private:
  std::string dir_;
  Manifest m_;
  std::map<size_t, ShardLocation> located_;
};

// Reads a 1-d .npy array of `count` items with the given descr. Throws Corruption naming it.
std::vector<uint8_t> read_npy_vector(const std::string& path, const std::string& descr,
                                     uint64_t count);

}  // namespace dscache
