// The row groups of `dscache bench` (bench_rows.h): timing loops over the memcpy ceiling, the
// Loader, the sources' decode, the lazy cache and the disk.
#include "bench_rows.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "cache_view.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/ingest/source_list.h"
#include "dscache/lazy_cache.h"
#include "dscache/loader.h"

namespace dscache {
using Clock = std::chrono::steady_clock;

const char* const kBenchRowGroups[7] = {"memcpy", "global",      "windowed", "decode",
                                        "disk",   "out-of-core", "mixture"};

Rss read_rss() {
  Rss r;
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    double kb = 0;
    if (key == "RssAnon:") {
      in >> kb;
      r.anon_mib = kb / 1024;
    } else if (key == "RssFile:") {
      in >> kb;
      r.file_mib = kb / 1024;
    }
    in.ignore(1 << 20, '\n');
  }
  return r;
}

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs whole epochs of `loader` until at least `min_seconds` passed; returns samples/s.
double run_epochs(Loader& loader, double min_seconds, uint64_t* samples_out) {
  uint64_t samples = 0, epoch = 0;
  auto t0 = Clock::now();
  do {
    loader.start_epoch(1, epoch++);
    while (const Batch* b = loader.next()) samples += b->size;
  } while (seconds_since(t0) < min_seconds);
  double s = seconds_since(t0);
  if (samples_out) *samples_out = samples;
  return samples / s;
}

// Runs batches of `loader` (epochs 0, 1, ...; stopping mid-epoch) until `min_seconds` passed;
// returns samples/s. For rows whose epoch may take minutes (out of core).
double run_for(Loader& loader, double min_seconds) {
  uint64_t samples = 0, epoch = 0;
  auto t0 = Clock::now();
  while (seconds_since(t0) < min_seconds) {
    loader.start_epoch(1, epoch++);
    while (seconds_since(t0) < min_seconds) {
      const Batch* b = loader.next();
      if (b == nullptr) break;
      samples += b->size;
    }
  }
  return samples / seconds_since(t0);
}

// Drops the page cache's copy of each file (POSIX_FADV_DONTNEED) so that the next read comes
// from the disk. Pages a process still maps are kept by the kernel: unmap first.
void drop_pages(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    const int fd = File::open(f).release();  // regular files only
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// The disk's sequential read rate on `files`: 8 MiB reads in file order with O_DIRECT (no page
// cache involved), until every file was read or `min_seconds` passed; returns bytes/s. Where
// O_DIRECT is refused (tmpfs, some FUSE file systems) it reads through the page cache from a
// cold start instead and says so in `*method`.
double disk_sequential(const std::vector<std::string>& files, double min_seconds,
                       std::string* method) {
  drop_pages(files);
  constexpr size_t kChunk = size_t{8} << 20;
  std::unique_ptr<uint8_t, void (*)(void*)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(4096, kChunk)), std::free);
  if (!buf) throw std::bad_alloc();
  bool direct = true;
  uint64_t bytes = 0;
  auto t0 = Clock::now();
  for (const std::string& f : files) {
    File::open(f);  // regular files only (a FIFO would block the opens below)
    int fd = direct ? ::open(f.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT | O_NONBLOCK) : -1;
    if (fd < 0) {
      direct = false;
      fd = File::open(f).release();
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    uint64_t offset = 0;
    while (true) {
      const ssize_t got = ::pread(fd, buf.get(), kChunk, static_cast<off_t>(offset));
      if (got < 0 && errno == EINVAL && direct && offset == 0) {  // O_DIRECT not supported
        direct = false;
        ::close(fd);
        fd = File::open(f).release();
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        continue;
      }
      if (got < 0) {
        ::close(fd);
        throw_errno(f, "read");
      }
      if (got == 0) break;
      bytes += static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
      if (seconds_since(t0) >= min_seconds) break;
    }
    ::close(fd);
    if (seconds_since(t0) >= min_seconds) break;
  }
  const double rate = bytes / seconds_since(t0);
  *method = direct ? "O_DIRECT" : "buffered, cold";
  drop_pages(files);
  return rate;
}

