// `dscache bench CACHE [--source DIR] [--mix-with A ...] [--json]`: measures serving speed in one
// run. This file parses the flags and runs the row groups in order (bench_rows.h,
// bench_mixture.h); bench_report.h prints them.
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_mixture.h"
#include "bench_report.h"
#include "bench_rows.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/cache.h"
#include "dscache/cpus.h"
#include "dscache/direct_read.h"
#include "dscache/error.h"
#include "dscache/exit_codes.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/remote.h"

namespace dscache {
namespace po = boost::program_options;

namespace {

// --memory: the library's names (kMemoryModeNames) of the modes the Loader rows can read
// through; in-process is not one.
constexpr EnumName<MemoryMode> kBenchMemory[] = {
    {MemoryMode::kAuto, "auto"},
    {MemoryMode::kPageCache, "page-cache"},
    {MemoryMode::kPread, "pread"},
};
constexpr EnumTable<MemoryMode> kBenchMemoryNames(kBenchMemory);

// `dscache bench`'s flags, as given.
struct BenchFlags {
  std::string dir;                    // CACHE
  std::string source;                 // --source; empty = the manifest's root
  std::string lazy_file;              // --lazy-file; empty = a temp file
  std::string memory = "auto";        // --memory: auto, page-cache or pread
  std::string rows_arg = "all";       // --rows as given
  int threads = 0;                    // --threads; 0 = all cores
  uint32_t batch = 256;               // --batch
  double seconds = 2.0;               // --seconds, per timed row
  uint64_t decode_samples = 3000;     // --decode-samples
  bool json = false;                  // --json
  std::string direct_read = "auto";   // --direct-read: auto, on or off (bare: on)
  uint32_t direct_depth = 4;          // --direct-depth
  uint32_t direct_request_kib = 512;  // --direct-request-kib
  std::vector<std::string> mix_with;  // --mix-with, in order (the mixture group's caches)
  std::string mix;                    // --mix as given: weights; empty = repeat 1 each
  std::string mix_batching;           // --mix-batching as given; empty = random and stratified
  BenchMixFlags mix_flags;            // the three parsed
  std::set<std::string> groups;       // --rows parsed: the row groups to run
};

// --rows: "all" or a comma-separated list of kBenchRowGroups; "all" has the mixture group only
// with --mix-with, which a list must then name. Throws UsageError.
std::set<std::string> parse_row_groups(const std::string& rows_arg, bool mix_with) {
  std::set<std::string> groups;
  if (rows_arg == "all") {
    groups.insert(std::begin(kBenchRowGroups), std::end(kBenchRowGroups));
    if (!mix_with) groups.erase("mixture");
    return groups;
  }
  std::stringstream list(rows_arg);
  for (std::string g; std::getline(list, g, ',');) {
    if (std::find(std::begin(kBenchRowGroups), std::end(kBenchRowGroups), g) ==
        std::end(kBenchRowGroups)) {
      throw UsageError("--rows '" + g +
                       "': expected memcpy, global, windowed, decode, disk, out-of-core or "
                       "mixture");
    }
    groups.insert(g);
  }
  if (groups.empty()) throw UsageError("--rows is empty");
  if (groups.count("mixture") && !mix_with) {
    throw UsageError("--rows mixture needs the caches to mix: --mix-with A --mix-with B ...");
  }
  if (!groups.count("mixture") && mix_with) {
    throw UsageError("--mix-with is timed by the mixture row group: add mixture to --rows '" +
                     rows_arg + "'");
  }
  return groups;
}

// argv with each bare --direct-read spelled --direct-read=on. A value is written
// --direct-read=VALUE only: the word after a bare --direct-read is never its value (Boost would
// take it) but CACHE or another flag, so a cache named auto, on or off is read as the cache. A
// word there that names nothing (and is no flag or remote location) is refused, naming the
// spelling: `--direct-read off` meant a value, and as CACHE it would fail later, less clearly.
std::vector<std::string> spell_bare_direct_read(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] != "--direct-read") continue;
    args[i] = "--direct-read=on";
    if (i + 1 == args.size()) continue;
    const std::string& next = args[i + 1];
    std::error_code ec;
    if (next.rfind('-', 0) == 0 || is_remote_location(next) || std::filesystem::exists(next, ec)) {
      continue;
    }
    const std::string value = kDirectReadNames.find(next) ? next : "VALUE";
    throw UsageError("--direct-read " + next + ": write a value as --direct-read=" + value +
                     " (one of " + kDirectReadNames.names() + "); a bare --direct-read is on, " +
                     "and '" + next + "' after it would be CACHE, which does not exist");
  }
  return args;
}

