// `dscache bench CACHE [--source DIR] [--json]`: measures serving speed in one run.
#include <boost/program_options.hpp>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <opencv2/core.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cache_view.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/cache.h"
#include "dscache/error.h"
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

}  // namespace

int cmd_bench(int argc, char** argv) {
  po::options_description desc(
      "Usage: dscache bench CACHE [options]\n\n"
      "Measure, in one run: the memcpy ceiling for the cache's bytes, the Loader (global and\n"
      "windowed shuffle, 1 and all threads), the per-sample decode of the sources, and the lazy\n"
      "cache's first and second pass.\n\nOptions");
  std::string dir, source, lazy_file, memory = "auto";
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
      "else pread), page-cache or pread")("json", "machine-readable output");
  po::variables_map vm;
  try {
    if (!parse_cache_args(argc, argv, desc, "bench", &dir, &vm)) return kExitOk;
    if (batch == 0) throw UsageError("--batch must be >= 1");
    if (threads < 0) throw UsageError("--threads must be >= 0");
    if (seconds <= 0) throw UsageError("--seconds must be positive");
    if (decode_samples == 0) throw UsageError("--decode-samples must be >= 1");
    if (memory != "auto" && memory != "page-cache" && memory != "pread") {
      throw UsageError("--memory '" + memory + "': expected auto, page-cache or pread");
    }
  } catch (const po::error& e) {
    std::fprintf(stderr, "dscache bench: %s\n", e.what());
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache bench: %s\n", e.what());
    return kExitUsage;
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
    const Manifest& m = cache->manifest();
    if (m.layout != Layout::kFixed) {
      throw Error(ErrorKind::kUnsupported, dir, "bench measures fixed-layout caches");
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
    std::vector<Row> rows;

    // Warm the page cache so every row reads from memory, as a second epoch would.
    {
      std::vector<uint8_t> tmp(sb);
      for (uint64_t i = 0; i < n; ++i) cache->copy_sample(i, tmp.data());
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
                    std::memcpy(buf.data() + (k++ % slots) * sb, cache->view(src).data, sb);
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
      for (int t : {1, all_threads}) {
        lo.sampler.shuffle = sh;
        lo.sampler.block = cache->locality_block();
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
    if (!names.empty()) {
      SourceDecoder dec(m, names, root);
      auto decode_into = [&dec, sb](uint64_t i, uint8_t* out, std::string* reason) {
        thread_local std::vector<uint8_t> pixels;
        if (!dec.decode(i, &pixels, reason)) return false;
        std::memcpy(out, pixels.data(), sb);
        return true;
      };
      const uint64_t k = std::min<uint64_t>(decode_samples, n);
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
      json out{{"cache", dir},
               {"samples", n},
               {"sample_bytes", sb},
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
               {"rows", jr},
               {"rss",
                {{"anon_start_mib", rss_start.anon_mib},
                 {"anon_before_mib", rss_before.anon_mib},
                 {"anon_after_mib", rss_after.anon_mib},
                 {"file_after_mib", rss_after.file_mib},
                 {"buffers_mib", buffers_mib}}}};
      if (!decode_note.empty()) out["note"] = decode_note;
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("cache %s: %llu samples of %llu bytes (%.3f GB), batch %u, %d threads\n",
                  dir.c_str(), static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(sb), total_gb, batch, all_threads);
      std::printf("loader reads: %s (--memory %s; %.3f GB of samples, %.3f GB available)\n",
                  mode_name.c_str(), memory.c_str(), total_gb, double(available) / 1e9);
      std::printf("%-28s %7s %14s %9s %10s\n", "", "threads", "samples/s", "GB/s", "vs memcpy");
      for (const Row& r : rows) {
        std::printf("%-28s %7d %14.0f %9.3f %9.2fx\n", r.name.c_str(), r.threads, r.samples_per_s,
                    r.gbps, memcpy_gbps > 0 ? r.gbps / memcpy_gbps : 0.0);
      }
      std::printf(
          "RSS anon: %.1f MiB before the loaders, %.1f MiB after (buffers %.1f MiB); "
          "RSS file (mapped cache pages): %.1f MiB\n",
          rss_before.anon_mib, rss_after.anon_mib, buffers_mib, rss_after.file_mib);
      if (!decode_note.empty()) std::printf("note: %s\n", decode_note.c_str());
    }
    return kExitOk;
  } catch (const Error& e) {
    std::fprintf(stderr, "dscache bench: %s\n", e.what());
    return e.kind() == ErrorKind::kCorruption ? kExitCorrupt : kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dscache bench: %s\n", e.what());
    return kExitError;
  }
}

}  // namespace dscache
