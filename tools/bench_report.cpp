// Printing `dscache bench`'s report (bench_report.h): the table, or one JSON object.
#include "bench_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace dscache {
using json = nlohmann::json;

namespace {

// The memcpy rows' rates at all threads, which the others are compared with (0 when not run).
struct MemcpyCeiling {
  double gbps = 0;
  double shuffled_gbps = 0;
};

MemcpyCeiling memcpy_ceiling(const std::vector<BenchRow>& rows, int all_threads) {
  MemcpyCeiling c;
  for (const BenchRow& r : rows) {
    if (r.threads != all_threads) continue;
    if (r.name == "memcpy ceiling") c.gbps = r.gbps;
    if (r.name == "memcpy, shuffled order") c.shuffled_gbps = r.gbps;
  }
  return c;
}

json out_of_core_json(const BenchReport& r) {
  if (!r.want_out_of_core) return nullptr;
  const DiskRows& d = r.disk;
  return {
      {"memory_mode", "pread"},
      {"workers", d.ooc_workers},
      {"block_samples", d.ooc_sampler.block},
      {"window_blocks", d.ooc_sampler.window_blocks},
      {"window_bytes", d.ooc_sampler.window_bytes},
      {"direct_read", d.ooc_direct},
      {"direct_read_requested", kDirectReadNames.to_string(r.direct_read)},
      {"direct_read_reason", d.ooc_direct_reason},
      {"direct_depth", r.direct_depth},
      {"direct_request_kib", r.direct_request_kib},
      {"vs_disk_sequential",
       r.want_disk && d.seq_bps > 0 ? json(d.ooc_sps * r.stored_sb / d.seq_bps) : json(nullptr)}};
}

}  // namespace

std::vector<BenchRow> BenchReport::rows() const {
  std::vector<BenchRow> all = memcpy;
  for (const auto* group : {&loader.rows, &decode.rows, &mixture.rows, &disk.rows}) {
    all.insert(all.end(), group->begin(), group->end());
  }
  return all;
}

void print_bench_json(const BenchReport& r) {
  const std::vector<BenchRow> rows = r.rows();
  const MemcpyCeiling ceiling = memcpy_ceiling(rows, r.threads);
  const DecodeRows& dec = r.decode;
  const DiskRows& disk = r.disk;
  const double sb = r.stored_sb;
  auto or_null = [](bool ran, json value) { return ran ? value : json(nullptr); };
  json jr = json::array();
  for (const BenchRow& row : rows) {
    jr.push_back({{"name", row.name},
                  {"threads", row.threads},
                  {"samples_per_s", row.samples_per_s},
                  {"gbps", row.gbps}});
  }
  json out{{"cache", r.dir},
           {"samples", r.samples},
           {"sample_bytes", r.sample_bytes},
           {"codec", r.codec},
           {"stored_bytes_per_sample", sb},
           {"cache_gb", r.cache_gb},
           {"threads", r.threads},
           {"batch", r.batch},
           {"memory_mode", r.memory_mode},
           {"memory_requested", r.memory_requested},
           {"available_memory_bytes", r.available},
           {"memcpy_gbps", ceiling.gbps},
           {"memcpy_shuffled_gbps", ceiling.shuffled_gbps},
           {"loader_gbps", r.loader.global_gbps},
           {"loader_samples_per_s", r.loader.global_sps},
           {"decode_samples_per_s", or_null(dec.ran, dec.decode_sps)},
           {"lazy_first_samples_per_s", or_null(dec.ran, dec.lazy_first)},
           {"lazy_second_samples_per_s", or_null(dec.ran, dec.lazy_second)},
           {"rows_requested", r.rows_requested},
           {"disk_sequential_bytes_per_s", or_null(r.want_disk, disk.seq_bps)},
           {"disk_sequential_method", or_null(r.want_disk, disk.seq_method)},
           {"disk_random_samples_per_s", or_null(r.want_disk, disk.rnd_sps)},
           {"disk_random_bytes_per_s", or_null(r.want_disk, disk.rnd_sps * sb)},
           {"windowed_out_of_core_samples_per_s", or_null(r.want_out_of_core, disk.ooc_sps)},
           {"windowed_out_of_core_bytes_per_s", or_null(r.want_out_of_core, disk.ooc_sps * sb)},
           {"windowed_out_of_core", out_of_core_json(r)},
           {"mixture", mixture_json(r.mixture)},
           {"rows", jr},
           {"rss",
            {{"anon_start_mib", r.rss_start.anon_mib},
             {"anon_before_mib", r.loader.before.anon_mib},
             {"anon_after_mib", r.loader.after.anon_mib},
             {"file_after_mib", r.loader.after.file_mib},
             {"anon_out_of_core_mib", disk.ooc_rss.anon_mib},
             {"buffers_mib", r.loader.buffers_mib}}}};
  if (!dec.note.empty()) out["note"] = dec.note;
  std::printf("%s\n", out.dump(2).c_str());
}