// Parses argv into *f. Returns -1 to go on, or the exit code to return now (--help: 0; a bad
// flag: ExitCode::kUsage, its message printed).
int parse_bench_flags(int argc, char** argv, BenchFlags* f) {
  po::options_description desc(
      "Usage: dscache bench CACHE [options]\n\n"
      "Measure, in one run: the memcpy ceiling for the cache's bytes, the Loader (global and\n"
      "windowed shuffle, 1 and all threads), the per-sample decode of the sources, and the lazy\n"
      "cache's first and second pass, the disk's cold sequential and random sample-sized reads,\n"
      "and the windowed shuffle served out of core (pread, read-ahead, page cache dropped).\n"
      "With --mix-with: a Loader over the mixture of those caches beside a single Loader over\n"
      "CACHE (the same options), random and stratified, 1 and all threads, and their ratio.\n\n"
      "Options");
  desc.add_options()("help,h", "show this help")(
      "source", po::value(&f->source), "source root (default: the one recorded in the manifest)")(
      "threads", po::value(&f->threads)->default_value(0),
      "threads for 'all' rows (0 = the CPUs this process may use)")(
      "batch", po::value(&f->batch)->default_value(256), "Loader batch size")(
      "seconds", po::value(&f->seconds)->default_value(2.0), "minimum time per Loader row")(
      "decode-samples", po::value(&f->decode_samples)->default_value(3000),
      "samples decoded for the per-sample decode row (and the lazy cache's passes)")(
      "lazy-file", po::value(&f->lazy_file), "lazy cache file (default: a temp file, removed)")(
      "memory", po::value(&f->memory)->default_value("auto"),
      "how the Loader rows read the cache: auto (mapped when it fits in available memory, "
      "else pread), page-cache or pread")(
      "rows", po::value(&f->rows_arg)->default_value("all"),
      "comma-separated row groups: memcpy, global, windowed, decode (and lazy), disk, "
      "out-of-core, mixture; 'all' = every one (mixture: with --mix-with). Without memcpy the "
      "page cache is not warmed first")(
      "mix-with", po::value(&f->mix_with)->composing(),
      "A (repeatable): the caches mixed by the mixture rows, opened like CACHE (--memory); "
      "they must agree (channels, fields, classes present), else exit 2 naming them. For the "
      "same bytes: CACHE = dscache merge of the parts A, B, ...")(
      "mix", po::value(&f->mix),
      "W,W,...: one weight per --mix-with (Mixture weights; default: each source once an "
      "epoch)")("mix-batching", po::value(&f->mix_batching),
                "random or stratified: the one mixture batching timed (default: both)")(
      "direct-read", po::value(&f->direct_read)->default_value("auto")->implicit_value("on"),
      "=auto|on|off: the out-of-core row reads each window with O_DIRECT into the Loader's "
      "buffers (LoaderOptions::direct_read) instead of through the page cache: auto (when the "
      "cache does not fit in the memory this process may use for page cache), on (also a bare "
      "--direct-read: the word after it is CACHE or a flag, never a value) or off")(
      "direct-depth", po::value(&f->direct_depth)->default_value(4),
      "--direct-read: read requests in flight (1..64)")(
      "direct-request-kib", po::value(&f->direct_request_kib)->default_value(512),
      "--direct-read: KiB per read request (a multiple of 4)")("json", "machine-readable output");
  po::variables_map vm;
  try {
    std::vector<std::string> args = spell_bare_direct_read(argc, argv);
    std::vector<char*> arg_ptrs;
    for (std::string& a : args) arg_ptrs.push_back(a.data());
    if (!parse_cache_args(argc, arg_ptrs.data(), desc, "bench", &f->dir, &vm)) {
      return to_int(ExitCode::kOk);
    }
    if (f->batch == 0) throw UsageError("--batch must be >= 1");
    if (f->threads < 0) throw UsageError("--threads must be >= 0");
    if (f->seconds <= 0) throw UsageError("--seconds must be positive");
    if (f->decode_samples == 0) throw UsageError("--decode-samples must be >= 1");
    parse_choice(kBenchMemoryNames, f->memory, "--memory");  // measure() reads it again
    parse_choice(kDirectReadNames, f->direct_read, "--direct-read");
    parse_mix_flags(f->mix_with, f->mix, f->mix_batching, &f->mix_flags);
    f->groups = parse_row_groups(f->rows_arg, !f->mix_with.empty());
  } catch (const std::exception& e) {
    return report_failure("dscache bench", e);
  }
  f->json = vm.count("json") > 0;
  return -1;
}

