// parallel_for: the remote/ folder's requests in flight (downloads of a copy, uploads of a
// cache, the parts of a multipart upload), each job on one of a few threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dscache {
namespace remote {

// Runs job(i) for every i in [0, n) on up to `threads` threads (the caller's among them). After
// a failure no new job starts; the first failure is rethrown once the jobs in flight have ended.
template <typename Job>
void parallel_for(size_t n, unsigned threads, const Job& job) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex mu;
  auto work = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      try {
        job(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!first) first = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t t = std::min<size_t>(std::max(threads, 1u), n);
  for (size_t k = 1; k < t; ++k) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace remote
}  // namespace dscache
