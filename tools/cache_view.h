// Sample access to a built cache for inspect and verify, on top of libcache's validated reader
// (dscache/cache_dir.h): no file is parsed here, so the tools accept and refuse exactly what
// Cache::open does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dscache/cache_dir.h"
#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {

// Opens a cache directory once (CacheDir) and reads everything else through it on demand.
// Not thread-safe (shards are opened lazily and kept).
class CacheView {
 public:
  explicit CacheView(const std::string& dir);  // throws NotFound / Corruption

  const Manifest& manifest() const { return files_->manifest(); }
  const std::string& dir() const { return files_->dir(); }
  std::string path(const std::string& file) const { return files_->path(file); }
  const CacheDir& files() const { return *files_; }

  // Each throws Corruption naming the file when it disagrees with the manifest (see CacheDir).
  std::vector<int64_t> labels() const { return files_->labels(); }
  std::vector<uint64_t> checksums() const { return files_->checksums(); }
  std::vector<std::string> sources() const { return files_->sources(); }
  std::vector<SkipRecord> skips() const { return files_->skips(); }
  // XXH64 and size of NAME, opened inside the cache (regular file, no symlink out).
  FileEntry hash(const std::string& name) const;

  // Shard k's location, from its header checked against the manifest (remembered; the file is
  // not kept open: a cache may have more shards than the process has descriptors).
  const ShardLocation& shard(size_t k);
  // The validated index (raw ragged layout, JPEG caches), loaded on first use.
  const std::vector<IndexRow>& index();

  // Copies sample i's pixels into *out (resized to its bytes; JPEG samples are decoded) and sets
  // its size. Any layout and codec.
  void read_sample(uint64_t i, std::vector<uint8_t>* out, uint32_t* height, uint32_t* width);
  // Sample i's bytes as stored (the JPEG stream for codec jpeg), with its decoded size.
  void read_stored(uint64_t i, std::vector<uint8_t>* out, uint32_t* height, uint32_t* width);
  // Samples [first, first + n) of fixed-layout raw shard k (shard-local indices).
  void read_samples(size_t k, uint64_t first, uint64_t n, uint8_t* out);
  // The shard holding sample i (i < count).
  const ShardEntry& shard_of(uint64_t i) const;
  // Sample i's value of field f (manifest field order) as stored, its files checked by
  // CacheDir::open_field. *rows: the value's rows (variable kinds), 1 (fixed kinds) or the
  // mask's pixels (masks, any layout).
  void read_field(uint64_t i, size_t f, std::vector<uint8_t>* out, uint64_t* rows);

 private:
  // Shard k open for reading (the last one read; one descriptor at a time).
  const File& open_shard(size_t k);

  std::shared_ptr<const CacheDir> files_;
  std::map<size_t, ShardLocation> shards_;
  size_t open_k_ = SIZE_MAX;
  File open_file_;
  std::vector<IndexRow> index_;
  bool have_index_ = false;
  // Shard field_k_'s field files, opened on first use (read_field).
  size_t field_k_ = SIZE_MAX;
  std::vector<FieldShardFile> field_files_;
  std::vector<bool> field_open_;
};

}  // namespace dscache