// The disk's rate for random sample-sized reads, cold: `threads` threads each pread one sample
// at a time (`cache` open in pread mode) at uniformly random indices for `min_seconds`;
// returns samples/s.
double disk_random(const Cache& cache, const std::vector<std::string>& files, int threads,
                   double min_seconds) {
  drop_pages(files);
  const uint64_t n = cache.size(), sb = cache.shape().bytes();
  std::atomic<uint64_t> reads{0};
  // A read that fails (a shard shrank under the bench) must not escape its std::thread, which
  // would call std::terminate (exit 134): the first error stops every thread and is rethrown
  // here, on the caller's thread, where main reports it with its exit code.
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::exception_ptr error;
  auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        Rng rng(2024, static_cast<uint64_t>(t));
        std::vector<uint8_t> buf(sb);
        uint64_t mine = 0;
        while (seconds_since(t0) < min_seconds && !failed.load(std::memory_order_relaxed)) {
          if (cache.encoded()) {
            cache.stored_sample(rng.below(n), &buf);  // the stored bytes, not a decode
          } else {
            cache.copy_sample(rng.below(n), buf.data());
          }
          ++mine;
        }
        reads += mine;
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    });
  }
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  const double rate = reads / seconds_since(t0);
  drop_pages(files);
  return rate;
}

// The Loader options every row starts from: --batch, 4 batches prefetched.
LoaderOptions base_loader_options(const BenchSettings& s) {
  LoaderOptions lo;
  lo.batch_size = s.batch;
  lo.prefetch = 4;
  // The in-memory rows measure the page cache path (warmed); --direct-read is the
  // out-of-core row's.
  lo.direct_read = DirectRead::kOff;
  return lo;
}

}  // namespace

void warm_page_cache(const Cache& cache) {
  std::vector<uint8_t> tmp(cache.manifest().sample_bytes());
  for (uint64_t i = 0; i < cache.size(); ++i) {
    if (cache.encoded()) {
      cache.stored_sample(i, &tmp);
    } else {
      cache.copy_sample(i, tmp.data());
    }
  }
}

std::vector<BenchRow> memcpy_rows(const Cache& cache, const BenchSettings& s) {
  std::vector<BenchRow> rows;
  if (!s.want("memcpy") || cache.encoded()) return rows;  // a JPEG cache has no pixels to copy
  const uint64_t n = cache.size(), sb = cache.manifest().sample_bytes();
  // The same bytes copied with the Loader's threads into a destination as large as the Loader's
  // buffer ring ((prefetch + 1) batches): the Loader has to write its batches somewhere, so a
  // destination small enough to stay in the CPU caches would not be the same work.
  const uint32_t ring_batches = 5;  // LoaderOptions::prefetch (4) + 1, as loader_rows uses
  // Two orders: storage order (the sequential ceiling, what the goal is stated against) and
  // the Loader's global-shuffle order for epoch 0 (the same gather the Loader must do, with
  // nothing else: no threads handing batches over, no labels).
  const std::vector<uint64_t> shuffled = epoch_order(n, SamplerOptions{}, 1, 0);
  for (bool random_order : {false, true})
    for (int t : {1, s.all_threads}) {
      if (t == 1 && s.all_threads == 1 && !rows.empty()) break;
      std::atomic<uint64_t> copied{0};
      auto t0 = Clock::now();
      tbb::task_arena arena(t);
      do {
        arena.execute([&] {
          tbb::parallel_for(
              tbb::blocked_range<uint64_t>(0, n, std::max<uint64_t>(1, n / t)),
              [&](const tbb::blocked_range<uint64_t>& r) {
                thread_local std::vector<uint8_t> buf;
                buf.resize(size_t{ring_batches} * s.batch * sb / static_cast<size_t>(t));
                const uint64_t slots = std::max<uint64_t>(1, buf.size() / sb);
                uint64_t k = 0;
                for (uint64_t i = r.begin(); i != r.end(); ++i) {
                  const uint64_t src = random_order ? shuffled[i] : i;
                  // copy_sample, not memcpy from view(): its copy is guarded, so a shard
                  // truncated under the bench is Corruption (exit 5), not SIGBUS.
                  cache.copy_sample(src, buf.data() + (k++ % slots) * sb);
                }
                copied += r.size();
              });
        });
      } while (seconds_since(t0) < s.seconds);
      double secs = seconds_since(t0);
      rows.push_back({random_order ? "memcpy, shuffled order" : "memcpy ceiling", t, copied / secs,
                      copied * double(sb) / secs / 1e9});
    }
  return rows;
}

