// LazyCache: a sparse, memory-mapped cache file filled one sample at a time (docs/FORMAT.md,
// "Lazy cache file").
#include "dscache/lazy_cache.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "io_util.h"

namespace dscache {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'C', 'L', 'A', 'Z', 'Y', '\0'};
constexpr uint32_t kFormatVersion = 1;  // stored; never renumber
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kAlign = 4096;          // bitmap and checksum array are padded to this
constexpr size_t kHeaderHashedBytes = 88;  // header bytes [0, 88) are covered by its XXH64
constexpr uint64_t kLocalityBytes = uint64_t{1} << 30;  // like a built cache's shard cap

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Where everything is, as a pure function of (count, shape). Offsets are what the header stores
// and what a reader recomputes to check it.
struct Geometry {
  uint64_t count = 0;
  SampleShape shape;
  uint64_t slot_bytes = 0;
  uint64_t bitmap_offset = 0;
  uint64_t checksums_offset = 0;
  uint64_t slots_offset = 0;
  uint64_t file_bytes = 0;
};

Geometry make_geometry(const std::string& path, uint64_t count, SampleShape shape) {
  Geometry g;
  g.count = count;
  g.shape = shape;
  g.slot_bytes = shape.bytes();
  g.bitmap_offset = kHeaderBytes;
  g.checksums_offset = g.bitmap_offset + round_up((count + 7) / 8, kAlign);
  // count * 8 cannot overflow for any count whose slots fit in 64 bits (checked next).
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max() / 2;
  if (count > kMax / 8 || count > kMax / g.slot_bytes) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "count " + std::to_string(count) + " of " + std::to_string(g.slot_bytes) +
                    "-byte samples does not fit in a 64-bit file size");
  }
  g.slots_offset = g.checksums_offset + round_up(count * 8, kAlign);
  if (count * g.slot_bytes > kMax - g.slots_offset) {
    throw Error(ErrorKind::kInvalidArgument, path, "count: cache file would exceed 2^63 bytes");
  }
  g.file_bytes = g.slots_offset + count * g.slot_bytes;
  return g;
}

void put32(unsigned char* p, uint32_t v) {
  v = htole32(v);
  std::memcpy(p, &v, 4);
}
void put64(unsigned char* p, uint64_t v) {
  v = htole64(v);
  std::memcpy(p, &v, 8);
}
uint32_t get32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}
uint64_t get64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return le64toh(v);
}

// The 4096-byte header; field offsets are the spec's (docs/FORMAT.md).
void encode_header(const Geometry& g, uint64_t digest, unsigned char* h) {
  std::memset(h, 0, kHeaderBytes);
  std::memcpy(h + 0, kMagic, 8);
  put32(h + 8, kFormatVersion);
  put32(h + 12, static_cast<uint32_t>(kHeaderBytes));
  put64(h + 16, g.count);
  put32(h + 24, g.shape.height);
  put32(h + 28, g.shape.width);
  put32(h + 32, g.shape.channels);
  put32(h + 36, 0);  // reserved
  put64(h + 40, g.slot_bytes);
  put64(h + 48, digest);
  put64(h + 56, g.bitmap_offset);
  put64(h + 64, g.checksums_offset);
  put64(h + 72, g.slots_offset);
  put64(h + 80, g.file_bytes);
  put64(h + 88, xxh64(h, kHeaderHashedBytes));
}

std::string describe(uint64_t count, SampleShape s, uint64_t digest) {
  std::ostringstream o;
  o << "count " << count << ", shape " << s.height << "x" << s.width << "x" << s.channels
    << ", source_digest 0x" << std::hex << digest;
  return o.str();
}

