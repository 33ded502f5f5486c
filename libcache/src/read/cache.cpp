// Cache: validates a cache directory against its manifest, then serves samples from read-only
// mappings (or private copies) of its shards.
#include "dscache/cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/cache_dir.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/jpeg.h"
#include "dscache/npy.h"
#include "format/field_files.h"
#include "format/shard_impl.h"
#include "read/cache_impl.h"
#include "read/mapped_file.h"
#include "remote/mirror.h"
#include "util/io_util.h"

namespace dscache {

namespace {

// kInProcess: copies a shard's data into private memory (through HDF5 when it is chunked).
void make_resident(Cache::Impl& c, ShardState& s) {
  detail::MappedRegion copy = detail::MappedRegion::anonymous(s.data_bytes, s.path);
  const std::string used = s.file.fd_path();  // the file opened inside the directory
  try {
    if (c.manifest.layout == Layout::kFixed && !c.jpeg()) {
      read_shard_samples(c.manifest.storage, used, s.loc, c.shape, 0, s.loc.count, copy.data());
    } else {
      read_shard_bytes(c.manifest.storage, used, s.loc, 0, s.loc.count, copy.data());
    }
  } catch (const Error& e) {
    if (e.path() == s.path) throw;
    throw Error(e.kind(), s.path, e.reason());
  }
  copy.protect_read_only();
  s.copy = std::move(copy);
  s.data = s.copy.data();
  c.resident += s.data_bytes;
}

}  // namespace

std::shared_ptr<Cache> Cache::open(const std::string& dir, const CacheOptions& options) {
  auto impl = std::make_unique<Impl>();
  Impl& c = *impl;
  c.dir = dir;
  c.options = options;
  // A remote cache larger than the local cache's budget is streamed: its shards come as reads
  // need them (read/streamed_shards.h).
  c.files = CacheDir::open(dir, true);  // NotFound / Corruption / Unsupported
  c.manifest = c.files->manifest();
  const Manifest& m = c.manifest;
  const bool ragged = m.layout == Layout::kRagged;
  const bool byte_shards = m.has_index();  // raw ragged or JPEG: 1-d byte shards + the index
  c.shape = SampleShape{m.height, m.width, m.channels};
  if (c.jpeg() && !jpeg_supported()) {
    throw Error(ErrorKind::kUnsupported, dir + "/manifest.json",
                "the cache stores JPEG samples (codec jpeg), and this build of libcache has no "
                "JPEG support (meson feature jpeg)");
  }

  // Every open-time check (docs/FORMAT.md "Opening a cache"), the one CacheDir::check_open that
  // verify and inspect run too: named files (and their XXH64 with verify_checksums), shard
  // headers, labels, the checksums' header, the index, field files. Nothing is mapped before the
  // files' sizes pass, so a short file is an error here, never a SIGBUS later; each shard's
  // descriptor is closed again, and step 5 reopens it through the same directory descriptor.
  const CacheDir& files = *c.files;
  CheckedCache checked =
      files.check_open(options.verify_checksums,
                       [&c](size_t k, std::vector<FieldShardFile>* f) { map_fields(c, k, f); });
  c.shards.resize(m.shards.size());
  for (size_t k = 0; k < m.shards.size(); ++k) {
    ShardState& s = c.shards[k];
    s.entry = m.shards[k];
    s.path = files.path(s.entry.file);
    if (!checked.shards.empty()) s.loc = checked.shards[k];
    s.data_bytes = checked.shard_data_bytes[k];
    c.block = std::max(c.block, s.entry.count);
  }
  c.labels = std::move(checked.labels);
  if (byte_shards) c.index = std::move(checked.index);
  if (files.streamed()) {
    // Every shard is read into the caller's buffer (nothing mapped that eviction could pull
    // away), once it is acquired and its header checked.
    c.mode = MemoryMode::kPread;
    c.stream = std::make_unique<detail::StreamedShards>(c, files.remote_copy());
    return std::shared_ptr<Cache>(new Cache(std::move(impl)));
  }

  // 4. The mode: kAuto compares the shards' bytes with what memory is available.
  c.mode = options.memory;
  if (c.mode == MemoryMode::kAuto) {
    uint64_t data = 0;
    for (const ShardState& s : c.shards) data += s.data_bytes;
    c.mode = choose_memory_mode(data, available_memory_bytes(), m.layout, m.codec);
  }
  if (c.mode == MemoryMode::kPread && ragged && !c.jpeg()) {
    throw Error(ErrorKind::kInvalidArgument, dir,
                "CacheOptions.memory kPread serves the raw fixed layout and JPEG caches only (raw "
                "ragged samples are cropped from views); use kPageCache or kAuto");
  }
  if (c.mode == MemoryMode::kPread) {
    for (ShardState& s : c.shards) {
      if (s.data_bytes == 0) continue;
      s.file = files.open_file(s.entry.file, s.entry.bytes);
      s.fd = s.file.fd();
      if (s.loc.contiguous) {
        s.pread = true;
        // Shuffled sample-sized reads: kernel read-ahead would only fetch pages nobody asked for.
        ::posix_fadvise(s.fd, 0, 0, POSIX_FADV_RANDOM);
      } else {
        s.read_path = s.file.fd_path();
      }
    }
    return std::shared_ptr<Cache>(new Cache(std::move(impl)));
  }

  // 5. Map or copy. kInProcess copies whole shards, in order, while the total stays within the
  //    budget; the rest stay mapped. Nothing is evicted later, so views stay valid.
  bool budget_left = c.mode == MemoryMode::kInProcess;
  for (ShardState& s : c.shards) {
    if (s.data_bytes == 0) continue;  // nothing to serve; never map zero bytes
    s.file = files.open_file(s.entry.file, s.entry.bytes);
    if (budget_left) {
      if (options.memory_budget == 0 || c.resident + s.data_bytes <= options.memory_budget) {
        make_resident(c, s);
        s.file = File();
        continue;
      }
      budget_left = false;
    }
    if (s.loc.contiguous) {
      s.mapping = detail::MappedRegion::map_fd(s.file.fd(), s.path, s.entry.bytes);
      s.mapping.advise(madvice(options.hint));
      s.data = s.mapping.data() + s.loc.data_offset;
      s.file = File();  // the mapping keeps the file; one descriptor per shard would not scale
    } else {
      // Chunked/compressed HDF5: read through the library on demand, by the /proc/self/fd name
      // of the descriptor opened inside the directory (HDF5 opens files by name only; its
      // H5FD_SEC2 driver has no way to adopt a descriptor), so the reads keep finding this
      // generation's file after DIR is renamed or swapped, as the mappings do.
      s.fd = s.file.fd();
      s.read_path = s.file.fd_path();
    }
  }
  return std::shared_ptr<Cache>(new Cache(std::move(impl)));
}

Cache::Cache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cache::~Cache() = default;

const Manifest& Cache::manifest() const { return impl_->manifest; }
const std::string& Cache::dir() const { return impl_->dir; }
uint64_t Cache::resident_bytes() const { return impl_->resident; }
MemoryMode Cache::memory_mode() const { return impl_->mode; }
uint64_t Cache::streaming_budget() const {
  return impl_->stream ? std::max<uint64_t>(1, impl_->files->remote_copy()->shard_room()) : 0;
}
uint64_t Cache::size() const { return impl_->manifest.count; }
Layout Cache::layout() const { return impl_->manifest.layout; }
SampleShape Cache::shape() const { return impl_->shape; }
uint64_t Cache::locality_block() const { return impl_->block; }

int64_t Cache::label(uint64_t i) const {
  impl_->check_index(i);
  return impl_->labels[static_cast<size_t>(i)];
}

SampleShape Cache::sample_shape(uint64_t i) const {
  impl_->check_index(i);
  return impl_->sample_shape(i);
}

void Cache::copy_sample(uint64_t i, uint8_t* out) const {
  const Impl& c = *impl_;
  c.check_index(i);
  if (c.jpeg()) {
    const SampleShape shape = c.sample_shape(i);
    c.decode(i, nullptr, shape.height, shape.width, out);
    return;
  }
  c.read_stored(c.find_shard(i), i, out);
}

void Cache::copy_sample_unmapped(uint64_t i, uint8_t* out) const {
  const Impl& c = *impl_;
  c.check_index(i);
  const ShardState& s = c.find_shard(i);
  if (s.mapping.data() == nullptr) {  // pread, resident or HDF5: no mapping to spare
    copy_sample(i, out);
    return;
  }
  const File file = c.files->open_file(s.entry.file, s.entry.bytes);
  if (c.jpeg()) {
    const SampleShape shape = c.sample_shape(i);
    c.decode(i, nullptr, shape.height, shape.width, out, &file);
    return;
  }
  file.read_at(s.loc.data_offset + c.data_offset(s, i), c.stored_bytes(i), out);
}

bool Cache::encoded() const { return impl_->jpeg(); }

void Cache::decode_crop(uint64_t i, const CropBox& box, uint32_t out_h, uint32_t out_w,
                        uint8_t* out) const {
  const Impl& c = *impl_;
  c.check_index(i);
  if (!c.jpeg()) SampleSource::decode_crop(i, box, out_h, out_w, out);  // throws Unsupported
  c.decode(i, &box, out_h, out_w, out);
}

void Cache::stored_sample(uint64_t i, std::vector<uint8_t>* out) const {
  const Impl& c = *impl_;
  c.check_index(i);
  out->resize(static_cast<size_t>(c.stored_bytes(i)));
  c.read_stored(c.find_shard(i), i, out->data());
}

void Cache::Impl::decode(uint64_t i, const CropBox* box, uint32_t out_h, uint32_t out_w,
                         uint8_t* out, const File* from) const {
  // One decoder and read buffer per thread, reused by every sample it serves. The stream is
  // always copied out first (guarded_copy when mapped): libjpeg reading the mapping itself would
  // die of SIGBUS on a shard truncated under the reader. The copy is of compressed bytes only.
  static thread_local JpegScratch scratch;
  static thread_local std::vector<uint8_t> buffer;
  buffer.resize(static_cast<size_t>(stored_bytes(i)));
  if (from != nullptr) {
    from->read_at(find_shard(i).loc.data_offset + data_offset(find_shard(i), i), buffer.size(),
                  buffer.data());
  } else {
    read_stored(find_shard(i), i, buffer.data());
  }
  const uint8_t* data = buffer.data();
  const SampleShape s = sample_shape(i);
  try {
    if (box == nullptr) {
      jpeg_decode(data, static_cast<size_t>(stored_bytes(i)), s.height, s.width, s.channels, out,
                  &scratch);
    } else {
      jpeg_decode_crop(data, static_cast<size_t>(stored_bytes(i)), s.height, s.width, s.channels,
                       *box, out_h, out_w, out, &scratch, options.jpeg);
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kCorruption) throw;
    throw Error(ErrorKind::kCorruption, find_shard(i).path,
                "sample " + std::to_string(i) + ": " + e.reason());
  }
}

uint64_t Cache::stored_bytes() const {
  uint64_t total = 0;
  for (const ShardState& s : impl_->shards) total += s.data_bytes;
  return total;
}

namespace {

// Calls f(shard, first, count) for each piece of [first, first + count) inside one shard.
template <typename F>
void for_each_piece(const Cache::Impl& c, uint64_t first, uint64_t count, F f) {
  if (count == 0) return;
  if (first > c.manifest.count || count > c.manifest.count - first) {
    throw Error(ErrorKind::kInvalidArgument, c.dir,
                "samples [" + std::to_string(first) + ", " + std::to_string(first + count) +
                    ") pass the end of the cache (" + std::to_string(c.manifest.count) + ")");
  }
  const uint64_t end = first + count;
  while (first < end) {
    const ShardState& s = c.find_shard(first);
    const uint64_t piece = std::min(end, s.entry.first + s.entry.count) - first;
    f(s, first, piece);
    first += piece;
  }
}

}  // namespace

void Cache::copy_samples(uint64_t first, uint64_t count, uint8_t* out) const {
  const Impl& c = *impl_;
  if (c.jpeg()) {  // pixels are decoded one sample at a time
    for_each_piece(c, first, count, [](const ShardState&, uint64_t, uint64_t) {});  // range check
    for (uint64_t i = first; i < first + count; ++i) {
      copy_sample(i, out);
      out += c.sample_shape(i).bytes();
    }
    return;
  }
  for_each_piece(c, first, count, [&](const ShardState& s, uint64_t i, uint64_t k) {
    const detail::StreamedShards::Pin held = c.pin(s);
    // A shard's samples lie back to back, so a piece is one run of bytes.
    const uint64_t offset = c.data_offset(s, i);
    const uint64_t bytes =
        (k == s.entry.first + s.entry.count - i ? s.data_bytes : c.data_offset(s, i + k)) - offset;
    if (s.pread) {
      detail::pread_all(s.fd, out, static_cast<size_t>(bytes), s.loc.data_offset + offset, s.path,
                        ErrorKind::kCorruption);
    } else if (s.data != nullptr) {
      detail::guarded_copy(out, s.data + offset, static_cast<size_t>(bytes), s.path);
    } else {
      uint8_t* p = out;
      for (uint64_t j = i; j < i + k; ++j) {
        c.read_through_hdf5(s, j, p);
        p += c.sample_shape(j).bytes();
      }
    }
    out += bytes;
  });
}

std::vector<Cache::StoredRun> Cache::stored_runs(uint64_t first, uint64_t count) const {
  const Impl& c = *impl_;
  std::vector<StoredRun> runs;
  // Not for a streamed cache: its shards' descriptors live only while they are held.
  const bool plain = c.mode == MemoryMode::kPread && !c.jpeg() && c.index.empty() && !c.stream;
  for_each_piece(c, first, count, [&](const ShardState& s, uint64_t i, uint64_t k) {
    if (!plain || !s.pread) return;
    runs.push_back(StoredRun{s.fd, s.path, s.loc.data_offset + c.data_offset(s, i),
                             k * c.shape.bytes(), i, k});
  });
  if (runs.size() != 0) {
    uint64_t covered = 0;
    for (const StoredRun& r : runs) covered += r.count;
    if (covered != count) runs.clear();  // a piece that is not pread-able: none of it
  }
  return runs;
}

void Cache::advise(uint64_t first, uint64_t count, Advice advice) const {
  const Impl& c = *impl_;
  if (c.mode != MemoryMode::kPread) {
    for_each_piece(c, first, count, [](const ShardState&, uint64_t, uint64_t) {});  // range check
    return;
  }
  if (c.stream) {  // fetch the shards ahead, or let them go
    size_t last = c.shards.size();
    for_each_piece(c, first, count, [&](const ShardState& s, uint64_t, uint64_t) {
      const size_t k = static_cast<size_t>(&s - c.shards.data());
      if (k == last) return;
      last = k;
      if (advice == Advice::kWillNeed) {
        c.stream->will_need(k);
      } else {
        c.stream->dont_need(k);
      }
    });
    return;
  }
  const int how = advice == Advice::kWillNeed ? POSIX_FADV_WILLNEED : POSIX_FADV_DONTNEED;
  for_each_piece(c, first, count, [&](const ShardState& s, uint64_t i, uint64_t k) {
    if (!s.pread) return;
    const uint64_t offset = c.data_offset(s, i);
    const uint64_t end =
        k == s.entry.first + s.entry.count - i ? s.data_bytes : c.data_offset(s, i + k);
    // A hint: a failure (say, a file system without fadvise) changes nothing that matters.
    ::posix_fadvise(s.fd, static_cast<off_t>(s.loc.data_offset + offset),
                    static_cast<off_t>(end - offset), how);
  });
}

ImageView Cache::view(uint64_t i) const {
  const Impl& c = *impl_;
  c.check_index(i);
  const ShardState& s = c.find_shard(i);
  if (c.jpeg()) {
    throw Error(ErrorKind::kUnsupported, s.path,
                "sample " + std::to_string(i) +
                    " is stored as JPEG and cannot be viewed in place; use copy_sample() (decodes "
                    "it) or decode_crop()");
  }
  if (c.mode == MemoryMode::kPread) {
    throw Error(ErrorKind::kUnsupported, s.path,
                "sample " + std::to_string(i) +
                    " cannot be viewed in place: the cache is open in pread mode; use "
                    "copy_sample()");
  }
  if (s.data == nullptr) {
    throw Error(ErrorKind::kUnsupported, s.path,
                "sample " + std::to_string(i) +
                    " is in a chunked or compressed HDF5 shard, which cannot be viewed in place; "
                    "use copy_sample(), or MemoryMode::kInProcess to hold the shard in memory");
  }
  const SampleShape shape = c.sample_shape(i);
  ImageView v;
  v.data = s.data + c.data_offset(s, i);
  v.height = shape.height;
  v.width = shape.width;
  v.channels = shape.channels;
  v.label = c.labels[static_cast<size_t>(i)];
  return v;
}

}  // namespace dscache