LoaderRows loader_rows(const std::shared_ptr<const Cache>& serving, const BenchSettings& s) {
  LoaderRows out;
  const uint64_t sb = serving->manifest().sample_bytes();
  LoaderOptions lo = base_loader_options(s);
  out.buffers_mib = double(lo.prefetch + 1) * s.batch * sb / (1 << 20);
  out.before = read_rss();
  for (Shuffle sh : {Shuffle::kGlobal, Shuffle::kWindowed}) {
    if (!s.want(sh == Shuffle::kGlobal ? "global" : "windowed")) continue;
    for (int t : {1, s.all_threads}) {
      lo.sampler.shuffle = sh;
      lo.sampler.block = 0;  // windowed: 4 MiB blocks, the window from available memory
      lo.workers = static_cast<uint32_t>(t);
      Loader loader(serving, lo);
      double sps = run_epochs(loader, s.seconds, nullptr);
      std::string name =
          sh == Shuffle::kGlobal ? "loader, global shuffle" : "loader, windowed shuffle";
      out.rows.push_back({name, t, sps, sps * sb / 1e9});
      if (sh == Shuffle::kGlobal && t == s.all_threads) {
        out.global_sps = sps;
        out.global_gbps = sps * sb / 1e9;
      }
    }
  }
  out.after = read_rss();
  return out;
}

namespace {

// The seed's per-sample decode: read + decode + resize of the source every time, `k` samples
// with all threads; returns samples/s. Throws NotFound when some do not decode.
double time_decode(const DecodeFn& decode_into, uint64_t k, uint64_t sb, const BenchSettings& s,
                   const std::string& root) {
  std::atomic<uint64_t> failed{0};
  auto t0 = Clock::now();
  tbb::task_arena arena(s.all_threads);
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, k, 16),
                      [&](const tbb::blocked_range<uint64_t>& r) {
                        std::vector<uint8_t> out(sb);
                        std::string reason;
                        for (uint64_t i = r.begin(); i != r.end(); ++i) {
                          if (!decode_into(i, out.data(), &reason)) ++failed;
                        }
                      });
  });
  const double sps = k / seconds_since(t0);
  if (failed > 0) {
    throw Error(ErrorKind::kNotFound, root,
                std::to_string(failed.load()) + " of " + std::to_string(k) +
                    " sources could not be decoded (moved? pass --source DIR)");
  }
  return sps;
}

// The lazy cache over the first `k` samples, filled by `decode_into`: the first pass decodes,
// the second reads. Sets out->lazy_first and out->lazy_second.
void time_lazy(const Cache& cache, const BenchSettings& s, const DecodeSettings& d, uint64_t k,
               const DecodeFn& decode_into, DecodeRows* out) {
  const Manifest& m = cache.manifest();
  std::string path = d.lazy_file;
  bool temp = path.empty();
  if (temp) {
    path = (std::filesystem::temp_directory_path() /
            ("dscache-bench-lazy-" + std::to_string(::getpid()) + ".bin"))
               .string();
  }
  std::filesystem::remove(path);
  std::vector<int64_t> labels(k);
  for (uint64_t i = 0; i < k; ++i) labels[i] = cache.label(i);
  LazyCacheOptions lzo;
  lzo.source_digest = m.source.digest;
  auto lazy = LazyCache::open(path, k, SampleShape{m.height, m.width, m.channels}, labels,
                              decode_into, lzo);
  LoaderOptions llo = base_loader_options(s);
  llo.sampler.shuffle = Shuffle::kGlobal;
  llo.workers = static_cast<uint32_t>(s.all_threads);
  {
    Loader loader(lazy, llo);
    auto t1 = Clock::now();
    uint64_t got = 0;
    loader.start_epoch(7, 0);
    while (const Batch* b = loader.next()) got += b->size;
    out->lazy_first = got / seconds_since(t1);
    out->lazy_second = run_epochs(loader, s.seconds, nullptr);
  }
  lazy.reset();
  if (temp) std::filesystem::remove(path);
}

}  // namespace