// Checks an existing file against the caller's (count, shape, digest). Throws Corruption for a
// file that is not a well-formed lazy cache, InvalidArgument for one made for something else.
void validate_existing(int fd, const std::string& path, const Geometry& want, uint64_t digest) {
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno(path, "stat");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(size) + " bytes, less than the " +
                    std::to_string(kHeaderBytes) + "-byte lazy cache header");
  }
  unsigned char h[kHeaderBytes];
  detail::pread_all(fd, h, kHeaderBytes, 0, path, ErrorKind::kCorruption);
  if (std::memcmp(h, kMagic, 8) != 0) {
    throw Error(ErrorKind::kCorruption, path, "not a lazy cache file (bad magic)");
  }
  const uint32_t version = get32(h + 8);
  if (version > kFormatVersion) {
    throw Error(ErrorKind::kUnsupported, path,
                "lazy cache format version " + std::to_string(version) +
                    " is newer than this library's " + std::to_string(kFormatVersion));
  }
  if (get64(h + 88) != xxh64(h, kHeaderHashedBytes)) {
    throw Error(ErrorKind::kCorruption, path, "header checksum mismatch");
  }
  if (version == 0 || get32(h + 12) != kHeaderBytes) {
    throw Error(ErrorKind::kCorruption, path, "bad header (version or header size)");
  }
  const uint64_t count = get64(h + 16);
  const SampleShape shape{get32(h + 24), get32(h + 28), get32(h + 32)};
  const uint64_t file_digest = get64(h + 48);
  // The header must be self-consistent before its sizes are trusted (make_geometry divides by
  // the slot size: a zero side must be refused first).
  if (shape.bytes() == 0) {
    throw Error(ErrorKind::kCorruption, path, "header describes an impossible file");
  }
  Geometry have;
  try {
    have = make_geometry(path, count, shape);
  } catch (const Error&) {
    throw Error(ErrorKind::kCorruption, path, "header describes an impossible file");
  }
  if (get64(h + 40) != have.slot_bytes || get64(h + 56) != have.bitmap_offset ||
      get64(h + 64) != have.checksums_offset || get64(h + 72) != have.slots_offset ||
      get64(h + 80) != have.file_bytes) {
    throw Error(ErrorKind::kCorruption, path, "header offsets disagree with its count and shape");
  }
  if (size != have.file_bytes) {
    throw Error(ErrorKind::kCorruption, path,
                "file holds " + std::to_string(size) + " bytes, header says " +
                    std::to_string(have.file_bytes) + " (truncated or extended)");
  }
  if (count != want.count || shape.height != want.shape.height || shape.width != want.shape.width ||
      shape.channels != want.shape.channels || file_digest != digest) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "made for another source or shape (file: " + describe(count, shape, file_digest) +
                    "; asked: " + describe(want.count, want.shape, digest) +
                    "); delete it or use another path");
  }
}

// Removes the temp file unless released; closes its fd unless taken.
class TempGuard {
 public:
  explicit TempGuard(std::string path) : path_(std::move(path)) {}
  ~TempGuard() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempGuard(const TempGuard&) = delete;
  TempGuard& operator=(const TempGuard&) = delete;
  const std::string& path() const { return path_; }
  int fd_ = -1;
  void unlink_now() {
    ::unlink(path_.c_str());
    path_.clear();
  }
  int take_fd() { return std::exchange(fd_, -1); }

 private:
  std::string path_;
};

// Publishes `temp` as `path` only when `path` does not exist. Returns false when another
// process got there first (its file is left untouched).
bool publish_no_replace(const std::string& temp, const std::string& path) {
  if (::link(temp.c_str(), path.c_str()) == 0) return true;
  if (errno == EEXIST) return false;
  // Filesystems without hard links (vfat, some FUSE): an atomic no-replace rename if the kernel
  // and filesystem have one, else a plain rename guarded by an existence check (a narrow window
  // in which a simultaneous creator's file could be replaced; its process keeps serving from
  // its own mapping and only that process's fills are lost).
  if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != ENOSYS &&
      errno != EMLINK) {
    throw_errno(path, "link " + temp + " to");
  }
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
    return true;
  }
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS) throw_errno(path, "rename " + temp + " to");
  if (::access(path.c_str(), F_OK) == 0) return false;
  if (::rename(temp.c_str(), path.c_str()) != 0) throw_errno(path, "rename " + temp + " to");
  return true;
}

