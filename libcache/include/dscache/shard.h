// Writing and locating images shards (.npy or .h5) of the fixed and ragged layouts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dscache/manifest.h"

namespace dscache {

// Geometry of one fixed-layout sample: HWC uint8.
struct SampleShape {
  uint32_t height = 0;    // rows
  uint32_t width = 0;     // columns
  uint32_t channels = 0;  // 1, 3 or 4 (RGBA)
  uint64_t bytes() const { return uint64_t{height} * width * channels; }
};

// True when this build of libcache can read and write HDF5 shards.
bool hdf5_supported();

// Writes one shard under a temporary name; commit() makes it visible under its final name.
// Destroying an uncommitted writer removes the temporary file. Not thread-safe.
//  - npy: `(count, H, W, C)` uint8, streamed; the header is rewritten with the final count.
//  - hdf5: datasets `images` (count, H, W, C) uint8, contiguous, allocated early, no fill, and
//    `labels` (count,) int64; attribute `channel_order` on `images`.
class ShardWriter {
 public:
  // `capacity` is the most samples the shard will hold (sizes the npy header).
  static std::unique_ptr<ShardWriter> create(Storage storage, const std::string& path,
                                             SampleShape shape, uint64_t capacity);
  virtual ~ShardWriter() = default;
  // `sample` points at shape.bytes() bytes in HWC order. Throws IOError, InvalidArgument when
  // over capacity.
  virtual void append(const uint8_t* sample, int64_t label) = 0;
  virtual uint64_t count() const = 0;
  // Finalizes, fsyncs and renames into place. Returns file (basename), count, bytes, xxh64;
  // `first` is left 0 for the caller to set.
  virtual ShardEntry commit() = 0;
};

// Writes one shard of the ragged layout — or of any JPEG cache — : a 1-d uint8 array of the
// samples' stored bytes (HWC pixels, or JPEG streams) back to back (npy: shape (bytes,); hdf5:
// `images` (bytes,) contiguous + `labels` (count,)). Same temp-name/commit rules as ShardWriter.
// Not thread-safe.
class RaggedShardWriter {
 public:
  // `capacity_bytes`: most image bytes the shard will hold (sizes the npy header).
  static std::unique_ptr<RaggedShardWriter> create(Storage storage, const std::string& path,
                                                   uint32_t channels, uint64_t capacity_bytes);
  virtual ~RaggedShardWriter() = default;
  // Appends height*width*channels bytes; returns the sample's byte offset within the shard's
  // data. Throws InvalidArgument when it would pass capacity_bytes.
  virtual uint64_t append(const uint8_t* sample, uint32_t height, uint32_t width,
                          int64_t label) = 0;
  // Appends `n` > 0 stored bytes as one sample (an encoded image: codec kJpeg); returns its byte
  // offset. Same capacity rule as append().
  virtual uint64_t append_bytes(const uint8_t* data, uint64_t n, int64_t label) = 0;
  virtual uint64_t count() const = 0;  // samples so far
  virtual uint64_t bytes() const = 0;  // image bytes so far
  virtual ShardEntry commit() = 0;     // as ShardWriter::commit
};

// Where a shard's samples are in its file, as found from its own header.
struct ShardLocation {
  uint64_t count = 0;        // samples in the file
  uint64_t data_offset = 0;  // file offset of sample 0 (contiguous data only)
  uint64_t file_bytes = 0;   // file size
  bool contiguous = true;    // false: HDF5 chunked/compressed, read through the HDF5 library
};

// Ragged shards: the header must be 1-d uint8; `count` is then the number of BYTES and
// `shape.height`/`shape.width` are ignored (pass {0, 0, C}). read_shard_samples is not for
// ragged shards; use read_shard_bytes.
void read_shard_bytes(Storage storage, const std::string& path, const ShardLocation& loc,
                      uint64_t offset, uint64_t n, uint8_t* out);
ShardLocation locate_ragged_shard(Storage storage, const std::string& path);

// Opens the shard read-only and checks its header against `shape`: dtype uint8, 4-d
// (n, H, W, C) in C order, data inside the file. Throws NotFound / Corruption (naming `path`)
// / Unsupported (HDF5 not built in).
ShardLocation locate_shard(Storage storage, const std::string& path, SampleShape shape);

// Copies samples [first, first + n) into `out` (n * shape.bytes() bytes). Works for every
// shard locate_shard accepts, including chunked or compressed HDF5.
void read_shard_samples(Storage storage, const std::string& path, const ShardLocation& loc,
                        SampleShape shape, uint64_t first, uint64_t n, uint8_t* out);

// Shard file name for index `i`: "images-00012.npy" / "images-00012.h5".
std::string shard_file_name(Storage storage, uint64_t index);

}  // namespace dscache
