// LazyCache: a sparse, memory-mapped cache file filled one sample at a time (docs/FORMAT.md,
// "Lazy cache file"). The file's bytes (geometry, header, creation) are lazy_cache_file.cpp's;
// here: mapping it, and filling and serving slots across threads and processes.
#include "dscache/lazy_cache.h"

#include <endian.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dscache/checksum.h"
#include "dscache/error.h"
#include "serve/lazy_cache_file.h"
#include "util/io_util.h"

namespace dscache {
namespace {

constexpr uint64_t kLocalityBytes = uint64_t{1} << 30;  // like a built cache's shard cap

}  // namespace

struct LazyCache::Impl {
  std::string path;
  detail::LazyGeometry geo;
  std::vector<int64_t> labels;
  DecodeFn decode;
  LazyCacheOptions options;
  int fd = -1;
  unsigned char* map = nullptr;    // the whole file, MAP_SHARED read/write
  uint8_t* bitmap = nullptr;       // into map
  uint64_t* checksums = nullptr;   // into map; little-endian values
  const uint8_t* slots = nullptr;  // into map; written with pwrite() only

  mutable std::atomic<uint64_t> hits{0};
  mutable std::atomic<uint64_t> misses{0};

  // Slots some thread of this process is decoding right now: other threads wait for it
  // instead of decoding the same sample again.
  mutable std::mutex mu;
  mutable std::condition_variable done;
  mutable std::unordered_set<uint64_t> in_flight;

  ~Impl() {
    if (map != nullptr) ::munmap(map, geo.file_bytes);
    if (fd >= 0) ::close(fd);
  }

  void check_index(uint64_t i) const {
    if (i >= geo.count) {
      throw Error(ErrorKind::kInvalidArgument, path,
                  "sample " + std::to_string(i) + " out of range (count " +
                      std::to_string(geo.count) + ")");
    }
  }

  const uint8_t* slot(uint64_t i) const { return slots + i * geo.slot_bytes; }

  bool is_filled(uint64_t i) const {
    return (__atomic_load_n(bitmap + i / 8, __ATOMIC_ACQUIRE) >> (i % 8)) & 1u;
  }

  uint64_t stored_checksum(uint64_t i) const {
    return le64toh(__atomic_load_n(checksums + i, __ATOMIC_RELAXED));
  }

  // A set bit's slot is trusted unless verify_hits finds it torn (power loss).
  bool good(uint64_t i, const uint8_t* bytes) const {
    return !options.verify_hits || xxh64(bytes, geo.slot_bytes) == stored_checksum(i);
  }

  // Claims slot i for decoding by this thread. Returns false after waiting for another thread
  // of this process that had claimed it; the caller then looks at the slot again.
  bool claim(uint64_t i) const {
    std::unique_lock<std::mutex> lock(mu);
    if (in_flight.insert(i).second) return true;
    done.wait(lock, [&] { return in_flight.count(i) == 0; });
    return false;
  }

  void release(uint64_t i) const {
    {
      std::lock_guard<std::mutex> lock(mu);
      in_flight.erase(i);
    }
    done.notify_all();
  }

  // Decodes sample i into `buf` and publishes it: slot bytes (pwrite), then the slot's XXH64,
  // then the bit with release order. A crash before the bit leaves the slot unfilled; the bytes
  // are complete in the page cache before the bit is. Call with the slot claimed.
  void fill(uint64_t i, uint8_t* buf) const {
    std::string reason;
    if (!decode(i, buf, &reason)) {
      throw Error(ErrorKind::kCorruption, "",
                  "sample " + std::to_string(i) + ": " +
                      (reason.empty() ? std::string("decode failed") : reason));
    }
    const uint64_t h = xxh64(buf, geo.slot_bytes);
    detail::pwrite_all(fd, buf, geo.slot_bytes, geo.slots_offset + i * geo.slot_bytes, path);
    __atomic_store_n(checksums + i, htole64(h), __ATOMIC_RELAXED);
    __atomic_fetch_or(bitmap + i / 8, static_cast<uint8_t>(1u << (i % 8)), __ATOMIC_RELEASE);
    misses.fetch_add(1, std::memory_order_relaxed);
  }

  // Holds the claim on slot `i` for its scope.
  struct Claim {
    const Impl* impl;
    uint64_t i;
    ~Claim() { impl->release(i); }
  };

