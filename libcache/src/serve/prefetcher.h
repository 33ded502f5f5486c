// Prefetcher: worker threads that fill a ring of reusable slots with numbered jobs, in order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dscache {

// Runs fill(job, slot, cancel) for jobs [first, end) of one run on `workers` threads; job j
// goes to slot j % slots and is claimed only once the consumer has released job j - slots, so
// at most `slots` jobs are filled or held at once. The consumer takes jobs strictly in order
// with acquire(). With 0 workers there are no threads: acquire() fills its job on the calling
// thread (no read-ahead; torch's DataLoader(num_workers=0)). What a job writes depends only on the
// job number, never on which thread or when, so results are independent of the worker count and
// timing.
//
// Owns its threads; the destructor stops and joins them (promptly: a fill should poll
// cancel.requested() between units of work). start(), stop() and acquire() are for one
// consumer thread; they are not thread-safe against each other.
class Prefetcher {
 public:
  // Lets a running fill notice that its run was stopped (stop(), start() or destruction).
  class Cancel {
   public:
    bool requested() const;

   private:
    friend class Prefetcher;
    Cancel(const Prefetcher* owner, uint64_t generation) : owner_(owner), gen_(generation) {}
    const Prefetcher* owner_;
    uint64_t gen_;
  };
  using FillFn = std::function<void(uint64_t job, uint32_t slot, const Cancel& cancel)>;

  Prefetcher(uint32_t workers, uint32_t slots, FillFn fill);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Cancels the current run and returns once no fill is running: afterwards the caller may
  // change whatever fill reads, and every slot is free.
  void stop();
  // stop(), then begins a run of jobs [first, end).
  void start(uint64_t first, uint64_t end);
  // Releases the previously acquired job's slot, then blocks until `job` (the next job of the
  // run, in order) is filled and returns its slot. Rethrows the exception its fill threw (and
  // keeps rethrowing it for that job until the next start()). Adds the seconds spent blocked to
  // *waited. While it waits, calls poll (when given) about every 100 ms without the lock; an
  // exception poll throws abandons the wait (nothing is acquired; call again for the same job).
  uint32_t acquire(uint64_t job, double* waited, const std::function<void()>& poll = {});
  // Frees the slot of the job last acquired (if any) without waiting for another.
  void release();

 private:
  enum class SlotState { kFree, kFilling, kReady, kFailed };
  struct Slot {
    SlotState state = SlotState::kFree;
    uint64_t job = 0;
    std::exception_ptr error;
  };

  void work();
  // Claims `job` (mu_ held by `lock`), runs its fill without the lock and records the result.
  void run_fill(std::unique_lock<std::mutex>& lock, uint64_t job);
  void stop_locked(std::unique_lock<std::mutex>& lock);

  const uint32_t slot_count_;
  FillFn fill_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // workers: a job became claimable, or stop
  std::condition_variable done_cv_;  // consumer: a job finished, or the last busy fill left
  std::vector<Slot> slots_;
  // Bumped (under mu_) by every stop(); stale fills discard their work. Atomic so that
  // Cancel::requested() can poll it without the lock.
  std::atomic<uint64_t> generation_{0};
  bool running_ = false;
  bool shutdown_ = false;
  uint64_t next_job_ = 0;  // next job to claim
  uint64_t end_job_ = 0;   // one past the run's last job
  uint32_t busy_ = 0;      // fills in progress
  bool holding_ = false;   // the consumer holds held_slot_
  uint32_t held_slot_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace dscache