// Opens the cache and runs every row group asked for, in order. Returns false (nothing
// measured) for a cache with no samples. Throws Error for a bad cache or sources.
bool measure(const BenchFlags& f, const BenchSettings& s, BenchReport* r) {
  r->rss_start = read_rss();
  // The memcpy rows copy from mappings; the Loader rows read as --memory says.
  CacheOptions mapped_options;
  mapped_options.memory = MemoryMode::kPageCache;
  auto cache = Cache::open(f.dir, mapped_options);
  const Manifest m = cache->manifest();  // a copy: the mapping is closed before the disk rows
  if (m.layout != Layout::kFixed) {
    throw Error(ErrorKind::kUnsupported, f.dir, "bench measures fixed-layout caches");
  }
  if (m.count == 0) return false;  // a valid cache (FORMAT.md), but there is nothing to time
  CacheOptions serve_options;
  serve_options.memory = kBenchMemoryNames.parse(f.memory, "--memory");
  r->available = available_memory_bytes();
  auto serving = Cache::open(f.dir, serve_options);
  // The mixture's caches are checked before anything is timed: a mismatch ends the run first.
  BenchMixture mix = open_bench_mixture(f.mix_flags, serve_options);
  r->memory_mode = to_string(serving->memory_mode());
  r->samples = cache->size();
  r->sample_bytes = m.sample_bytes();
  r->cache_gb = double(r->samples) * r->sample_bytes / 1e9;
  r->codec = to_string(m.codec);
  // JPEG caches: samples are decoded to sb bytes but stored in fewer; the disk rows count
  // stored bytes (what the disk delivers), the other rows decoded bytes (what the batch holds).
  r->encoded = cache->encoded();
  r->stored_sb = double(cache->stored_bytes()) / r->samples;
  std::vector<std::string> files;
  for (const ShardEntry& e : m.shards) {
    if (e.count > 0) files.push_back(f.dir + "/" + e.file);
  }
  // Warm the page cache so every row reads from memory, as a second epoch would.
  if (s.want("memcpy")) warm_page_cache(*cache);
  r->memcpy = memcpy_rows(*cache, s);
  r->loader = loader_rows(serving, s);
  r->decode = decode_rows(*cache, s, {f.source, f.lazy_file, f.decode_samples});
  r->mixture = mixture_rows(serving, mix, s);
  // Mapped pages cannot be dropped, so the mappings go before the disk rows.
  cache.reset();
  serving.reset();
  mix = BenchMixture{};
  r->disk = disk_rows(s, files, r->stored_sb);
  return true;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchFlags f;
  if (const int code = parse_bench_flags(argc, argv, &f); code >= 0) return code;
  BenchSettings s;
  s.dir = f.dir;
  s.batch = f.batch;
  s.seconds = f.seconds;
  s.all_threads = f.threads > 0 ? f.threads : static_cast<int>(usable_cpus().cpus);
  s.groups = f.groups;
  s.direct_read = kDirectReadNames.parse(f.direct_read, "--direct-read");
  s.direct_depth = f.direct_depth;
  s.direct_request_kib = f.direct_request_kib;
  set_decode_threads(0);

  BenchReport r;
  r.dir = f.dir;
  r.threads = s.all_threads;
  r.batch = f.batch;
  r.memory_requested = f.memory;
  r.rows_requested = f.rows_arg;
  r.want_disk = s.want("disk");
  r.want_out_of_core = s.want("out-of-core");
  r.direct_read = s.direct_read;
  r.direct_depth = s.direct_depth;
  r.direct_request_kib = s.direct_request_kib;
  try {
    if (!measure(f, s, &r)) {
      // A valid cache (FORMAT.md), but there is nothing to time.
      std::fprintf(stderr, "dscache bench: %s holds no samples to measure\n", f.dir.c_str());
      if (f.json) {
        std::printf(
            "%s\n",
            nlohmann::json{{"cache", f.dir}, {"samples", 0}, {"rows", nlohmann::json::array()}}
                .dump(2)
                .c_str());
      }
      return to_int(ExitCode::kOk);
    }
    if (f.json) {
      print_bench_json(r);
    } else {
      print_bench_text(r);
    }
    return to_int(ExitCode::kOk);
  } catch (const std::exception& e) {
    return report_failure("dscache bench", e);
  }
}

}  // namespace dscache
