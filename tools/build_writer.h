// The build's serial writer stage: appends decoded samples to shards in source order, commits
// each full shard with a sidecar (its labels, checksums, sources and skips), and takes over the
// finished shards of an interrupted build (--resume).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "build_decode.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {

// One source entry that was not built, and why.
struct Skip {
  std::string source;
  std::string reason;
};

// Owns the open shard and everything recorded so far. Used from one thread at a time (the
// pipeline's serial stage, then the finishing code).
class BuildWriter {
 public:
  // Writes into `dir`. Raw fixed layout: `per_shard` samples of `shape` per shard. Raw ragged
  // (`ragged_bytes` > 0) and every JPEG cache (codec kJpeg, with `ragged_bytes` > 0): byte
  // shards that close before the sample that would take them past `ragged_bytes` stored bytes.
  BuildWriter(std::string dir, Storage storage, SampleShape shape, uint64_t per_shard,
              uint64_t ragged_bytes, Codec codec);

  // Takes over the finished shards of an interrupted build (checked by sidecar and XXH64).
  // Returns the source index to continue from. Removes anything past the last complete shard.
  uint64_t adopt_finished();

  void add_sample(const Token& t, const SourceEntry& e);
  void add_skip(const SourceEntry& e, const std::string& reason);

  // Commits the open shard (if any) as the one ending at source index `src_end`.
  void commit_shard(uint64_t src_end);

  // Removes the sidecars of every committed shard (just before the manifest is written).
  void remove_sidecars();

  uint64_t count() const { return labels_.size(); }
  uint64_t skipped() const { return skips_.size(); }
  const std::vector<ShardEntry>& shards() const { return shards_; }
  const std::vector<int64_t>& labels() const { return labels_; }
  const std::vector<uint64_t>& checksums() const { return checksums_; }
  const std::vector<std::string>& sources() const { return sources_; }
  const std::vector<Skip>& skips() const { return skips_; }
  // Raw ragged: (offset, height, width) per sample; JPEG: (offset, length, height, width).
  const std::vector<int64_t>& index() const { return index_; }
  uint64_t index_columns() const { return codec_ == Codec::kJpeg ? 4 : 3; }
  uint64_t shard_count() const { return shard_index_; }

 private:
  // Appends one sample to a byte shard (raw ragged pixels, or a JPEG stream).
  void add_bytes(const Token& t, const SourceEntry& e);

  std::string dir_;
  Storage storage_;
  SampleShape shape_;
  uint64_t per_shard_;
  uint64_t ragged_bytes_;
  Codec codec_;
  uint64_t kill_after_ = 0;  // test hook: DSCACHE_TEST_KILL_AFTER_SHARDS
  std::unique_ptr<ShardWriter> writer_;
  std::unique_ptr<RaggedShardWriter> ragged_;
  uint64_t shard_index_ = 0;
  uint64_t next_first_ = 0;
  size_t shard_sample_begin_ = 0;
  size_t shard_skip_begin_ = 0;
  std::vector<ShardEntry> shards_;
  std::vector<int64_t> labels_;
  std::vector<uint64_t> checksums_;
  std::vector<std::string> sources_;
  std::vector<Skip> skips_;
  std::vector<int64_t> index_;  // see index()
};

}  // namespace dscache
