// Private: the per-format halves of shard.cpp (npy in shard_npy.cpp, HDF5 in shard_hdf5.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "dscache/manifest.h"
#include "dscache/shard.h"

namespace dscache {
namespace detail {

// Debian's libhdf5 is built without thread safety: every HDF5 call in libcache holds this
// process-wide mutex (taken inside the functions below; callers need not).
std::mutex& hdf5_mutex();

// Checked a * b; throws Corruption naming `path` when it does not fit in 64 bits.
uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path);

// Size of the file at `path`; NotFound when it does not exist.
uint64_t file_size(const std::string& path);

// Bytes of one ragged sample (height * width * channels), checked: InvalidArgument naming `path`
// for a zero side or when `used` + the sample would pass `capacity_bytes`.
uint64_t ragged_sample_bytes(const std::string& path, uint32_t height, uint32_t width,
                             uint32_t channels, uint64_t used, uint64_t capacity_bytes);
// The same check for `n` stored bytes: InvalidArgument for n == 0 or when it does not fit.
void check_ragged_room(const std::string& path, uint64_t n, uint64_t used, uint64_t capacity_bytes);

// The manifest's entry for a committed shard file of `count` samples.
ShardEntry shard_entry(const FileEntry& file, uint64_t count);

// Reads exactly `n` bytes at `offset` of the file at `path` (pread). Corruption when the file ends
// first.
void pread_exact(const std::string& path, uint64_t offset, uint64_t n, uint8_t* out);

std::unique_ptr<ShardWriter> create_npy_writer(const std::string& path, SampleShape shape,
                                               uint64_t capacity);
ShardLocation locate_npy_shard(const std::string& path, SampleShape shape);
std::unique_ptr<RaggedShardWriter> create_npy_ragged_writer(const std::string& path,
                                                            uint32_t channels,
                                                            uint64_t capacity_bytes);
ShardLocation locate_npy_ragged_shard(const std::string& path);

// The HDF5 half (shard_hdf5.cpp; in a build without HDF5, shard_hdf5_stub.cpp: Unsupported).
std::unique_ptr<ShardWriter> create_hdf5_writer(const std::string& path, SampleShape shape,
                                                uint64_t capacity);
ShardLocation locate_hdf5_shard(const std::string& path, SampleShape shape);
// Reads samples through the HDF5 library (chunked or compressed `images`).
void read_hdf5_samples(const std::string& path, SampleShape shape, uint64_t first, uint64_t n,
                       uint8_t* out);
std::unique_ptr<RaggedShardWriter> create_hdf5_ragged_writer(const std::string& path,
                                                             uint32_t channels,
                                                             uint64_t capacity_bytes);
ShardLocation locate_hdf5_ragged_shard(const std::string& path);
// Reads bytes [offset, offset + n) of a 1-d `images` through the HDF5 library.
void read_hdf5_bytes(const std::string& path, uint64_t offset, uint64_t n, uint8_t* out);

}  // namespace detail
}  // namespace dscache
