// The report of `dscache bench`: the rows of every group run, as a table or as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_mixture.h"
#include "bench_rows.h"

namespace dscache {

// Everything one bench measured, and what it was asked for. Filled by cmd_bench.
struct BenchReport {
  std::string dir;                             // the cache
  uint64_t samples = 0;                        // its sample count
  uint64_t sample_bytes = 0;                   // decoded bytes per sample
  std::string codec;                           // "raw" or "jpeg"
  bool encoded = false;                        // codec jpeg: stored bytes differ from decoded ones
  double stored_sb = 0;                        // stored bytes per sample (what the disk rows count)
  double cache_gb = 0;                         // samples * sample_bytes, in 1e9 bytes
  int threads = 1;                             // threads of the 'all' rows
  uint32_t batch = 0;                          // Loader batch size
  DirectRead direct_read = DirectRead::kAuto;  // out-of-core row: --direct-read
  uint32_t direct_depth = 0;                   // and --direct-depth
  uint32_t direct_request_kib = 0;             // and --direct-request-kib
  std::string memory_mode;                     // how the Loader rows read: the resolved mode
  std::string memory_requested;                // and --memory as given
  uint64_t available = 0;                      // available memory, bytes
  std::string rows_requested;                  // --rows as given
  bool want_disk = false;                      // the disk group ran
  bool want_out_of_core = false;               // the out-of-core group ran
  Rss rss_start;                               // RSS before the cache was opened

  std::vector<BenchRow> memcpy;  // the groups' results, in run order
  LoaderRows loader;
  DecodeRows decode;
  MixtureRows mixture;
  DiskRows disk;

  std::vector<BenchRow> rows() const;  // every group's rows, in run order
};

// The table on stdout: a header, one line per row (with its share of the memcpy ceiling), the
// RSS figures, the mixture's ratios and counts, the disk and out-of-core summaries and any note.
void print_bench_text(const BenchReport& r);
// One JSON object on stdout (2-space indent); rows and figures of groups not run are null.
void print_bench_json(const BenchReport& r);

}  // namespace dscache
