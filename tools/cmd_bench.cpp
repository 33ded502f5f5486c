// `dscache bench CACHE [--source DIR] [--json]`: measures serving speed in one run.
#include <boost/program_options.hpp>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <opencv2/core.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cache_view.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/file.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/ingest/source_list.h"
#include "dscache/lazy_cache.h"
#include "dscache/loader.h"
#include "dscache/sampler.h"

namespace dscache {
namespace po = boost::program_options;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Resident memory of this process from /proc/self/status, in MiB.
struct Rss {
  double anon_mib = 0;
  double file_mib = 0;
};

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

struct Row {
  std::string name;
  int threads = 0;
  double samples_per_s = 0;
  double gbps = 0;
};

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

// The row groups --rows selects.
const char* const kRowGroups[] = {"memcpy", "global", "windowed", "decode", "disk", "out-of-core"};

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

}  // namespace

int cmd_bench(int argc, char** argv) {
  po::options_description desc(
      "Usage: dscache bench CACHE [options]\n\n"
      "Measure, in one run: the memcpy ceiling for the cache's bytes, the Loader (global and\n"
      "windowed shuffle, 1 and all threads), the per-sample decode of the sources, and the lazy\n"
      "cache's first and second pass, the disk's cold sequential and random sample-sized reads,\n"
      "and the windowed shuffle served out of core (pread, read-ahead, page cache dropped).\n\n"
      "Options");
  std::string dir, source, lazy_file, memory = "auto", rows_arg = "all";
  int threads = 0;
  uint32_t batch = 256;
  double seconds = 2.0;
  uint64_t decode_samples = 3000;
  desc.add_options()("help,h", "show this help")(
      "source", po::value(&source), "source root (default: the one recorded in the manifest)")(
      "threads", po::value(&threads)->default_value(0), "threads for 'all' rows (0 = all cores)")(
      "batch", po::value(&batch)->default_value(256), "Loader batch size")(
      "seconds", po::value(&seconds)->default_value(2.0), "minimum time per Loader row")(
      "decode-samples", po::value(&decode_samples)->default_value(3000),
      "samples decoded for the per-sample decode row (and the lazy cache's passes)")(
      "lazy-file", po::value(&lazy_file), "lazy cache file (default: a temp file, removed)")(
      "memory", po::value(&memory)->default_value("auto"),
      "how the Loader rows read the cache: auto (mapped when it fits in available memory, "
      "else pread), page-cache or pread")(
      "rows", po::value(&rows_arg)->default_value("all"),
      "comma-separated row groups: memcpy, global, windowed, decode (and lazy), disk, "
      "out-of-core; 'all' = every one. Without memcpy the page cache is not warmed first")(
      "json", "machine-readable output");
  po::variables_map vm;
  std::set<std::string> groups;
  try {
    if (!parse_cache_args(argc, argv, desc, "bench", &dir, &vm)) return to_int(ExitCode::kOk);
    if (batch == 0) throw UsageError("--batch must be >= 1");
    if (threads < 0) throw UsageError("--threads must be >= 0");
    if (seconds <= 0) throw UsageError("--seconds must be positive");
    if (decode_samples == 0) throw UsageError("--decode-samples must be >= 1");
    if (memory != "auto" && memory != "page-cache" && memory != "pread") {
      throw UsageError("--memory '" + memory + "': expected auto, page-cache or pread");
    }
    if (rows_arg != "all") {
      std::stringstream list(rows_arg);
      for (std::string g; std::getline(list, g, ',');) {
        if (std::find(std::begin(kRowGroups), std::end(kRowGroups), g) == std::end(kRowGroups)) {
          throw UsageError("--rows '" + g +
                           "': expected memcpy, global, windowed, decode, disk or out-of-core");
        }
        groups.insert(g);
      }
      if (groups.empty()) throw UsageError("--rows is empty");
    } else {
      groups.insert(std::begin(kRowGroups), std::end(kRowGroups));
    }
  } catch (const std::exception& e) {
    return report_failure("dscache bench", e);
  }
  const bool as_json = vm.count("json") > 0;
  const int all_threads =
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cv::setNumThreads(0);

  try {
    Rss rss_start = read_rss();
    // The memcpy rows copy from mappings; the Loader rows read as --memory says.
    CacheOptions mapped_options;
    mapped_options.memory = MemoryMode::kPageCache;
    auto cache = Cache::open(dir, mapped_options);
    const Manifest m = cache->manifest();  // a copy: the mapping is closed before the disk rows
    if (m.layout != Layout::kFixed) {
      throw Error(ErrorKind::kUnsupported, dir, "bench measures fixed-layout caches");
    }
    if (m.count == 0) {  // a valid cache (FORMAT.md), but there is nothing to time
      std::fprintf(stderr, "dscache bench: %s holds no samples to measure\n", dir.c_str());
      if (as_json) {
        std::printf("%s\n",
                    json{{"cache", dir}, {"samples", 0}, {"rows", json::array()}}.dump(2).c_str());
      }
      return to_int(ExitCode::kOk);
    }
    CacheOptions serve_options;
    serve_options.memory = memory == "pread"        ? MemoryMode::kPread
                           : memory == "page-cache" ? MemoryMode::kPageCache
                                                    : MemoryMode::kAuto;
    const uint64_t available = available_memory_bytes();
    auto serving = Cache::open(dir, serve_options);
    const std::string mode_name = to_string(serving->memory_mode());
    const uint64_t n = cache->size();
    const uint64_t sb = m.sample_bytes();
    const double total_gb = double(n) * sb / 1e9;
    // JPEG caches: samples are decoded to sb bytes but stored in fewer; the disk rows count
    // stored bytes (what the disk delivers), the other rows decoded bytes (what the batch holds).
    const bool encoded = cache->encoded();
    const double disk_sb = n == 0 ? 0.0 : double(cache->stored_bytes()) / n;
    std::vector<Row> rows;

    auto want = [&groups](const char* g) { return groups.count(g) > 0; };
    std::vector<std::string> files;
    for (const ShardEntry& e : m.shards) {
      if (e.count > 0) files.push_back(dir + "/" + e.file);
    }
    // Warm the page cache so every row reads from memory, as a second epoch would.
    if (want("memcpy")) {
      std::vector<uint8_t> tmp(sb);
      for (uint64_t i = 0; i < n; ++i) {
        if (encoded) {
          cache->stored_sample(i, &tmp);
        } else {
          cache->copy_sample(i, tmp.data());
        }
      }
    }

    // memcpy ceiling: the same bytes copied in storage order, with the Loader's threads, into a
    // destination as large as the Loader's buffer ring ((prefetch + 1) batches): the Loader has
    // to write its batches somewhere, so a destination small enough to stay in the CPU caches
    // would not be the same work.
    const uint32_t ring_batches = 5;  // LoaderOptions::prefetch (4) + 1, as used below
    // Two orders: storage order (the sequential ceiling, what the goal is stated against) and
    // the Loader's global-shuffle order for epoch 0 (the same gather the Loader must do, with
    // nothing else: no threads handing batches over, no labels).
    std::vector<uint64_t> shuffled = epoch_order(n, SamplerOptions{}, 1, 0);
    for (bool random_order : {false, true})
      for (int t : {1, all_threads}) {
        if (!want("memcpy") || encoded) break;  // a JPEG cache has no pixels to copy
        if (t == 1 && all_threads == 1 && !rows.empty()) break;
        std::atomic<uint64_t> copied{0};
        auto t0 = Clock::now();
        tbb::task_arena arena(t);
        do {
          arena.execute([&] {
            tbb::parallel_for(
                tbb::blocked_range<uint64_t>(0, n, std::max<uint64_t>(1, n / t)),
                [&](const tbb::blocked_range<uint64_t>& r) {
                  thread_local std::vector<uint8_t> buf;
                  buf.resize(size_t{ring_batches} * batch * sb / static_cast<size_t>(t));
                  const uint64_t slots = std::max<uint64_t>(1, buf.size() / sb);
                  uint64_t k = 0;
                  for (uint64_t i = r.begin(); i != r.end(); ++i) {
                    const uint64_t src = random_order ? shuffled[i] : i;
                    // copy_sample, not memcpy from view(): its copy is guarded, so a shard
                    // truncated under the bench is Corruption (exit 5), not SIGBUS.
                    cache->copy_sample(src, buf.data() + (k++ % slots) * sb);
                  }
                  copied += r.size();
                });
          });
        } while (seconds_since(t0) < seconds);
        double s = seconds_since(t0);
        rows.push_back({random_order ? "memcpy, shuffled order" : "memcpy ceiling", t, copied / s,
                        copied * double(sb) / s / 1e9});
      }

    // The Loader: global and windowed shuffle at 1 worker and all.
    LoaderOptions lo;
    lo.batch_size = batch;
    lo.prefetch = 4;
    const double buffers_mib = double(lo.prefetch + 1) * batch * sb / (1 << 20);
    Rss rss_before = read_rss();
    double loader_sps = 0, loader_gbps = 0;
    for (Shuffle sh : {Shuffle::kGlobal, Shuffle::kWindowed}) {
      if (!want(sh == Shuffle::kGlobal ? "global" : "windowed")) continue;
      for (int t : {1, all_threads}) {
        lo.sampler.shuffle = sh;
        lo.sampler.block = 0;  // windowed: 4 MiB blocks, the window from available memory
        lo.workers = static_cast<uint32_t>(t);
        Loader loader(serving, lo);
        double sps = run_epochs(loader, seconds, nullptr);
        std::string name =
            sh == Shuffle::kGlobal ? "loader, global shuffle" : "loader, windowed shuffle";
        rows.push_back({name, t, sps, sps * sb / 1e9});
        if (sh == Shuffle::kGlobal && t == all_threads) {
          loader_sps = sps;
          loader_gbps = sps * sb / 1e9;
        }
      }
    }
    Rss rss_after = read_rss();

    // The seed's per-sample decode: read + decode + resize of the source every time.
    double decode_sps = 0, lazy_first = 0, lazy_second = 0;
    std::string decode_note;
    std::vector<std::string> names;
    std::string root = source.empty() ? m.source.root : absolute_path(source);
    try {
      CacheView view(dir);
      names = view.sources();
    } catch (const Error& e) {
      decode_note = e.what();
    }
    if (!want("decode")) names.clear();
    if (!names.empty()) {
      const uint64_t k = std::min<uint64_t>(decode_samples, n);
      // Only the records these k samples need: bench times decoding, not reading a whole idx.
      SourceDecoder dec(m, names, root, k);
      auto decode_into = [&dec, sb](uint64_t i, uint8_t* out, std::string* reason) {
        thread_local std::vector<uint8_t> pixels;
        if (!dec.decode(i, &pixels, reason)) return false;
        std::memcpy(out, pixels.data(), sb);
        return true;
      };
      std::atomic<uint64_t> failed{0};
      std::string first_reason;
      auto t0 = Clock::now();
      tbb::task_arena arena(all_threads);
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
      decode_sps = k / seconds_since(t0);
      if (failed > 0) {
        throw Error(ErrorKind::kNotFound, root,
                    std::to_string(failed.load()) + " of " + std::to_string(k) +
                        " sources could not be decoded (moved? pass --source DIR)");
      }
      rows.push_back({"per-sample decode (seed)", all_threads, decode_sps, decode_sps * sb / 1e9});

      // The lazy cache over the same samples: first pass decodes, second pass reads.
      std::string path = lazy_file;
      bool temp = path.empty();
      if (temp) {
        path = (std::filesystem::temp_directory_path() /
                ("dscache-bench-lazy-" + std::to_string(::getpid()) + ".bin"))
                   .string();
      }
      std::filesystem::remove(path);
      std::vector<int64_t> labels(k);
      for (uint64_t i = 0; i < k; ++i) labels[i] = cache->label(i);
      LazyCacheOptions lzo;
      lzo.source_digest = m.source.digest;
      auto lazy = LazyCache::open(path, k, SampleShape{m.height, m.width, m.channels}, labels,
                                  decode_into, lzo);
      LoaderOptions llo = lo;
      llo.sampler.shuffle = Shuffle::kGlobal;
      llo.workers = static_cast<uint32_t>(all_threads);
      {
        Loader loader(lazy, llo);
        auto t1 = Clock::now();
        uint64_t got = 0;
        loader.start_epoch(7, 0);
        while (const Batch* b = loader.next()) got += b->size;
        lazy_first = got / seconds_since(t1);
        lazy_second = run_epochs(loader, seconds, nullptr);
      }
      rows.push_back({"lazy cache, first pass", all_threads, lazy_first, lazy_first * sb / 1e9});
      rows.push_back({"lazy cache, second pass", all_threads, lazy_second, lazy_second * sb / 1e9});
      lazy.reset();
      if (temp) std::filesystem::remove(path);
    }

    // Out of core: the disk itself, then the windowed shuffle read with pread from a cold page
    // cache. Mapped pages cannot be dropped, so the mappings go first.
    cache.reset();
    serving.reset();
    double seq_bps = 0, rnd_sps = 0, ooc_sps = 0;
    std::string seq_method;
    Rss rss_ooc;
    SamplerOptions ooc_sampler;
    const uint32_t ooc_workers = static_cast<uint32_t>(all_threads);
    if (want("disk") || want("out-of-core")) {
      CacheOptions pread_options;
      pread_options.memory = MemoryMode::kPread;
      auto cold = Cache::open(dir, pread_options);
      if (want("disk")) {
        seq_bps = disk_sequential(files, seconds, &seq_method);
        rows.push_back({"disk sequential (cold)", 1, seq_bps / disk_sb, seq_bps / 1e9});
        rnd_sps = disk_random(*cold, files, all_threads, seconds);
        rows.push_back(
            {"disk random sample reads (cold)", all_threads, rnd_sps, rnd_sps * disk_sb / 1e9});
      }
      if (want("out-of-core")) {
        LoaderOptions oo = lo;
        oo.sampler = SamplerOptions{};
        oo.sampler.shuffle = Shuffle::kWindowed;  // block 0: sized in bytes
        oo.workers = ooc_workers;
        Loader loader(cold, oo);
        ooc_sampler = loader.sampler_options();
        drop_pages(files);
        ooc_sps = run_for(loader, seconds);
        rss_ooc = read_rss();
        rows.push_back(
            {"windowed, pread, out of core", all_threads, ooc_sps, ooc_sps * disk_sb / 1e9});
      }
      drop_pages(files);
    }

    double memcpy_gbps = 0, shuffled_gbps = 0;
    for (const Row& r : rows) {
      if (r.threads != all_threads) continue;
      if (r.name == "memcpy ceiling") memcpy_gbps = r.gbps;
      if (r.name == "memcpy, shuffled order") shuffled_gbps = r.gbps;
    }
    if (as_json) {
      json jr = json::array();
      for (const Row& r : rows) {
        jr.push_back({{"name", r.name},
                      {"threads", r.threads},
                      {"samples_per_s", r.samples_per_s},
                      {"gbps", r.gbps}});
      }
      json out{
          {"cache", dir},
          {"samples", n},
          {"sample_bytes", sb},
          {"codec", to_string(m.codec)},
          {"stored_bytes_per_sample", disk_sb},
          {"cache_gb", total_gb},
          {"threads", all_threads},
          {"batch", batch},
          {"memory_mode", mode_name},
          {"memory_requested", memory},
          {"available_memory_bytes", available},
          {"memcpy_gbps", memcpy_gbps},
          {"memcpy_shuffled_gbps", shuffled_gbps},
          {"loader_gbps", loader_gbps},
          {"loader_samples_per_s", loader_sps},
          {"decode_samples_per_s", names.empty() ? json(nullptr) : json(decode_sps)},
          {"lazy_first_samples_per_s", names.empty() ? json(nullptr) : json(lazy_first)},
          {"lazy_second_samples_per_s", names.empty() ? json(nullptr) : json(lazy_second)},
          {"rows_requested", rows_arg},
          {"disk_sequential_bytes_per_s", want("disk") ? json(seq_bps) : json(nullptr)},
          {"disk_sequential_method", want("disk") ? json(seq_method) : json(nullptr)},
          {"disk_random_samples_per_s", want("disk") ? json(rnd_sps) : json(nullptr)},
          {"disk_random_bytes_per_s", want("disk") ? json(rnd_sps * disk_sb) : json(nullptr)},
          {"windowed_out_of_core_samples_per_s",
           want("out-of-core") ? json(ooc_sps) : json(nullptr)},
          {"windowed_out_of_core_bytes_per_s",
           want("out-of-core") ? json(ooc_sps * disk_sb) : json(nullptr)},
          {"windowed_out_of_core",
           want("out-of-core") ? json{{"memory_mode", "pread"},
                                      {"workers", ooc_workers},
                                      {"block_samples", ooc_sampler.block},
                                      {"window_blocks", ooc_sampler.window_blocks},
                                      {"window_bytes", ooc_sampler.window_bytes},
                                      {"vs_disk_sequential", want("disk") && seq_bps > 0
                                                                 ? json(ooc_sps * disk_sb / seq_bps)
                                                                 : json(nullptr)}}
                               : json(nullptr)},
          {"rows", jr},
          {"rss",
           {{"anon_start_mib", rss_start.anon_mib},
            {"anon_before_mib", rss_before.anon_mib},
            {"anon_after_mib", rss_after.anon_mib},
            {"file_after_mib", rss_after.file_mib},
            {"anon_out_of_core_mib", rss_ooc.anon_mib},
            {"buffers_mib", buffers_mib}}}};
      if (!decode_note.empty()) out["note"] = decode_note;
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("cache %s: %llu samples of %llu bytes (%.3f GB), batch %u, %d threads\n",
                  dir.c_str(), static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(sb), total_gb, batch, all_threads);
      std::printf("loader reads: %s (--memory %s; %.3f GB of samples, %.3f GB available)\n",
                  mode_name.c_str(), memory.c_str(), total_gb, double(available) / 1e9);
      if (encoded) {
        std::printf(
            "codec jpeg: %.0f stored bytes per sample, decoded by the Loader rows; no memcpy "
            "rows (no pixels to copy); the disk rows count stored bytes\n",
            disk_sb);
      }
      std::printf("%-32s %7s %14s %9s %10s\n", "", "threads", "samples/s", "GB/s", "vs memcpy");
      for (const Row& r : rows) {
        std::printf("%-32s %7d %14.0f %9.3f %9.2fx\n", r.name.c_str(), r.threads, r.samples_per_s,
                    r.gbps, memcpy_gbps > 0 ? r.gbps / memcpy_gbps : 0.0);
      }
      std::printf(
          "RSS anon: %.1f MiB before the loaders, %.1f MiB after (buffers %.1f MiB); "
          "RSS file (mapped cache pages): %.1f MiB\n",
          rss_before.anon_mib, rss_after.anon_mib, buffers_mib, rss_after.file_mib);
      if (want("disk")) {
        std::printf(
            "disk (cold, page cache dropped): sequential %.3f GB/s (%s), random "
            "%.0f-byte reads %.0f/s (%.3f GB/s)\n",
            seq_bps / 1e9, seq_method.c_str(), disk_sb, rnd_sps, rnd_sps * disk_sb / 1e9);
      }
      if (want("out-of-core")) {
        std::printf(
            "windowed out of core: pread, %u workers, blocks of %llu samples, windows of "
            "%llu blocks (%.1f MiB): %.0f samples/s, %.3f GB/s",
            ooc_workers, static_cast<unsigned long long>(ooc_sampler.block),
            static_cast<unsigned long long>(ooc_sampler.window_blocks),
            ooc_sampler.window_bytes / double(1 << 20), ooc_sps, ooc_sps * disk_sb / 1e9);
        if (want("disk") && seq_bps > 0) {
          std::printf(" = %.2fx the disk's sequential rate", ooc_sps * disk_sb / seq_bps);
        }
        std::printf("; RSS anon %.1f MiB\n", rss_ooc.anon_mib);
      }
      if (!decode_note.empty()) std::printf("note: %s\n", decode_note.c_str());
    }
    return to_int(ExitCode::kOk);
  } catch (const std::exception& e) {
    return report_failure("dscache bench", e);
  }
}

}  // namespace dscache
