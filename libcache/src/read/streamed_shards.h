// The shards of a streamed remote cache (CacheDir::streamed(): larger than the local cache's
// budget), as Cache serves them: each shard is acquired from the local cache
// (remote::HeldMirror::acquire_shard: downloaded once per node, checked) when a read needs it
// or when the Loader advises it (SampleSource::advise kWillNeed, in the epoch's order: fetched
// ahead by HeldMirror::requests_in_flight() threads), checked against the manifest (its header,
// its data bytes), held open while it is read or wanted, and closed — so that the local cache
// may evict it — when advised kDontNeed, when the idle ones pass a share of the budget, or when
// room is needed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dscache/cache.h"

namespace dscache {
namespace remote {
class HeldMirror;
}
namespace detail {

class StreamedShards {
 public:
  // `cache`'s shards (their entries, paths and data bytes set; the rest is filled as each is
  // acquired), served through `copy`.
  StreamedShards(Cache::Impl& cache, std::shared_ptr<remote::HeldMirror> copy);
  ~StreamedShards();
  StreamedShards(const StreamedShards&) = delete;
  StreamedShards& operator=(const StreamedShards&) = delete;

  // Shard k held open for as long as the Pin lives (its ShardState is then complete).
  class Pin {
   public:
    Pin() = default;
    Pin(StreamedShards* owner, size_t k) : owner_(owner), k_(k) {}
    Pin(Pin&& o) noexcept : owner_(o.owner_), k_(o.k_) { o.owner_ = nullptr; }
    Pin& operator=(Pin&&) = delete;
    ~Pin();

   private:
    StreamedShards* owner_ = nullptr;
    size_t k_ = 0;
  };
  // Blocks until shard k is at hand (downloading it on this thread when nobody is). Throws what
  // acquiring or checking it threw (kRemote, kCorruption naming the shard, ...).
  Pin pin(size_t k);
  // Fetch shard k ahead (queued, in call order) and keep it open until dont_need(k).
  void will_need(size_t k);
  // Shard k is not wanted any more: closed as soon as no read holds it.
  void dont_need(size_t k);
  // Shards acquired (downloaded here or found in the local cache), for tests and progress.
  uint64_t acquired() const;

 private:
  struct Slot {
    int lock_fd = -1;  // HeldMirror::acquire_shard's descriptor (the shard's shared lock)
    bool open = false;
    bool loading = false;
    bool queued = false;
    bool wanted = false;
    uint32_t pins = 0;
    uint64_t used = 0;  // tick of its last pin
  };
  // Open, and neither read nor wanted: counted in idle_bytes_, closed first.
  static bool idle(const Slot& s) { return s.open && s.pins == 0 && !s.wanted; }
  void unpin(size_t k);
  void load(std::unique_lock<std::mutex>& lock, size_t k);  // !open, !loading; lock held
  void close_slot(size_t k);                                // mu_ held
  void close_idle(uint64_t keep_bytes);                     // mu_ held
  bool release_idle();                                      // HeldMirror's release hook
  void work();

  Cache::Impl& c_;
  std::shared_ptr<remote::HeldMirror> copy_;
  uint64_t idle_limit_;  // bytes of open shards kept open without a pin or a will_need
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  uint64_t tick_ = 0;
  uint64_t acquired_ = 0;
  uint64_t idle_bytes_ = 0;  // open, unpinned, unwanted
  std::deque<size_t> queue_;
  std::vector<std::thread> workers_;
  int workers_pid_ = 0;
  bool stop_ = false;
};

}  // namespace detail
}  // namespace dscache
