// The HDF5 half of shard.cpp in a libcache built without HDF5 (libhdf5 not found at configure
// time): every entry point throws Error(kUnsupported) naming the file, so an HDF5 shard is
// refused with a reason. Compiled instead of shard_hdf5.cpp (libcache/meson.build).
#include <cstdint>
#include <memory>
#include <string>

#include "dscache/error.h"
#include "format/shard_impl.h"

namespace dscache {
namespace detail {

namespace {

[[noreturn]] void no_hdf5(const std::string& path) {
  throw Error(ErrorKind::kUnsupported, path, "this build of libcache has no HDF5 support");
}

}  // namespace

std::unique_ptr<ShardWriter> create_hdf5_writer(const std::string& path, SampleShape, uint64_t) {
  no_hdf5(path);
}
ShardLocation locate_hdf5_shard(const std::string& path, SampleShape) { no_hdf5(path); }
void read_hdf5_samples(const std::string& path, SampleShape, uint64_t, uint64_t, uint8_t*) {
  no_hdf5(path);
}
std::unique_ptr<RaggedShardWriter> create_hdf5_ragged_writer(const std::string& path, uint32_t,
                                                             uint64_t) {
  no_hdf5(path);
}
ShardLocation locate_hdf5_ragged_shard(const std::string& path) { no_hdf5(path); }
void read_hdf5_bytes(const std::string& path, uint64_t, uint64_t, uint8_t*) { no_hdf5(path); }

}  // namespace detail
}  // namespace dscache
