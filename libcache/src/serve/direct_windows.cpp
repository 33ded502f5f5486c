// DirectWindows: planning each window's O_DIRECT reads, the reader thread, and the workers'
// copies out of the window buffers.
#include "serve/direct_windows.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "dscache/error.h"
#include "dscache/loader.h"

namespace dscache {
namespace detail {

namespace {

constexpr uint64_t kAlign = 4096;  // O_DIRECT: offsets, lengths and addresses (logical blocks)

uint64_t round_down(uint64_t v) { return v / kAlign * kAlign; }
uint64_t round_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// The file behind `fd`, opened again with O_DIRECT (the same inode even if DIR was renamed);
// -1 when the file system refuses O_DIRECT.
int open_direct(int fd, const std::string& path) {
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  int d = ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT | O_NONBLOCK);
  if (d < 0 && errno == ENOENT) d = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (d < 0) return -1;
  // Some file systems accept the flag at open and refuse the first read.
  void* probe = std::aligned_alloc(kAlign, kAlign);
  if (probe == nullptr) {
    ::close(d);
    throw std::bad_alloc();
  }
  ssize_t got;
  do {
    got = ::pread(d, probe, kAlign, 0);
  } while (got < 0 && errno == EINTR);
  std::free(probe);
  if (got < 0) {
    ::close(d);
    return -1;
  }
  return d;
}

}  // namespace

void read_request(const DirectWindows::Request& r, uint8_t* buf) {
  uint64_t done = 0;
  while (done < r.bytes) {
    const ssize_t n = ::pread(r.fd, buf + r.at + done, static_cast<size_t>(r.bytes - done),
                              static_cast<off_t>(r.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(*r.path, "read (O_DIRECT)");
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
    if (static_cast<uint64_t>(n) % kAlign != 0) break;  // the file's tail
  }
  if (done < r.need) {
    throw Error(ErrorKind::kCorruption, *r.path,
                "unexpected end of file: " + std::to_string(r.need) + " bytes wanted at offset " +
                    std::to_string(r.offset) + ", " + std::to_string(done) + " read");
  }
}

void validate_direct(const LoaderOptions& o) {
  auto invalid = [](const std::string& reason) {
    return Error(ErrorKind::kInvalidArgument, "", reason);
  };
  if (kDirectReadNames.find(kDirectReadNames.to_string(o.direct_read)) != o.direct_read) {
    throw invalid("loader.direct_read " + std::to_string(static_cast<int>(o.direct_read)) +
                  " is not one of " + kDirectReadNames.names());
  }
  if (o.direct_buffers < 2 || o.direct_buffers > 64) {
    throw invalid("loader.direct_buffers " + std::to_string(o.direct_buffers) +
                  " must be in [2, 64] (windows held by direct_read)");
  }
  if (o.direct_depth < 1 || o.direct_depth > 64) {
    throw invalid("loader.direct_depth " + std::to_string(o.direct_depth) +
                  " must be in [1, 64] (read requests in flight)");
  }
  if (o.direct_request_kib < 4 || o.direct_request_kib > 65536 || o.direct_request_kib % 4 != 0) {
    throw invalid("loader.direct_request_kib " + std::to_string(o.direct_request_kib) +
                  " must be a multiple of 4 in [4, 65536] (O_DIRECT reads whole 4 KiB blocks)");
  }
}

std::vector<uint32_t> position_windows(const std::vector<ReadAhead::Window>& windows, uint64_t n,
                                       const SamplerOptions& sampler, uint64_t samples_per_epoch,
                                       uint64_t batch_size, uint64_t first_batch, uint64_t stride,
                                       std::vector<uint64_t>* left) {
  std::vector<uint64_t> starts{0};  // window w: global positions [starts[w], starts[w + 1])
  for (const ReadAhead::Window& w : windows) {
    uint64_t samples = 0;
    for (const ReadAhead::Range& r : w.blocks) samples += r.count;
    starts.push_back(starts.back() + samples);
  }
  left->assign(windows.size(), 0);
  std::vector<uint32_t> out(samples_per_epoch, kNoWindow);
  for (uint64_t b = first_batch; b * batch_size < samples_per_epoch; b += stride) {
    const uint64_t last = std::min(b * batch_size + batch_size, samples_per_epoch);
    for (uint64_t p = b * batch_size; p < last; ++p) {
      const uint64_t g = rank_position(sampler, p);
      if (g >= n) continue;
      const auto w = static_cast<uint32_t>(std::upper_bound(starts.begin(), starts.end(), g) -
                                           starts.begin() - 1);
      out[p] = w;
      ++(*left)[w];
    }
  }
  return out;
}

std::unique_ptr<DirectWindows> DirectWindows::plan(
    const std::shared_ptr<const SampleSource>& source, const LoaderOptions& o,
    const std::vector<ReadAhead::Window>& windows, uint64_t samples_per_epoch, uint64_t first_batch,
    std::vector<uint32_t>* pos_window) {
  pos_window->clear();
  if (o.sampler.shuffle != Shuffle::kWindowed || windows.empty()) return nullptr;
  const auto cache = std::dynamic_pointer_cast<const Cache>(source);
  if (!cache || cache->memory_mode() != MemoryMode::kPread) return nullptr;
  std::vector<uint64_t> left;
  std::vector<uint32_t> where =
      position_windows(windows, source->size(), o.sampler, samples_per_epoch, o.batch_size,
                       first_batch, o.batch_stride, &left);
  Options d;
  d.buffers = o.direct_buffers;
  d.depth = o.direct_depth;
  d.request_bytes = uint64_t{o.direct_request_kib} << 10;
  auto out = open(*cache, windows, std::move(left), d);
  if (out) *pos_window = std::move(where);
  return out;
}

std::unique_ptr<DirectWindows> DirectWindows::open(const Cache& cache,
                                                   const std::vector<ReadAhead::Window>& windows,
                                                   std::vector<uint64_t> left,
                                                   const Options& options) {
  if (options.buffers < 2) throw Error(ErrorKind::kInvalidArgument, "", "direct read: buffers < 2");
  if (options.depth < 1) throw Error(ErrorKind::kInvalidArgument, "", "direct read: depth < 1");
  if (options.request_bytes == 0 || options.request_bytes % kAlign != 0) {
    throw Error(ErrorKind::kInvalidArgument, "",
                "direct read: request bytes must be a positive multiple of 4096");
  }
  std::unique_ptr<DirectWindows> d(new DirectWindows());
  d->options_ = options;
  d->sample_bytes_ = cache.shape().bytes();
  d->windows_.resize(windows.size());
  std::vector<std::pair<int, int>> fd_map;            // the Cache's fd -> index in fds_
  d->paths_.reserve(cache.manifest().shards.size());  // stable: Requests point at them
  for (size_t w = 0; w < windows.size(); ++w) {
    Window& win = d->windows_[w];
    win.left = w < left.size() ? left[w] : 0;
    if (win.left == 0) continue;
    uint64_t at = 0;
    for (const ReadAhead::Range& block : windows[w].blocks) {
      const std::vector<Cache::StoredRun> runs = cache.stored_runs(block.first, block.count);
      if (runs.empty()) return nullptr;  // not served by pread: the page-cache path
      for (const Cache::StoredRun& run : runs) {
        auto it = std::find_if(fd_map.begin(), fd_map.end(),
                               [&](const std::pair<int, int>& p) { return p.first == run.fd; });
        if (it == fd_map.end()) {
          const int direct = open_direct(run.fd, run.path);
          if (direct < 0) return nullptr;
          d->fds_.push_back(direct);
          d->paths_.push_back(run.path);
          fd_map.emplace_back(run.fd, static_cast<int>(d->fds_.size() - 1));
          it = fd_map.end() - 1;
        }
        const int k = it->second;
        const uint64_t lo = round_down(run.offset), end = run.offset + run.bytes;
        const uint64_t hi = round_up(end);
        win.pieces.push_back(Piece{run.first, run.count, at + (run.offset - lo)});
        for (uint64_t c = lo; c < hi; c += options.request_bytes) {
          const uint64_t bytes = std::min(options.request_bytes, hi - c);
          // Reads run from c on, so through the run's end: c < hi means c < end.
          const uint64_t need = std::min(bytes, end - c);
          win.requests.push_back(Request{d->fds_[k], &d->paths_[k], c, bytes, need, at + (c - lo)});
        }
        at += hi - lo;
      }
    }
    std::sort(win.pieces.begin(), win.pieces.end(),
              [](const Piece& a, const Piece& b) { return a.first < b.first; });
    // File order: the disk sees one sweep per window, not the shuffled block order.
    std::sort(win.requests.begin(), win.requests.end(), [](const Request& a, const Request& b) {
      return a.fd != b.fd ? a.fd < b.fd : a.offset < b.offset;
    });
    d->buffer_bytes_ = std::max(d->buffer_bytes_, at);
  }
  const size_t count = std::min<size_t>(options.buffers, std::max<size_t>(1, windows.size()));
  // 2 MiB-aligned and advised as huge pages (where THP is "madvise"): O_DIRECT pins the
  // buffer's pages for every request and the workers' copies walk it, both per page.
  constexpr uint64_t kHuge = uint64_t{2} << 20;
  const uint64_t size = (std::max(kAlign, d->buffer_bytes_) + kHuge - 1) / kHuge * kHuge;
  for (size_t b = 0; b < count; ++b) {
    void* p = std::aligned_alloc(kHuge, size);
    if (p == nullptr) throw std::bad_alloc();
    d->buffers_.emplace_back(static_cast<uint8_t*>(p), std::free);
    ::madvise(p, size, MADV_HUGEPAGE);  // a hint: refused, the buffer works as it is
  }
  d->owner_.assign(count, -1);
  d->reader_ = std::thread([p = d.get()] { p->read_loop(); });
  return d;
}

DirectWindows::~DirectWindows() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  for (int fd : fds_) ::close(fd);
}

void DirectWindows::read_loop() {
  size_t loaded = 0;
  for (size_t w = 0; w < windows_.size(); ++w) {
    if (windows_[w].left == 0) continue;
    const size_t b = loaded++ % buffers_.size();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || owner_[b] < 0; });
      if (stop_) return;
      owner_[b] = static_cast<int64_t>(w);
    }
    try {
      read_window(w, buffers_[b].get());
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    if (stop_) return;  // read_window gave up part way: never mark it ready
    {
      std::lock_guard<std::mutex> lock(mu_);
      windows_[w].buffer = b;
      windows_[w].ready = true;
    }
    cv_.notify_all();
  }
}

