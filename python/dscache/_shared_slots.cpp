// SharedSlots (_buffer_pool.h): a ring file of dscache.torch mapped into the worker's Loader.
// The one file of the extension that includes POSIX headers (tests/check_layering.py): libcache's
// contract maps files read-only, this mapping is written by the Loader and read by another
// process.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "_buffer_pool.h"
#include "dscache/error.h"
#include "dscache/file.h"

namespace dscache {

std::shared_ptr<SharedSlots> SharedSlots::map(const std::string& path, uint64_t header_bytes,
                                              uint64_t slot_bytes, uint32_t slots) {
  if (header_bytes % 64 != 0 || slot_bytes % 64 != 0 || slot_bytes == 0 || header_bytes < slots) {
    throw Error(ErrorKind::kInvalidArgument, path,
                "shared slots: header_bytes " + std::to_string(header_bytes) + " and slot_bytes " +
                    std::to_string(slot_bytes) +
                    " must be multiples of 64 (slot_bytes > 0), the header one flag byte a slot");
  }
  if (slot_bytes > (SIZE_MAX - header_bytes) / std::max<uint64_t>(slots, 1)) {
    throw Error(ErrorKind::kInvalidArgument, path, "shared slots: size does not fit in memory");
  }
  const uint64_t need = header_bytes + slot_bytes * slots;
  // O_NONBLOCK: a FIFO in its place cannot block the open; it is refused below.
  const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw Error(errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIOError, path,
                std::string("shared slots: open: ") + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const unsigned mode = st.st_mode;
    ::close(fd);
    throw Error(ErrorKind::kCorruption, path,
                "shared slots: not a regular file (" + file_type_name(mode) + ")");
  }
  if (static_cast<uint64_t>(st.st_size) < need) {
    ::close(fd);
    throw Error(ErrorKind::kInvalidArgument, path,
                "shared slots: file holds " + std::to_string(st.st_size) + " bytes, " +
                    std::to_string(slots) + " slots need " + std::to_string(need));
  }
  void* p = ::mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    throw Error(ErrorKind::kIOError, path,
                std::string("shared slots: mmap: ") + std::strerror(err));
  }
  std::shared_ptr<SharedSlots> s(new SharedSlots());
  s->base_ = static_cast<uint8_t*>(p);
  s->size_ = need;
  s->header_bytes_ = header_bytes;
  s->slot_bytes_ = slot_bytes;
  s->slots_ = slots;
  s->held_.reset(new std::atomic<bool>[slots]);
  for (uint32_t k = 0; k < slots; ++k) s->held_[k].store(false);
  return s;
}

SharedSlots::~SharedSlots() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

bool SharedSlots::free_now(int k) const {
  return !held_[k].load(std::memory_order_acquire) &&
         __atomic_load_n(base_ + k, __ATOMIC_ACQUIRE) == 0;
}

int SharedSlots::take() {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t k = 0; k < slots_; ++k) {
    if (free_now(static_cast<int>(k))) {
      held_[k].store(true, std::memory_order_release);
      return static_cast<int>(k);
    }
  }
  return -1;
}

int SharedSlots::claim() {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t k = 0; k < slots_; ++k) {
    if (free_now(static_cast<int>(k))) {
      mark_in_flight(static_cast<int>(k));
      return static_cast<int>(k);
    }
  }
  return -1;
}

int SharedSlots::slot_of(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  if (b < base_ + header_bytes_ || b >= base_ + size_) return -1;
  const uint64_t off = static_cast<uint64_t>(b - base_) - header_bytes_;
  return off % slot_bytes_ == 0 ? static_cast<int>(off / slot_bytes_) : -1;
}

void SharedSlots::mark_in_flight(int k) {
  __atomic_store_n(base_ + k, uint8_t{1}, __ATOMIC_RELEASE);
}

}  // namespace dscache
