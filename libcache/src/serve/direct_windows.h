// DirectWindows: a windowed epoch's windows read with O_DIRECT into the Loader's own buffers,
// ahead of the workers, for caches larger than memory (LoaderOptions::direct_read).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dscache/cache.h"
#include "dscache/direct_read.h"
#include "serve/prefetcher.h"
#include "serve/read_ahead.h"

namespace dscache {
struct LoaderOptions;
namespace detail {

// LoaderOptions' direct_* fields: Error(kInvalidArgument) naming the offending one.
void validate_direct(const LoaderOptions& o);

// LoaderOptions::direct_read for a Loader over `source`: whether its epochs try O_DIRECT, and
// why (Loader::direct_read_reason()). kAuto probes this process's memory (direct_read.cpp).
// `plain_copy`: the fixed layout with crop none.
DirectReadDecision choose_direct_read(const SampleSource& source, const LoaderOptions& o,
                                      bool plain_copy);
// Loader::direct_read_reason(): `choice`'s reason, plus the file system's refusal if `refused`.
std::string describe(const DirectReadDecision& choice, bool refused);

constexpr uint32_t kNoWindow = UINT32_MAX;

// The window each of a rank's `samples_per_epoch` positions is read from: position p is global
// position rank + p * world of the epoch's order, and window w holds the global positions of
// its blocks, in order. Only the batches this loader serves count: batch first_batch, then
// every `stride`-th (of `batch_size` positions each); others, and the rank tail's padding
// (global positions >= n), get kNoWindow. `*left` gets each window's count.
std::vector<uint32_t> position_windows(const std::vector<ReadAhead::Window>& windows, uint64_t n,
                                       const SamplerOptions& sampler, uint64_t samples_per_epoch,
                                       uint64_t batch_size, uint64_t first_batch, uint64_t stride,
                                       std::vector<uint64_t>* left);

// Why: served through the page cache, an out-of-core window costs the kernel a page-cache
// insert (WILLNEED), a copy out (pread) and an eviction (DONTNEED) per page; on a fast disk
// that CPU work, not the disk, set the rate (perf: ~40 % of the cycles in page-cache
// bookkeeping). Here the disk DMAs each window's blocks straight into an aligned buffer (in
// file order, `depth` requests of `request_bytes` in flight) and a worker's only cost is the
// memcpy into its batch slot.
//
// The k-th window with samples to serve is loaded by one reader thread into buffer
// k % buffers (2 MiB-aligned, MADV_HUGEPAGE) once the window that held it has none left; windows
// are served in order (a rank's positions visit them in order), so with >= 2 buffers the next
// window is read while this one is served and nothing can wait on itself. Owns its buffers and
// thread; copy() may be called from any number of worker threads; destroying it stops the reader
// (waiting workers return false).
class DirectWindows {
 public:
  struct Options {
    uint32_t buffers = 2;                // windows held at once (>= 2)
    uint32_t depth = 4;                  // read requests in flight (>= 1)
    uint64_t request_bytes = 512 << 10;  // bytes per request (a multiple of 4096)
  };
  // The Loader's epoch, when choose_direct_read() chose O_DIRECT: null unless the path applies
  // (kWindowed, a Cache in kPread mode; the caller checks crop none) and O_DIRECT works; else
  // `*pos_window` gets position_windows() for the batches from `first_batch` on.
  static std::unique_ptr<DirectWindows> plan(const std::shared_ptr<const SampleSource>& source,
                                             const LoaderOptions& o,
                                             const std::vector<ReadAhead::Window>& windows,
                                             uint64_t samples_per_epoch, uint64_t first_batch,
                                             std::vector<uint32_t>* pos_window);
  // `windows`: ReadAhead's plan; `left[w]`: how many copy() calls window w will get this epoch
  // (0: never read). Returns null when a shard refuses O_DIRECT (tmpfs, some FUSE) or the
  // cache is not served by pread: the caller keeps its page-cache path.
  static std::unique_ptr<DirectWindows> open(const Cache& cache,
                                             const std::vector<ReadAhead::Window>& windows,
                                             std::vector<uint64_t> left, const Options& options);
  ~DirectWindows();
  DirectWindows(const DirectWindows&) = delete;
  DirectWindows& operator=(const DirectWindows&) = delete;

  // Copies sample i of window w (its stored bytes) to `out`, waiting for the window to be read;
  // false when cancelled first. A read error (EIO, a shard shorter than its run) is rethrown
  // here, naming the file.
  bool copy(uint64_t w, uint64_t i, uint8_t* out, const Prefetcher::Cancel& cancel);

  // One disk read of a window: `bytes` at file `offset` (both 4096-aligned; the file may end
  // inside it) into buffer byte `at`; `need` of them must be there (the rest is the file's tail
  // rounded up).
  struct Request {
    int fd = -1;
    const std::string* path = nullptr;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    uint64_t need = 0;
    uint64_t at = 0;
  };
  // Where a run of samples of a window lies in its buffer.
  struct Piece {
    uint64_t first = 0, count = 0;  // samples
    uint64_t at = 0;                // buffer byte of sample `first`
  };

 private:
  DirectWindows() = default;
  void read_loop();
  void read_window(size_t w, uint8_t* buf);

  struct Window {
    std::vector<Piece> pieces;      // by first sample
    std::vector<Request> requests;  // in file order
    uint64_t left = 0;              // copies still to come (guarded by mu_)
    bool ready = false;             // read into its buffer (guarded by mu_)
    size_t buffer = 0;              // which one (set before ready)
  };
  std::vector<Window> windows_;
  std::vector<std::string> paths_;
  std::vector<int> fds_;  // O_DIRECT descriptors, one per shard file (owned)
  uint64_t sample_bytes_ = 0;
  Options options_;
  uint64_t buffer_bytes_ = 0;
  std::vector<std::unique_ptr<uint8_t, void (*)(void*)>> buffers_;
  std::vector<int64_t> owner_;  // per buffer: the window in it (-1: free); guarded by mu_

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::thread reader_;
};

// Reads `r` into `buf` + r.at: retries EINTR and short reads; a read that ends off a block
// boundary is the file's end. Fewer than r.need bytes is Corruption naming the file.
void read_request(const DirectWindows::Request& r, uint8_t* buf);

}  // namespace detail
}  // namespace dscache