void print_bench_text(const BenchReport& r) {
  const std::vector<BenchRow> rows = r.rows();
  const MemcpyCeiling ceiling = memcpy_ceiling(rows, r.threads);
  const DiskRows& disk = r.disk;
  const double sb = r.stored_sb;
  std::printf("cache %s: %llu samples of %llu bytes (%.3f GB), batch %u, %d threads\n",
              r.dir.c_str(), static_cast<unsigned long long>(r.samples),
              static_cast<unsigned long long>(r.sample_bytes), r.cache_gb, r.batch, r.threads);
  std::printf("loader reads: %s (--memory %s; %.3f GB of samples, %.3f GB available)\n",
              r.memory_mode.c_str(), r.memory_requested.c_str(), r.cache_gb,
              double(r.available) / 1e9);
  if (r.encoded) {
    std::printf(
        "codec jpeg: %.0f stored bytes per sample, decoded by the Loader rows; no memcpy "
        "rows (no pixels to copy); the disk rows count stored bytes\n",
        sb);
  }
  std::printf("%-32s %7s %14s %9s %10s\n", "", "threads", "samples/s", "GB/s", "vs memcpy");
  for (const BenchRow& row : rows) {
    std::printf("%-32s %7d %14.0f %9.3f %9.2fx\n", row.name.c_str(), row.threads, row.samples_per_s,
                row.gbps, ceiling.gbps > 0 ? row.gbps / ceiling.gbps : 0.0);
  }
  std::printf(
      "RSS anon: %.1f MiB before the loaders, %.1f MiB after (buffers %.1f MiB); "
      "RSS file (mapped cache pages): %.1f MiB\n",
      r.loader.before.anon_mib, r.loader.after.anon_mib, r.loader.buffers_mib,
      r.loader.after.file_mib);
  print_mixture_text(r.mixture);
  if (r.want_disk) {
    std::printf(
        "disk (cold, page cache dropped): sequential %.3f GB/s (%s), random "
        "%.0f-byte reads %.0f/s (%.3f GB/s)\n",
        disk.seq_bps / 1e9, disk.seq_method.c_str(), sb, disk.rnd_sps, disk.rnd_sps * sb / 1e9);
  }
  if (r.want_out_of_core) {
    std::printf(
        "windowed out of core: pread, %u workers, blocks of %llu samples, windows of "
        "%llu blocks (%.1f MiB): %.0f samples/s, %.3f GB/s",
        disk.ooc_workers, static_cast<unsigned long long>(disk.ooc_sampler.block),
        static_cast<unsigned long long>(disk.ooc_sampler.window_blocks),
        disk.ooc_sampler.window_bytes / double(1 << 20), disk.ooc_sps, disk.ooc_sps * sb / 1e9);
    if (r.want_disk && disk.seq_bps > 0) {
      std::printf(" = %.2fx the disk's sequential rate", disk.ooc_sps * sb / disk.seq_bps);
    }
    std::printf("; RSS anon %.1f MiB\n", disk.ooc_rss.anon_mib);
    std::printf("  read path: %s (%s)\n", disk.ooc_direct ? "O_DIRECT" : "page cache",
                disk.ooc_direct_reason.c_str());
  }
  if (!r.decode.note.empty()) std::printf("note: %s\n", r.decode.note.c_str());
}

}  // namespace dscache
