// Shard writing/locating: dispatch on storage, plus the shared contiguous read path.
#include "dscache/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>

#include "dscache/error.h"
#include "dscache/file.h"
#include "format/shard_impl.h"

namespace dscache {
namespace detail {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) {
    throw Error(ErrorKind::kCorruption, path,
                std::to_string(a) + " x " + std::to_string(b) + " bytes overflows 64 bits");
  }
  return a * b;
}

uint64_t file_size(const std::string& path) { return File::open(path).size(); }

uint64_t ragged_sample_bytes(const std::string& path, uint32_t height, uint32_t width,
                             uint32_t channels, uint64_t used, uint64_t capacity_bytes) {
  if (height == 0 || width == 0) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "ragged sample " + std::to_string(height) + "x" + std::to_string(width) +
                    " is invalid (need H, W > 0)");
  }
  const uint64_t n = uint64_t{height} * width * channels;  // < 2^66 / 2^2: fits
  check_ragged_room(path, n, used, capacity_bytes);
  return n;
}

void check_ragged_room(const std::string& path, uint64_t n, uint64_t used,
                       uint64_t capacity_bytes) {
  if (n == 0) throw Error(ErrorKind::kInvalidArgument, path, "a sample of 0 bytes is invalid");
  if (used > capacity_bytes || n > capacity_bytes - used) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "shard is full (capacity " + std::to_string(capacity_bytes) + " bytes, holds " +
                    std::to_string(used) + ", sample needs " + std::to_string(n) + ")");
  }
}

void pread_exact(const std::string& path, uint64_t offset, uint64_t n, uint8_t* out) {
  File::open(path).read_at(offset, n, out);
}

ShardEntry shard_entry(const FileEntry& file, uint64_t count) {
  ShardEntry e;
  e.file = file.file;
  e.count = count;
  e.bytes = file.bytes;
  e.xxh64 = file.xxh64;
  return e;
}

}  // namespace detail

namespace {

void check_shape(SampleShape shape, const std::string& path) {
  if (shape.height == 0 || shape.width == 0 || channel_order_for(shape.channels) == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "sample shape " + std::to_string(shape.height) + "x" + std::to_string(shape.width) +
                    "x" + std::to_string(shape.channels) +
                    " is invalid (need H, W > 0 and 1, 3 or 4 channels)");
  }
}

// npy() or hdf5(), by `storage` (in a build without HDF5 the HDF5 half is shard_hdf5_stub.cpp:
// Unsupported naming the file).
template <typename Npy, typename Hdf5>
auto by_storage(Storage storage, const std::string& path, const Npy& npy, const Hdf5& hdf5) {
  switch (storage) {
    case Storage::kNpy:
      return npy();
    case Storage::kHdf5:
      return hdf5();
  }
  throw Error(ErrorKind::kInvalidArgument, path, "unknown storage");
}

// Checks a read of `unit` [first, first + n) of a shard at `loc`: InvalidArgument naming `path`
// when it passes the shard's count, or when a shard not stored contiguously is not HDF5 (only
// HDF5 shards are read through their library). False when there is nothing to read (n == 0).
bool must_read(Storage storage, const std::string& path, const ShardLocation& loc, const char* unit,
               uint64_t first, uint64_t n) {
  if (first > loc.count || n > loc.count - first) {
    throw Error(ErrorKind::kInvalidArgument, path,
                std::string(unit) + " [" + std::to_string(first) + ", " + std::to_string(first) +
                    "+" + std::to_string(n) + ") are outside the shard's " +
                    std::to_string(loc.count));
  }
  if (n == 0) return false;
  if (!loc.contiguous && storage != Storage::kHdf5) {
    throw Error(ErrorKind::kInvalidArgument, path, "npy shards are always contiguous");
  }
  return true;
}

}  // namespace

bool hdf5_supported() {
#ifdef DSCACHE_HAVE_HDF5
  return true;
#else
  return false;
#endif
}

std::unique_ptr<ShardWriter> ShardWriter::create(Storage storage, const std::string& path,
                                                 SampleShape shape, uint64_t capacity) {
  check_shape(shape, path);
  return by_storage(
      storage, path, [&] { return detail::create_npy_writer(path, shape, capacity); },
      [&] { return detail::create_hdf5_writer(path, shape, capacity); });
}

ShardLocation locate_shard(Storage storage, const std::string& path, SampleShape shape) {
  check_shape(shape, path);
  return by_storage(
      storage, path, [&] { return detail::locate_npy_shard(path, shape); },
      [&] { return detail::locate_hdf5_shard(path, shape); });
}

void read_shard_samples(Storage storage, const std::string& path, const ShardLocation& loc,
                        SampleShape shape, uint64_t first, uint64_t n, uint8_t* out) {
  if (!must_read(storage, path, loc, "samples", first, n)) return;
  if (!loc.contiguous) {
    detail::read_hdf5_samples(path, shape, first, n, out);
    return;
  }
  const uint64_t sample = shape.bytes();
  // In range: locate checked the extent.
  detail::pread_exact(path, loc.data_offset + first * sample, n * sample, out);
}

std::unique_ptr<RaggedShardWriter> RaggedShardWriter::create(Storage storage,
                                                             const std::string& path,
                                                             uint32_t channels,
                                                             uint64_t capacity_bytes) {
  if (channel_order_for(channels) == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, path,
                std::to_string(channels) + " channels is invalid (need 1, 3 or 4)");
  }
  return by_storage(
      storage, path,
      [&] { return detail::create_npy_ragged_writer(path, channels, capacity_bytes); },
      [&] { return detail::create_hdf5_ragged_writer(path, channels, capacity_bytes); });
}

ShardLocation locate_ragged_shard(Storage storage, const std::string& path) {
  return by_storage(
      storage, path, [&] { return detail::locate_npy_ragged_shard(path); },
      [&] { return detail::locate_hdf5_ragged_shard(path); });
}

void read_shard_bytes(Storage storage, const std::string& path, const ShardLocation& loc,
                      uint64_t offset, uint64_t n, uint8_t* out) {
  if (!must_read(storage, path, loc, "bytes", offset, n)) return;
  if (!loc.contiguous) {
    detail::read_hdf5_bytes(path, offset, n, out);
    return;
  }
  detail::pread_exact(path, loc.data_offset + offset, n, out);
}

std::string shard_file_name(Storage storage, uint64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "images-%05llu", static_cast<unsigned long long>(index));
  return std::string(buf) + (storage == Storage::kHdf5 ? ".h5" : ".npy");
}

}  // namespace dscache