  // A hit for copy(): slot `i` is filled and its copy in `out` checks good.
  bool copy_hit(uint64_t i, uint8_t* out) const {
    if (!is_filled(i)) return false;
    std::memcpy(out, slot(i), geo.slot_bytes);
    if (!good(i, out)) return false;  // checked on the copy: no window between check and use
    hits.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // A hit for view(): slot `i` is filled and checks good in place.
  bool view_hit(uint64_t i) const {
    if (!is_filled(i) || !good(i, slot(i))) return false;
    hits.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  void copy(uint64_t i, uint8_t* out) const {
    check_index(i);
    for (;;) {
      if (copy_hit(i, out)) return;
      if (!claim(i)) continue;
      const Claim held{this, i};
      // A thread that held the claim (or another process) may have filled it since we looked.
      if (copy_hit(i, out)) return;
      fill(i, out);  // decodes straight into the caller's buffer
      return;
    }
  }

  const uint8_t* view(uint64_t i) const {
    check_index(i);
    for (;;) {
      if (view_hit(i)) return slot(i);
      if (!claim(i)) continue;
      const Claim held{this, i};
      if (view_hit(i)) return slot(i);
      // Never decode into the slot itself: another process may be reading or filling it.
      std::vector<uint8_t> buf(geo.slot_bytes);
      fill(i, buf.data());
      return slot(i);
    }
  }
};

std::shared_ptr<LazyCache> LazyCache::open(const std::string& path, uint64_t count,
                                           SampleShape shape, std::vector<int64_t> labels,
                                           DecodeFn decode, const LazyCacheOptions& options) {
  if (count == 0) throw Error(ErrorKind::kInvalidArgument, path, "count must be > 0");
  if (shape.height == 0 || shape.width == 0) {
    throw Error(ErrorKind::kInvalidArgument, path, "shape: height and width must be > 0");
  }
  if (channel_order_for(shape.channels) == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "shape.channels must be 1, 3 or 4, got " + std::to_string(shape.channels));
  }
  if (labels.size() != count) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "labels has " + std::to_string(labels.size()) + " entries, count is " +
                    std::to_string(count));
  }
  if (!decode) throw Error(ErrorKind::kInvalidArgument, path, "decode function is empty");

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->geo = detail::lazy_geometry(path, count, shape);
  impl->labels = std::move(labels);
  impl->decode = std::move(decode);
  impl->options = options;

  impl->fd = detail::open_lazy_file(path, impl->geo, options.source_digest);

  void* map =
      ::mmap(nullptr, impl->geo.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, impl->fd, 0);
  if (map == MAP_FAILED) throw_errno(path, "mmap");
  impl->map = static_cast<unsigned char*>(map);
  impl->bitmap = impl->map + impl->geo.bitmap_offset;
  impl->checksums = reinterpret_cast<uint64_t*>(impl->map + impl->geo.checksums_offset);
  impl->slots = impl->map + impl->geo.slots_offset;
  return std::shared_ptr<LazyCache>(new LazyCache(std::move(impl)));
}

LazyCache::LazyCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LazyCache::~LazyCache() = default;

uint64_t LazyCache::filled() const {
  // Counted from the shared bitmap (about 20 us per million samples), so fills made by other
  // processes since open are included. The bitmap is padded to whole 8-byte words; bits past
  // `count` are masked off in case a damaged file set them.
  const uint64_t count = impl_->geo.count;
  const uint64_t words = (count + 63) / 64;
  const auto* w = reinterpret_cast<const uint64_t*>(impl_->bitmap);
  uint64_t n = 0;
  for (uint64_t k = 0; k < words; ++k) {
    uint64_t bits = le64toh(__atomic_load_n(w + k, __ATOMIC_RELAXED));  // bit b = sample 64k+b
    if (k == words - 1 && count % 64 != 0) bits &= (uint64_t{1} << (count % 64)) - 1;
    n += static_cast<uint64_t>(__builtin_popcountll(bits));
  }
  return n;
}

uint64_t LazyCache::hits() const { return impl_->hits.load(std::memory_order_relaxed); }
uint64_t LazyCache::misses() const { return impl_->misses.load(std::memory_order_relaxed); }
uint64_t LazyCache::size() const { return impl_->geo.count; }
Layout LazyCache::layout() const { return Layout::kFixed; }
SampleShape LazyCache::shape() const { return impl_->geo.shape; }

int64_t LazyCache::label(uint64_t i) const {
  impl_->check_index(i);
  return impl_->labels[i];
}

uint64_t LazyCache::locality_block() const {
  const uint64_t per_gib = kLocalityBytes / impl_->geo.slot_bytes;
  return std::max<uint64_t>(1, std::min(per_gib, impl_->geo.count));
}

void LazyCache::copy_sample(uint64_t i, uint8_t* out) const { impl_->copy(i, out); }

ImageView LazyCache::view(uint64_t i) const {
  ImageView v;
  v.data = impl_->view(i);
  v.height = impl_->geo.shape.height;
  v.width = impl_->geo.shape.width;
  v.channels = impl_->geo.shape.channels;
  v.label = impl_->labels[i];
  return v;
}

}  // namespace dscache
