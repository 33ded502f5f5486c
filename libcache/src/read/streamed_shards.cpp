// The shards of a streamed remote cache, acquired, checked, fetched ahead and let go
// (read/streamed_shards.h).
#include "read/streamed_shards.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "dscache/error.h"
#include "read/cache_impl.h"
#include "remote/mirror.h"

namespace dscache {
namespace detail {

StreamedShards::StreamedShards(Cache::Impl& cache, std::shared_ptr<remote::HeldMirror> copy)
    : c_(cache), copy_(std::move(copy)), slots_(cache.shards.size()) {
  // Shards read and let go stay open (cheap to read again) up to a quarter of the budget; the
  // rest of it holds the window being read and the one fetched ahead.
  idle_limit_ = copy_->shard_room() / 4;
  copy_->set_release_hook([this] { return release_idle(); });
}

StreamedShards::~StreamedShards() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : workers_) {
    // A forked child holds the parent's thread objects but not its threads.
    if (workers_pid_ == ::getpid()) {
      t.join();
    } else {
      t.detach();
    }
  }
  copy_->set_release_hook(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (slots_[k].open) close_slot(k);
  }
}

StreamedShards::Pin::~Pin() {
  if (owner_ != nullptr) owner_->unpin(k_);
}

StreamedShards::Pin StreamedShards::pin(size_t k) {
  std::unique_lock<std::mutex> lock(mu_);
  Slot& s = slots_[k];
  while (!s.open) {
    if (s.loading) {
      cv_.wait(lock);
    } else {
      load(lock, k);
    }
  }
  if (idle(s)) idle_bytes_ -= c_.shards[k].entry.bytes;
  ++s.pins;
  s.used = ++tick_;
  return Pin(this, k);
}

void StreamedShards::unpin(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[k];
  --s.pins;
  if (!idle(s)) return;
  idle_bytes_ += c_.shards[k].entry.bytes;
  if (idle_bytes_ > idle_limit_) close_idle(idle_limit_);
}

void StreamedShards::load(std::unique_lock<std::mutex>& lock, size_t k) {
  Slot& s = slots_[k];
  s.loading = true;
  lock.unlock();
  int fd = -1;
  try {
    fd = copy_->acquire_shard(k);
    // The file at hand is the one the lock holds (acquire_shard checked its inode, and no
    // evictor removes a locked file), so opening it by name through the directory reads it.
    ShardFile f = c_.files->open_shard(k);  // its header agrees with the manifest
    ShardState& st = c_.shards[k];
    if (f.data_bytes != st.data_bytes) {
      throw Error(ErrorKind::kCorruption, st.path,
                  "the shard holds " + std::to_string(f.data_bytes) +
                      " data bytes, the manifest and index say " + std::to_string(st.data_bytes));
    }
    st.loc = f.loc;
    st.file = std::move(f.file);
    st.fd = st.file.fd();
    st.pread = st.loc.contiguous;
    st.read_path = st.pread ? std::string() : st.file.fd_path();
  } catch (...) {
    if (fd >= 0) ::close(fd);
    lock.lock();
    s.loading = false;
    cv_.notify_all();
    throw;
  }
  lock.lock();
  s.lock_fd = fd;
  s.loading = false;
  s.open = true;
  ++acquired_;
  if (idle(s)) idle_bytes_ += c_.shards[k].entry.bytes;
  cv_.notify_all();
}

void StreamedShards::close_slot(size_t k) {
  Slot& s = slots_[k];
  if (idle(s)) idle_bytes_ -= c_.shards[k].entry.bytes;
  ShardState& st = c_.shards[k];
  st.file = File();
  st.fd = -1;
  st.pread = false;
  st.read_path.clear();
  ::close(s.lock_fd);
  s.lock_fd = -1;
  s.open = false;
}

void StreamedShards::close_idle(uint64_t keep_bytes) {
  // Least recently pinned first.
  std::vector<size_t> order;
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (idle(slots_[k])) order.push_back(k);
  }
  std::sort(order.begin(), order.end(),
            [this](size_t a, size_t b) { return slots_[a].used < slots_[b].used; });
  for (size_t k : order) {
    if (idle_bytes_ <= keep_bytes) break;
    close_slot(k);
  }
}

bool StreamedShards::release_idle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) throw Error(ErrorKind::kIOError, copy_->location(), "the cache is being closed");
  const uint64_t before = idle_bytes_;
  close_idle(0);
  return idle_bytes_ < before;
}

void StreamedShards::will_need(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[k];
  if (idle(s)) idle_bytes_ -= c_.shards[k].entry.bytes;
  s.wanted = true;
  if (s.open || s.loading || s.queued) return;
  s.queued = true;
  queue_.push_back(k);
  if (workers_.empty()) {  // started with the first advice (after a fork, in the process reading)
    workers_pid_ = ::getpid();
    for (unsigned i = 0; i < std::max(1u, copy_->requests_in_flight()); ++i) {
      workers_.emplace_back([this] { work(); });
    }
  }
  cv_.notify_all();
}

void StreamedShards::dont_need(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[k];
  if (!s.wanted) return;
  s.wanted = false;
  if (s.queued) {  // not fetched yet: not any more
    queue_.erase(std::remove(queue_.begin(), queue_.end(), k), queue_.end());
    s.queued = false;
  }
  if (s.open && s.pins == 0) {  // idle now
    idle_bytes_ += c_.shards[k].entry.bytes;
    close_slot(k);
  }
}

uint64_t StreamedShards::acquired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return acquired_;
}

void StreamedShards::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t k = queue_.front();
    queue_.pop_front();
    Slot& s = slots_[k];
    s.queued = false;
    if (s.open || s.loading || !s.wanted) continue;
    try {
      load(lock, k);
    } catch (const std::exception&) {
      // A hint: the read that needs the shard acquires it again and reports what fails then.
    }
  }
}

}  // namespace detail
}  // namespace dscache
