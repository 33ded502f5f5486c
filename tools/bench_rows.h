// The row groups of `dscache bench`: each times one way of serving a cache and returns its rows
// plus the figures the report quotes (bench_report.h prints them).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/direct_read.h"
#include "dscache/sampler.h"

namespace dscache {

// One line of the table: a way of serving, at a thread count.
struct BenchRow {
  std::string name;          // what was timed, e.g. "loader, global shuffle"
  int threads = 0;           // threads (or Loader workers) it ran with
  double samples_per_s = 0;  // samples delivered per second
  double gbps = 0;           // the same in 1e9 bytes per second
};

// Resident memory of this process from /proc/self/status, in MiB.
struct Rss {
  double anon_mib = 0;  // RssAnon: heap, buffers
  double file_mib = 0;  // RssFile: mapped file pages (the cache's, when mapped)
};
Rss read_rss();

// The row groups --rows selects, in the order they run.
extern const char* const kBenchRowGroups[7];

// What every row group reads. Plain values; the groups only read it.
struct BenchSettings {
  std::string dir;                             // the cache directory
  uint32_t batch = 256;                        // Loader batch size (>= 1)
  double seconds = 2.0;                        // minimum time per timed row (> 0)
  int all_threads = 1;                         // threads of the 'all' rows (>= 1)
  std::set<std::string> groups;                // the kBenchRowGroups to run
  DirectRead direct_read = DirectRead::kAuto;  // out-of-core row: LoaderOptions::direct_read
  uint32_t direct_depth = 4;                   // and its direct_depth
  uint32_t direct_request_kib = 512;           // and direct_request_kib
  bool want(const char* group) const { return groups.count(group) > 0; }
};

// Reads every sample once so that the rows after it read from memory, as a second epoch would.
void warm_page_cache(const Cache& cache);

// "memcpy ceiling" and "memcpy, shuffled order" at 1 and all threads, from `cache`'s mappings
// (open it with MemoryMode::kPageCache). Empty for a JPEG cache (no pixels to copy) or without
// the memcpy group.
std::vector<BenchRow> memcpy_rows(const Cache& cache, const BenchSettings& s);

// The Loader's global and windowed shuffle at 1 worker and all.
struct LoaderRows {
  std::vector<BenchRow> rows;
  double global_sps = 0;   // global shuffle, all threads: samples/s (0 when not run)
  double global_gbps = 0;  // the same in GB/s
  Rss before;              // RSS before the first Loader
  Rss after;               // and after the last
  double buffers_mib = 0;  // one Loader's batch buffers ((prefetch + 1) batches)
};
LoaderRows loader_rows(const std::shared_ptr<const Cache>& serving, const BenchSettings& s);

// The per-sample decode of the sources and the lazy cache's first and second pass over the same
// samples. Throws NotFound when some sources do not decode (moved: --source).
struct DecodeRows {
  std::vector<BenchRow> rows;
  bool ran = false;        // false without the decode group or without a list of sources
  double decode_sps = 0;   // per-sample decode, samples/s
  double lazy_first = 0;   // lazy cache, first pass (decodes), samples/s
  double lazy_second = 0;  // lazy cache, second pass (reads), samples/s
  std::string note;        // why there are no decode rows (the sources list is unreadable)
};
struct DecodeSettings {
  std::string source;           // source root; empty = the manifest's
  std::string lazy_file;        // lazy cache file; empty = a temp file, removed after
  uint64_t decode_samples = 0;  // samples decoded (capped at the cache's count; >= 1)
};
DecodeRows decode_rows(const Cache& cache, const BenchSettings& s, const DecodeSettings& d);

// Out of core: the disk's cold sequential and random sample-sized reads, and the windowed
// shuffle read with pread from a cold page cache. Close every mapping of the cache first: the
// kernel keeps mapped pages when the page cache is dropped.
struct DiskRows {
  std::vector<BenchRow> rows;
  double seq_bps = 0;             // sequential read, bytes/s (0 without the disk group)
  std::string seq_method;         // "O_DIRECT" or "buffered, cold"
  double rnd_sps = 0;             // random sample reads, samples/s
  double ooc_sps = 0;             // windowed out of core, samples/s (0 without out-of-core)
  uint32_t ooc_workers = 0;       // its Loader workers
  SamplerOptions ooc_sampler;     // its resolved block and window
  Rss ooc_rss;                    // RSS after it
  bool ooc_direct = false;        // its windows were read with O_DIRECT (Loader::reads_direct)
  std::string ooc_direct_reason;  // why (Loader::direct_read_reason)
};
// `files`: the cache's non-empty shards; `disk_sb`: stored bytes per sample.
DiskRows disk_rows(const BenchSettings& s, const std::vector<std::string>& files, double disk_sb);

}  // namespace dscache
