// The Python Loader's batch buffers: aligned host memory kept while a numpy view holds it, or
// (dscache.torch's DataLoader workers) slots of a shared-memory ring file the main process maps
// too. Local to the extension; not a header of the package.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dscache {

// A ring file's slots mapped in this process (MAP_SHARED, read-write; _shm_ring.py's layout:
// slot k's flag is byte k of the header, 1 = in flight to the main process, which sets it back
// to 0 when its tensor dies; slot k's bytes start at header_bytes + k * slot_bytes). Unmapped
// when the last holder (the pool, every Buffer in a slot) lets go. Thread-safe.
class SharedSlots {
 public:
  // Errors name `path`: InvalidArgument (a size not a multiple of 64, a file shorter than the
  // slots), IOError (open or mmap refused), Corruption (not a regular file).
  static std::shared_ptr<SharedSlots> map(const std::string& path, uint64_t header_bytes,
                                          uint64_t slot_bytes, uint32_t slots);
  ~SharedSlots();
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;

  // A slot neither in flight (flag 0) nor held here, now held; -1 when there is none.
  int take();
  // Slot k is no longer held here (its flag is left as it is).
  void put_back(int k) { held_[k].store(false, std::memory_order_release); }
  // A slot neither in flight nor held, marked in flight at once (for a copy); -1 when none.
  int claim();
  // The slot that starts at p, or -1.
  int slot_of(const void* p) const;
  // Flag k = 1: the main process owns the slot until it sets the flag back to 0.
  void mark_in_flight(int k);
  uint8_t* data(int k) const { return base_ + header_bytes_ + k * slot_bytes_; }
  uint64_t slot_bytes() const { return slot_bytes_; }

 private:
  SharedSlots() = default;
  bool free_now(int k) const;  // not held, flag 0 (written by another process: atomic load)
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint64_t header_bytes_ = 0;
  uint64_t slot_bytes_ = 0;
  uint32_t slots_ = 0;
  std::unique_ptr<std::atomic<bool>[]> held_;
  std::mutex mu_;  // take() and claim(): a free slot found and taken as one step
};

class BufferPool;

// One buffer: given back to its pool (or freed) when both the Loader released it and every view
// dropped its reference. A buffer in a shared slot is never freed: its slot is put back.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  std::weak_ptr<BufferPool> pool;       // where the memory goes back to, while the pool lives
  std::shared_ptr<SharedSlots> shared;  // set: data is slot `slot` of this mapping
  int slot = -1;
  ~Buffer();
};

// The Loader's BufferAllocator and field_allocator. Thread-safe: the Loader may allocate and
// release from any thread, and a view's last reference may drop anywhere. A buffer nothing holds
// any more is kept for reuse (a few, reused by exact size): with hand_off_images every batch
// takes new buffers (its images, and one per field), and reusing memory no array holds spares
// the page faults of fresh memory (38 MB a 224x224x3 batch of 256), while a batch still
// referenced is never reused. With shared slots attached an image buffer that fits comes from a
// free slot first, so the Loader's workers fill the batch straight into memory the main process
// maps (no copy to send it); none free: host memory, as before.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // shared: a shared slot may hold it (the images); false: host memory (a batch's fields).
  void* allocate(size_t bytes, bool shared = true);
  void release(void* p);
  // The buffer that starts at p (a batch's images), held for as long as the caller keeps it.
  std::shared_ptr<Buffer> hold(const void* p);
  // Memory no Buffer refers to any more: kept for allocate() or freed.
  void give_back(void* data, size_t bytes);
  // Later allocations try these slots first (null: none).
  void attach(std::shared_ptr<SharedSlots> slots);
  std::shared_ptr<SharedSlots> shared();
  // (allocations in a shared slot, allocations in host memory) since the last attach().
  std::pair<uint64_t, uint64_t> counts();
  ~BufferPool();

 private:
  // Buffers kept for reuse: a batch with fields hands off one per field besides its images.
  static constexpr size_t kKeep = 8;
  std::mutex mu_;
  std::map<void*, std::shared_ptr<Buffer>> live_;
  std::vector<std::pair<void*, size_t>> free_;
  std::shared_ptr<SharedSlots> shared_;
  uint64_t in_slots_ = 0;
  uint64_t in_heap_ = 0;
};

}  // namespace dscache
