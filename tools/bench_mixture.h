// `dscache bench`'s mixture row group: a Loader over a Mixture of the --mix-with caches timed
// against a single Loader over CACHE, with the same options, and their ratio.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_rows.h"
#include "dscache/cache.h"
#include "dscache/mixture.h"

namespace dscache {

// What the mixture group is asked for (--mix-with, --mix, --mix-batching), parsed.
struct BenchMixFlags {
  std::vector<std::string> dirs;       // --mix-with, in order; empty = no mixture group
  std::vector<double> weights;         // --mix: one weight per --mix-with; empty = repeat 1 each
  std::vector<MixBatching> batchings;  // --mix-batching: the batchings timed, in this order
};

// Parses --mix's "W,W,..." (one number per --mix-with) and --mix-batching ("" = both, else
// random or stratified) into *out, with `dirs` as given. Throws UsageError naming the option:
// --mix with another count of values than --mix-with, a value that is not a number, --mix or
// --mix-batching without --mix-with.
void parse_mix_flags(const std::vector<std::string>& dirs, const std::string& mix,
                     const std::string& batching, BenchMixFlags* out);

// The --mix-with caches, open, and their Mixture for each batching timed.
struct BenchMixture {
  std::vector<std::shared_ptr<const Cache>> caches;      // in --mix-with order
  std::vector<std::shared_ptr<const Mixture>> mixtures;  // one per BenchMixFlags::batchings
};

// Opens each --mix-with cache with `options` (CACHE's: the same --memory) and makes the Mixture
// of them for each batching, the sources named by their paths as given. A disagreement between
// them (Mixture::make's Error(kInvalidArgument), which names the caches and what differs) is a
// UsageError (exit 2) carrying the library's message. Empty when no --mix-with was given.
BenchMixture open_bench_mixture(const BenchMixFlags& flags, const CacheOptions& options);

// One timed Loader of the group.
struct MixTiming {
  std::string name;      // the table's row name
  bool mixture = false;  // a Loader over the mixture (else the single one over CACHE)
  MixBatching batching = MixBatching::kRandom;  // the mixture's batching (mixture only)
  int threads = 0;                              // Loader workers
  double samples_per_s = 0;                     // samples served / seconds timed
  double cpu_us_per_sample = 0;      // the process's CPU time (all threads) / samples served
  uint64_t samples = 0;              // samples served over the timed epochs
  uint64_t epochs = 0;               // whole epochs timed
  std::vector<uint64_t> per_source;  // mixture: samples served from each source (Batch::sources)
};

// The group's results. `ran` is false without the group (or without a mixture).
struct MixtureRows {
  bool ran = false;
  std::vector<BenchRow> rows;      // the table's lines, in timing order
  std::vector<MixTiming> timings;  // the same, with counts
  std::vector<std::string> names;  // the mixture's sources (paths as given)
  std::vector<uint64_t> sizes;     // samples in each
  std::vector<uint64_t> counts;    // samples each gives an epoch (Mixture::counts())
  std::string shares;              // Mixture::describe_shares()
  uint64_t epoch_samples = 0;      // the mixture's epoch (E)
  uint64_t single_samples = 0;     // CACHE's epoch: its sample count
  uint32_t rounds = 0;             // interleaved rounds per thread count
};

// Times, at 1 worker and all: the single Loader over `serving` (global shuffle) and a Loader
// over each of `mix`'s mixtures (one per batching), the same LoaderOptions otherwise (batch,
// prefetch 4, samples as stored). The page cache is warmed for CACHE and every source first;
// the Loaders of one thread count take turns over MixtureRows::rounds rounds of --seconds /
// rounds each (whole epochs; each round begins with the next Loader), so that a load change on
// a shared machine falls on all of them alike.
MixtureRows mixture_rows(const std::shared_ptr<const Cache>& serving, const BenchMixture& mix,
                         const BenchSettings& s);

// Mixture against single at one thread count: > 1 is the mixture faster (or cheaper).
struct MixRatio {
  double wall = 0;  // mixture / single samples/s (0: either not timed)
  double cpu = 0;   // single / mixture CPU time per sample: steadier than wall time where
                    // other processes share the cores, since it counts only this one's work
};
MixRatio mixture_ratio(const MixtureRows& m, MixBatching batching, int threads);

// The report's parts: the text lines after the table, and the JSON object (null when not run).
void print_mixture_text(const MixtureRows& m);
nlohmann::json mixture_json(const MixtureRows& m);

}  // namespace dscache
