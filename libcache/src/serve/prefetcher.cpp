// Prefetcher: the ring of slots, the worker threads and the in-order hand-off to the consumer.
#include "serve/prefetcher.h"

#include <cxxabi.h>

#include <chrono>
#include <utility>

#include "dscache/error.h"

namespace dscache {

bool Prefetcher::Cancel::requested() const {
  return owner_->generation_.load(std::memory_order_relaxed) != gen_;
}

Prefetcher::Prefetcher(uint32_t workers, uint32_t slots, FillFn fill)
    : slot_count_(slots), fill_(std::move(fill)), slots_(slots) {
  threads_.reserve(workers);
  try {
    for (uint32_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    running_ = false;
    generation_.fetch_add(1);
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Prefetcher::stop_locked(std::unique_lock<std::mutex>& lock) {
  generation_.fetch_add(1);
  running_ = false;
  done_cv_.wait(lock, [this] { return busy_ == 0; });
  for (Slot& s : slots_) s = Slot{};
  holding_ = false;
}

void Prefetcher::stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_locked(lock);
}

void Prefetcher::start(uint64_t first, uint64_t end) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_locked(lock);
    next_job_ = first;
    end_job_ = end;
    running_ = true;
  }
  work_cv_.notify_all();
}

void Prefetcher::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!holding_) return;
    slots_[held_slot_] = Slot{};
    holding_ = false;
  }
  work_cv_.notify_all();
}

uint32_t Prefetcher::acquire(uint64_t job, double* waited, const std::function<void()>& poll) {
  release();
  const uint32_t slot = static_cast<uint32_t>(job % slot_count_);
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] {
    const Slot& s = slots_[slot];
    return s.job == job && (s.state == SlotState::kReady || s.state == SlotState::kFailed);
  };
  if (!done()) {
    const auto t0 = std::chrono::steady_clock::now();
    auto add_wait = [&] {
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (waited) *waited += dt.count();
    };
    if (threads_.empty()) {
      // No workers: the consumer fills its job itself, now (the run's jobs come in order, so
      // `job` is the next to claim). Its time counts as waiting: the batch was not ready.
      if (!running_ || job != next_job_ || job >= end_job_) {  // our invariant, never user input
        throw Error(ErrorKind::kInvalidArgument, "",
                    "prefetcher: job " + std::to_string(job) + " is not the next of the run");
      }
      next_job_ = job + 1;
      try {
        run_fill(lock, job);
      } catch (...) {  // only a forced unwind leaves run_fill
        add_wait();
        throw;
      }
    } else if (!poll) {
      done_cv_.wait(lock, done);
    } else {
      while (!done_cv_.wait_for(lock, std::chrono::milliseconds(100), done)) {
        lock.unlock();
        try {
          poll();
        } catch (...) {
          add_wait();
          throw;
        }
        lock.lock();
      }
    }
    add_wait();
  }
  Slot& s = slots_[slot];
  if (s.state == SlotState::kFailed) std::rethrow_exception(s.error);  // slot stays failed
  holding_ = true;
  held_slot_ = slot;
  return slot;
}

void Prefetcher::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] {
      return shutdown_ || (running_ && next_job_ < end_job_ &&
                           slots_[next_job_ % slot_count_].state == SlotState::kFree);
    });
    if (shutdown_) return;
    run_fill(lock, next_job_++);
  }
}

void Prefetcher::run_fill(std::unique_lock<std::mutex>& lock, uint64_t job) {
  const uint32_t slot = static_cast<uint32_t>(job % slot_count_);
  const uint64_t gen = generation_.load();
  slots_[slot].state = SlotState::kFilling;
  slots_[slot].job = job;
  ++busy_;
  lock.unlock();

  std::exception_ptr error;
  try {
    fill_(job, slot, Cancel(this, gen));
  } catch (abi::__forced_unwind&) {
    // The thread is being cancelled or ended by pthread_exit (Python does that to a thread
    // taking the GIL during interpreter finalization): it must unwind, never be swallowed
    // (that aborts with "FATAL: exception not rethrown"). Leave the books straight first so
    // the consumer and the destructor never wait for this fill.
    lock.lock();
    --busy_;
    if (generation_.load() == gen) {
      Slot& s = slots_[slot];
      s.state = SlotState::kFailed;
      s.error = std::make_exception_ptr(
          Error(ErrorKind::kIOError, "", "loader worker thread ended while filling a batch"));
    }
    done_cv_.notify_all();
    lock.unlock();
    throw;
  } catch (...) {
    error = std::current_exception();
  }

  lock.lock();
  --busy_;
  if (generation_.load() == gen) {
    Slot& s = slots_[slot];
    s.state = error ? SlotState::kFailed : SlotState::kReady;
    s.error = std::move(error);
  }
  // Wake the consumer: its job may be ready, or stop() may be waiting for busy_ == 0.
  done_cv_.notify_all();
}

}  // namespace dscache