void DirectWindows::read_window(size_t w, uint8_t* buf) {
  const std::vector<Request>& requests = windows_[w].requests;
  std::atomic<size_t> next{0};
  std::exception_ptr first_error;
  std::mutex error_mu;
  auto work = [&] {
    try {
      for (size_t i = next++; i < requests.size() && !stop_; i = next++) {
        read_request(requests[i], buf);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!first_error) first_error = std::current_exception();
      next = requests.size();
    }
  };
  std::vector<std::thread> helpers;
  const size_t extra = std::min<size_t>(options_.depth - 1, requests.size());
  for (size_t t = 1; t < extra + 1 && t < requests.size(); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

bool DirectWindows::copy(uint64_t w, uint64_t i, uint8_t* out, const Prefetcher::Cancel& cancel) {
  Window& win = windows_.at(static_cast<size_t>(w));
  size_t b = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!win.ready) {
      if (error_) std::rethrow_exception(error_);
      if (stop_ || cancel.requested()) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    b = win.buffer;
  }
  auto it = std::upper_bound(win.pieces.begin(), win.pieces.end(), i,
                             [](uint64_t v, const Piece& p) { return v < p.first; });
  if (it == win.pieces.begin() || i >= (it - 1)->first + (it - 1)->count) {
    throw Error(
        ErrorKind::kInvalidArgument, "",
        "direct read: sample " + std::to_string(i) + " is not in window " + std::to_string(w));
  }
  --it;
  std::memcpy(out, buffers_[b].get() + it->at + (i - it->first) * sample_bytes_,
              static_cast<size_t>(sample_bytes_));
  bool freed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (--win.left == 0) {
      owner_[b] = -1;
      freed = true;
    }
  }
  if (freed) cv_.notify_all();
  return true;
}

}  // namespace detail
}  // namespace dscache