DecodeRows decode_rows(const Cache& cache, const BenchSettings& s, const DecodeSettings& d) {
  DecodeRows out;
  const Manifest& m = cache.manifest();
  std::vector<std::string> names;
  const std::string root = d.source.empty() ? m.source.root : absolute_path(d.source);
  try {
    CacheView view(s.dir);
    names = view.sources();
  } catch (const Error& e) {
    out.note = e.what();
  }
  if (!s.want("decode") || names.empty()) return out;
  out.ran = true;
  const uint64_t sb = m.sample_bytes();
  const uint64_t k = std::min<uint64_t>(d.decode_samples, cache.size());
  // Only the records these k samples need: bench times decoding, not reading a whole idx.
  SourceDecoder dec(m, names, root, k);
  auto decode_into = [&dec, sb](uint64_t i, uint8_t* pixels_out, std::string* reason) {
    thread_local std::vector<uint8_t> pixels;
    if (!dec.decode(i, &pixels, reason)) return false;
    std::memcpy(pixels_out, pixels.data(), sb);
    return true;
  };
  out.decode_sps = time_decode(decode_into, k, sb, s, root);
  out.rows.push_back(
      {"per-sample decode (seed)", s.all_threads, out.decode_sps, out.decode_sps * sb / 1e9});
  time_lazy(cache, s, d, k, decode_into, &out);
  out.rows.push_back(
      {"lazy cache, first pass", s.all_threads, out.lazy_first, out.lazy_first * sb / 1e9});
  out.rows.push_back(
      {"lazy cache, second pass", s.all_threads, out.lazy_second, out.lazy_second * sb / 1e9});
  return out;
}

DiskRows disk_rows(const BenchSettings& s, const std::vector<std::string>& files, double disk_sb) {
  DiskRows out;
  out.ooc_workers = static_cast<uint32_t>(s.all_threads);
  if (!s.want("disk") && !s.want("out-of-core")) return out;
  CacheOptions pread_options;
  pread_options.memory = MemoryMode::kPread;
  auto cold = Cache::open(s.dir, pread_options);
  if (s.want("disk")) {
    out.seq_bps = disk_sequential(files, s.seconds, &out.seq_method);
    out.rows.push_back({"disk sequential (cold)", 1, out.seq_bps / disk_sb, out.seq_bps / 1e9});
    out.rnd_sps = disk_random(*cold, files, s.all_threads, s.seconds);
    out.rows.push_back({"disk random sample reads (cold)", s.all_threads, out.rnd_sps,
                        out.rnd_sps * disk_sb / 1e9});
  }
  if (s.want("out-of-core")) {
    LoaderOptions oo = base_loader_options(s);
    oo.sampler.shuffle = Shuffle::kWindowed;  // block 0: sized in bytes
    oo.workers = out.ooc_workers;
    oo.direct_read = s.direct_read;
    oo.direct_depth = s.direct_depth;
    oo.direct_request_kib = s.direct_request_kib;
    Loader loader(cold, oo);
    out.ooc_sampler = loader.sampler_options();
    drop_pages(files);
    out.ooc_sps = run_for(loader, s.seconds);
    out.ooc_direct = loader.reads_direct();
    out.ooc_direct_reason = loader.direct_read_reason();
    out.ooc_rss = read_rss();
    out.rows.push_back(
        {"windowed, pread, out of core", s.all_threads, out.ooc_sps, out.ooc_sps * disk_sb / 1e9});
  }
  drop_pages(files);
  return out;
}

}  // namespace dscache
