// Private: the per-format halves of shard.cpp (npy in shard_npy.cpp, HDF5 in shard_hdf5.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dscache/shard.h"

namespace dscache {
namespace detail {

// Checked a * b; throws Corruption naming `path` when it does not fit in 64 bits.
uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path);

// Size of the file at `path`; NotFound when it does not exist.
uint64_t file_size(const std::string& path);

std::unique_ptr<ShardWriter> create_npy_writer(const std::string& path, SampleShape shape,
                                               uint64_t capacity);
ShardLocation locate_npy_shard(const std::string& path, SampleShape shape);

#ifdef DSCACHE_HAVE_HDF5
std::unique_ptr<ShardWriter> create_hdf5_writer(const std::string& path, SampleShape shape,
                                                uint64_t capacity);
ShardLocation locate_hdf5_shard(const std::string& path, SampleShape shape);
// Reads samples through the HDF5 library (chunked or compressed `images`).
void read_hdf5_samples(const std::string& path, SampleShape shape, uint64_t first, uint64_t n,
                       uint8_t* out);
#endif

}  // namespace detail
}  // namespace dscache