// Creates the file under a temporary name, complete (header written, metadata areas
// allocated, slots sparse), and publishes it. Returns an open read-write fd, or -1 when another
// creator won the race (the caller then opens the winner's file).
int create_file(const std::string& path, const Geometry& g, uint64_t digest) {
  const auto tid = static_cast<long>(::syscall(SYS_gettid));
  TempGuard temp(path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(tid));
  temp.fd_ = ::open(temp.path().c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (temp.fd_ < 0) throw_errno(temp.path(), "create");
  // Sparse: the slot area takes disk space only as samples are filled.
  if (::ftruncate(temp.fd_, static_cast<off_t>(g.file_bytes)) != 0) {
    throw_errno(temp.path(), "truncate to " + std::to_string(g.file_bytes) + " bytes");
  }
  // Header, bitmap and checksum array are written through the mapping: allocate them now so a
  // full disk fails here with an error instead of a SIGBUS later. Slots are written with
  // pwrite(), which reports ENOSPC.
  const int rc = ::posix_fallocate(temp.fd_, 0, static_cast<off_t>(g.slots_offset));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    errno = rc;
    throw_errno(temp.path(), "allocate header, bitmap and checksums");
  }
  unsigned char header[kHeaderBytes];
  encode_header(g, digest, header);
  detail::pwrite_all(temp.fd_, header, kHeaderBytes, 0, temp.path());
  if (::fsync(temp.fd_) != 0) throw_errno(temp.path(), "fsync");
  if (!publish_no_replace(temp.path(), path)) return -1;
  temp.unlink_now();  // after link(): drop the temp name; after a rename it is already gone
  try {
    fsync_directory(detail::dir_name(path));
  } catch (const Error&) {
    // The file itself is synced; a lost directory entry only means a cold start next time.
  }
  return temp.take_fd();
}

}  // namespace

struct LazyCache::Impl {
  std::string path;
  Geometry geo;
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

  void copy(uint64_t i, uint8_t* out) const {
    check_index(i);
    for (;;) {
      if (is_filled(i)) {
        std::memcpy(out, slot(i), geo.slot_bytes);
        if (good(i, out)) {  // checked on the copy: no window between check and use
          hits.fetch_add(1, std::memory_order_relaxed);
          return;
        }
      }
      if (!claim(i)) continue;
      struct Release {
        const Impl* impl;
        uint64_t i;
        ~Release() { impl->release(i); }
      } release_on_exit{this, i};
      // A thread that held the claim (or another process) may have filled it since we looked.
      if (is_filled(i)) {
        std::memcpy(out, slot(i), geo.slot_bytes);
        if (good(i, out)) {
          hits.fetch_add(1, std::memory_order_relaxed);
          return;
        }
      }
      fill(i, out);  // decodes straight into the caller's buffer
      return;
    }
  }

  const uint8_t* view(uint64_t i) const {
    check_index(i);
    for (;;) {
      if (is_filled(i) && good(i, slot(i))) {
        hits.fetch_add(1, std::memory_order_relaxed);
        return slot(i);
      }
      if (!claim(i)) continue;
      struct Release {
        const Impl* impl;
        uint64_t i;
        ~Release() { impl->release(i); }
      } release_on_exit{this, i};
      if (is_filled(i) && good(i, slot(i))) {
        hits.fetch_add(1, std::memory_order_relaxed);
        return slot(i);
      }
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
  if (shape.channels != 1 && shape.channels != 3) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "shape.channels must be 1 or 3, got " + std::to_string(shape.channels));
  }
  if (labels.size() != count) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "labels has " + std::to_string(labels.size()) + " entries, count is " +
                    std::to_string(count));
  }
  if (!decode) throw Error(ErrorKind::kInvalidArgument, path, "decode function is empty");

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->geo = make_geometry(path, count, shape);
  impl->labels = std::move(labels);
  impl->decode = std::move(decode);
  impl->options = options;

  // Open the existing file, or create it; a lost creation race falls back to opening the
  // winner's file (complete before it got its name).
  for (int attempt = 0; impl->fd < 0; ++attempt) {
    if (attempt == 8) throw Error(ErrorKind::kIOError, path, "file keeps appearing and vanishing");
    const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      impl->fd = fd;
      struct stat st;
      if (::fstat(fd, &st) != 0) throw_errno(path, "stat");
      if (!S_ISREG(st.st_mode)) {  // a FIFO or device: never map or wait on it
        throw Error(ErrorKind::kCorruption, path,
                    "not a regular file (" + file_type_name(st.st_mode) + ")");
      }
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      validate_existing(fd, path, impl->geo, options.source_digest);
      break;
    }
    if (errno != ENOENT) throw_errno(path, "open");
    impl->fd = create_file(path, impl->geo, options.source_digest);
  }

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
