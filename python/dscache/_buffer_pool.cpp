// BufferPool and Buffer (_buffer_pool.h): host memory kept for reuse, or shared slots.
#include "_buffer_pool.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace dscache {

void* BufferPool::allocate(size_t bytes, bool shared) {
  const size_t rounded = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  auto b = std::make_shared<Buffer>();
  b->bytes = rounded;
  b->pool = weak_from_this();
  std::lock_guard<std::mutex> lock(mu_);
  if (shared && shared_ && rounded <= shared_->slot_bytes()) {
    const int k = shared_->take();
    if (k >= 0) {
      b->shared = shared_;
      b->slot = k;
      b->data = shared_->data(k);
      ++in_slots_;
      live_[b->data] = b;
      return b->data;
    }
  }
  // The smallest kept buffer that fits without wasting more than its request (a field's
  // buffer grows, so slots ask for sizes that differ a little).
  auto fit = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= rounded && it->second <= 2 * rounded &&
        (fit == free_.end() || it->second < fit->second)) {
      fit = it;
    }
  }
  if (fit != free_.end()) {
    b->data = fit->first;
    b->bytes = fit->second;
    free_.erase(fit);
  }
  if (b->data == nullptr) b->data = std::aligned_alloc(64, rounded);
  if (b->data == nullptr) throw std::bad_alloc();
  ++in_heap_;
  live_[b->data] = b;
  return b->data;
}

void BufferPool::release(void* p) {
  std::shared_ptr<Buffer> dropped;  // given back outside the lock, if nothing else holds it
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;
  dropped = std::move(it->second);
  live_.erase(it);
}

std::shared_ptr<Buffer> BufferPool::hold(const void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(const_cast<void*>(p));
  return it == live_.end() ? nullptr : it->second;
}

void BufferPool::give_back(void* data, size_t bytes) {
  void* evicted = nullptr;
  {
    // Kept, the oldest kept one freed when full: a size no longer asked for (a field buffer
    // that grew) never blocks the sizes in use.
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() >= kKeep) {
      evicted = free_.front().first;
      free_.erase(free_.begin());
    }
    free_.emplace_back(data, bytes);
  }
  std::free(evicted);
}

void BufferPool::attach(std::shared_ptr<SharedSlots> slots) {
  std::lock_guard<std::mutex> lock(mu_);
  shared_ = std::move(slots);
  in_slots_ = in_heap_ = 0;
}

std::shared_ptr<SharedSlots> BufferPool::shared() {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_;
}

std::pair<uint64_t, uint64_t> BufferPool::counts() {
  std::lock_guard<std::mutex> lock(mu_);
  return {in_slots_, in_heap_};
}

BufferPool::~BufferPool() {
  for (auto& f : free_) std::free(f.first);
}

Buffer::~Buffer() {
  if (data == nullptr) return;
  if (shared) {  // memory of the mapping, which this Buffer keeps mapped until now
    shared->put_back(slot);
    return;
  }
  if (std::shared_ptr<BufferPool> p = pool.lock()) {
    p->give_back(data, bytes);
  } else {
    std::free(data);
  }
}

}  // namespace dscache
