// Cache's state (internal): the Impl behind dscache/cache.h, shared by cache.cpp (open, samples)
// and cache_fields.cpp (field files).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/cache_dir.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/shard.h"
#include "read/mapped_file.h"
#include "read/streamed_shards.h"
#include "util/io_util.h"

namespace dscache {

struct ShardState {
  ShardEntry entry;               // as the manifest lists it
  std::string path;               // DIR/file
  ShardLocation loc;              // from the shard's own header
  uint64_t data_bytes = 0;        // image bytes (fixed: count * sample bytes; ragged: loc.count)
  const uint8_t* data = nullptr;  // sample 0 / byte 0, mapped or resident; null: read via HDF5
  detail::MappedRegion mapping;   // the whole file, when mapped
  detail::MappedRegion copy;      // private copy of the data, when resident
  File file;                      // kept open for HDF5 and pread reads (survive a rename of DIR)
  int fd = -1;                    // file.fd() while it is kept, else -1
  bool pread = false;             // kPread: copy_sample preads from fd
  std::string read_path;          // what HDF5 opens: /proc/self/fd/N when available, else path
};

inline int madvice(AccessHint hint) {
  switch (hint) {
    case AccessHint::kRandom:
      return MADV_RANDOM;
    case AccessHint::kSequential:
      return MADV_SEQUENTIAL;
    case AccessHint::kWillNeed:
      return MADV_WILLNEED;
  }
  return MADV_NORMAL;
}

// One field's files of one shard, as served.
struct FieldState {
  detail::MappedRegion mapping;   // the values file (none when it holds no value bytes)
  const uint8_t* data = nullptr;  // its first value byte
  std::vector<int64_t> offsets;   // kinds with offsets: count + 1 row offsets
};

struct Cache::Impl {
  std::shared_ptr<const CacheDir> files;  // the directory, open for the Cache's lifetime
  std::string dir;
  Manifest manifest;
  CacheOptions options;
  SampleShape shape;                            // fixed: the sample shape; ragged: (0, 0, C)
  std::vector<ShardState> shards;               // manifest order
  std::vector<int64_t> labels;                  // (count,)
  std::vector<IndexRow> index;                  // raw ragged and JPEG: (count,)
  std::vector<std::vector<FieldState>> fields;  // [shard][field]
  std::vector<uint64_t> value_bytes;            // per field: fixed value bytes, 0 with offsets
  uint64_t resident = 0;                        // bytes copied into private memory
  uint64_t block = 1;                           // locality_block()
  MemoryMode mode = MemoryMode::kPageCache;     // in force (kAuto resolved)
  // A streamed remote cache (CacheDir::streamed()): its shards, acquired as reads need them
  // (mode kPread); null otherwise. Last: it closes its shards before the rest goes.
  std::unique_ptr<detail::StreamedShards> stream;

  // Shard s at hand for a read (streamed: held until the Pin goes; else nothing to do).
  detail::StreamedShards::Pin pin(const ShardState& s) const {
    if (!stream) return {};
    return stream->pin(static_cast<size_t>(&s - shards.data()));
  }

  void check_index(uint64_t i) const {
    if (i >= manifest.count) {
      throw Error(ErrorKind::kInvalidArgument, dir,
                  "sample " + std::to_string(i) + " is out of range (the cache holds " +
                      std::to_string(manifest.count) + ")");
    }
  }

  // The shard holding sample i (i < count): the last shard whose first <= i. Empty shards share
  // their `first` with the next one, so they are never chosen.
  const ShardState& find_shard(uint64_t i) const {
    auto it = std::upper_bound(shards.begin(), shards.end(), i,
                               [](uint64_t v, const ShardState& s) { return v < s.entry.first; });
    return *(it - 1);
  }

  bool jpeg() const { return manifest.codec == Codec::kJpeg; }

  SampleShape sample_shape(uint64_t i) const {
    if (manifest.layout == Layout::kFixed) return shape;
    const IndexRow& r = index[i];
    return SampleShape{r.height, r.width, shape.channels};
  }

  // Byte offset of sample i inside its shard's data.
  uint64_t data_offset(const ShardState& s, uint64_t i) const {
    if (index.empty()) return (i - s.entry.first) * shape.bytes();
    return index[i].offset;
  }

  // Bytes sample i occupies as stored.
  uint64_t stored_bytes(uint64_t i) const {
    return index.empty() ? shape.bytes() : index[i].length;
  }

  // Copies sample i's stored bytes from shard s into `out` (any mode).
  void read_stored(const ShardState& s, uint64_t i, uint8_t* out) const {
    const detail::StreamedShards::Pin held = pin(s);
    if (s.pread) {
      detail::pread_all(s.fd, out, static_cast<size_t>(stored_bytes(i)),
                        s.loc.data_offset + data_offset(s, i), s.path, ErrorKind::kCorruption);
    } else if (s.data == nullptr) {
      read_through_hdf5(s, i, out);
    } else {
      detail::guarded_copy(out, s.data + data_offset(s, i), static_cast<size_t>(stored_bytes(i)),
                           s.path);
    }
  }

  // Decodes JPEG sample i (crop `box`, or the whole image when box is null) into `out`; a bad
  // stream is Corruption naming the shard and the sample. With `from` (its shard, open), the
  // stream is pread from it rather than read as read_stored() reads it.
  void decode(uint64_t i, const CropBox* box, uint32_t out_h, uint32_t out_w, uint8_t* out,
              const File* from = nullptr) const;

  void read_through_hdf5(const ShardState& s, uint64_t i, uint8_t* out) const {
    // HDF5 calls are serialized inside the shard functions (detail::hdf5_mutex()).
    try {
      if (index.empty()) {
        read_shard_samples(manifest.storage, s.read_path, s.loc, shape, i - s.entry.first, 1, out);
      } else {
        read_shard_bytes(manifest.storage, s.read_path, s.loc, index[i].offset, index[i].length,
                         out);
      }
    } catch (const Error& e) {
      if (e.path() == s.path) throw;
      throw Error(e.kind(), s.path, e.reason());
    }
  }
};

// Shard k's field files, checked by CacheDir::check_open: values mapped, offsets kept (the
// FieldFilesSink of Cache::open).
void map_fields(Cache::Impl& c, size_t k, std::vector<FieldShardFile>* files);

}  // namespace dscache
