// `dscache bench`'s mixture row group (bench_mixture.h): the --mix-with caches as one Mixture,
// timed beside the single Loader over CACHE.
#include "bench_mixture.h"

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "cli_util.h"
#include "dscache/error.h"
#include "dscache/loader.h"

namespace dscache {
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

constexpr uint32_t kRounds = 3;  // interleaved rounds per thread count

// One comma-separated number of --mix; throws UsageError naming it.
double parse_weight(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) {
    throw UsageError("--mix '" + text + "': expected a number (a weight per --mix-with)");
  }
  return v;  // finite, >= 0, not all 0: Mixture::make checks, naming the source
}

// A Loader being timed, and what it served so far.
struct Timed {
  std::unique_ptr<Loader> loader;
  MixTiming t;
  double seconds = 0;
  double cpu_seconds = 0;
};

// CPU seconds of this process, every thread (the Loaders' workers and the consumer).
double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Whole epochs of `x`'s Loader until `min_seconds` passed (at least one), counting samples and,
// for a mixture, the samples of each source, and the process's CPU time meanwhile (the other
// Loaders are idle: their epochs ended). Epoch numbers continue across rounds.
void time_epochs(Timed* x, double min_seconds) {
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    x->loader->start_epoch(1, x->t.epochs++);
    while (const Batch* b = x->loader->next()) {
      x->t.samples += b->size;
      if (b->sources != nullptr) {
        for (uint32_t i = 0; i < b->size; ++i) ++x->t.per_source[b->sources[i]];
      }
    }
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < min_seconds);
  x->seconds += elapsed;
  x->cpu_seconds += process_cpu_seconds() - cpu0;
}

std::string row_name(bool mixture, MixBatching batching) {
  if (!mixture) return "single Loader (mix baseline)";
  return std::string("mixture Loader, ") + kMixBatchingNames.to_string(batching);
}

}  // namespace

void parse_mix_flags(const std::vector<std::string>& dirs, const std::string& mix,
                     const std::string& batching, BenchMixFlags* out) {
  out->dirs = dirs;
  if (dirs.empty() && !mix.empty()) throw UsageError("--mix needs --mix-with (the caches mixed)");
  if (dirs.empty() && !batching.empty()) {
    throw UsageError("--mix-batching needs --mix-with (the caches mixed)");
  }
  out->weights.clear();
  if (!mix.empty()) {
    std::stringstream list(mix);
    for (std::string w; std::getline(list, w, ',');) out->weights.push_back(parse_weight(w));
    if (mix.back() == ',') out->weights.push_back(parse_weight(""));
    if (out->weights.size() != dirs.size()) {
      throw UsageError("--mix '" + mix + "': " + std::to_string(out->weights.size()) +
                       " weights for " + std::to_string(dirs.size()) +
                       " --mix-with caches (one weight per --mix-with, in order)");
    }
  }
  out->batchings.clear();
  if (batching.empty()) {
    out->batchings = {MixBatching::kRandom, MixBatching::kStratified};
  } else {
    out->batchings = {parse_choice(kMixBatchingNames, batching, "--mix-batching")};
  }
}

BenchMixture open_bench_mixture(const BenchMixFlags& flags, const CacheOptions& options) {
  BenchMixture out;
  if (flags.dirs.empty()) return out;
  std::vector<MixSource> sources;
  for (size_t k = 0; k < flags.dirs.size(); ++k) {
    std::shared_ptr<const Cache> cache = Cache::open(flags.dirs[k], options);
    out.caches.push_back(cache);
    MixSource src;
    src.source = cache;
    src.classes = cache->manifest().classes;
    src.name = flags.dirs[k];
    // identity stays empty: the bench saves no position, so the fingerprint is never compared.
    if (!flags.weights.empty()) src.weight = flags.weights[k];
    sources.push_back(std::move(src));
  }
  for (MixBatching b : flags.batchings) {
    MixtureOptions mo;
    mo.batching = b;  // kStratified: the stratum is the Loader's batch (stratum 0)
    try {
      out.mixtures.push_back(Mixture::make(sources, mo));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInvalidArgument) throw;
      throw UsageError(std::string("--mix-with, --mix: ") + e.what());
    }
  }
  return out;
}

MixtureRows mixture_rows(const std::shared_ptr<const Cache>& serving, const BenchMixture& mix,
                         const BenchSettings& s) {
  MixtureRows out;
  if (!s.want("mixture") || mix.mixtures.empty()) return out;
  const Mixture& first = *mix.mixtures.front();
  out.ran = true;
  out.rounds = kRounds;
  out.single_samples = serving->size();
  out.epoch_samples = first.epoch_samples();
  out.counts = first.counts();
  out.shares = first.describe_shares();
  // The same bytes in memory for every Loader: CACHE's pages and the sources' (the parts of a
  // merge share them where merge hard-linked the shards).
  warm_page_cache(*serving);
  for (size_t k = 0; k < first.sources(); ++k) {
    out.names.push_back(first.source(k).name);
    out.sizes.push_back(mix.caches[k]->size());
    warm_page_cache(*mix.caches[k]);
  }
  const double sb = double(serving->manifest().sample_bytes());
  for (int threads : {1, s.all_threads}) {
    if (threads == 1 && s.all_threads == 1 && !out.rows.empty()) break;
    LoaderOptions lo;
    lo.batch_size = s.batch;
    lo.prefetch = 4;
    lo.workers = static_cast<uint32_t>(threads);
    lo.sampler.shuffle = Shuffle::kGlobal;
    lo.direct_read = DirectRead::kOff;  // the in-memory path, as the other Loader rows
    std::vector<Timed> group;
    group.push_back({std::make_unique<Loader>(serving, lo), {}, 0});
    for (const std::shared_ptr<const Mixture>& m : mix.mixtures) {
      group.push_back({std::make_unique<Loader>(m, lo), {}, 0});
      group.back().t.mixture = true;
      group.back().t.batching = m->options().batching;
      group.back().t.per_source.assign(m->sources(), 0);
    }
    // Each round starts with the next Loader, so none always runs first (or after the same one).
    for (uint32_t round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < group.size(); ++i) {
        time_epochs(&group[(i + round) % group.size()], s.seconds / kRounds);
      }
    }
    for (Timed& x : group) {
      x.t.name = row_name(x.t.mixture, x.t.batching);
      x.t.threads = threads;
      x.t.samples_per_s = x.t.samples / x.seconds;
      x.t.cpu_us_per_sample = x.cpu_seconds * 1e6 / x.t.samples;
      out.rows.push_back({x.t.name, threads, x.t.samples_per_s, x.t.samples_per_s * sb / 1e9});
      out.timings.push_back(x.t);
    }
  }
  return out;
}

MixRatio mixture_ratio(const MixtureRows& m, MixBatching batching, int threads) {
  const MixTiming *single = nullptr, *mixed = nullptr;
  for (const MixTiming& t : m.timings) {
    if (t.threads != threads) continue;
    if (!t.mixture) single = &t;
    if (t.mixture && t.batching == batching) mixed = &t;
  }
  MixRatio r;
  if (single == nullptr || mixed == nullptr) return r;
  if (single->samples_per_s > 0) r.wall = mixed->samples_per_s / single->samples_per_s;
  if (mixed->cpu_us_per_sample > 0) r.cpu = single->cpu_us_per_sample / mixed->cpu_us_per_sample;
  return r;
}

namespace {

// The thread counts timed, in order, once each.
std::vector<int> thread_counts(const MixtureRows& m) {
  std::vector<int> out;
  for (const MixTiming& t : m.timings) {
    if (out.empty() || out.back() != t.threads) out.push_back(t.threads);
  }
  return out;
}

std::vector<MixBatching> batchings_timed(const MixtureRows& m) {
  std::vector<MixBatching> out;
  for (const MixTiming& t : m.timings) {
    if (t.mixture && t.threads == m.timings.front().threads) out.push_back(t.batching);
  }
  return out;
}

}  // namespace

void print_mixture_text(const MixtureRows& m) {
  if (!m.ran) return;
  std::printf("mixture: %zu sources (", m.names.size());
  for (size_t k = 0; k < m.names.size(); ++k) {
    std::printf("%s%s %llu samples", k ? ", " : "", m.names[k].c_str(),
                static_cast<unsigned long long>(m.sizes[k]));
  }
  std::printf("; %s): epoch %llu samples, CACHE %llu%s\n", m.shares.c_str(),
              static_cast<unsigned long long>(m.epoch_samples),
              static_cast<unsigned long long>(m.single_samples),
              m.epoch_samples == m.single_samples ? "" : " (not the same samples: rates only)");
  for (MixBatching b : batchings_timed(m)) {
    std::printf("mixture / single, %s:", kMixBatchingNames.to_string(b));
    for (int t : thread_counts(m)) {
      std::printf(" %.3fx (%d thread%s)", mixture_ratio(m, b, t).wall, t, t == 1 ? "" : "s");
    }
    std::printf("; by CPU time per sample:");
    for (int t : thread_counts(m)) std::printf(" %.3fx", mixture_ratio(m, b, t).cpu);
    std::printf("\n");
  }
  for (const MixTiming& t : m.timings) {
    std::printf("  served: %-30s %2d thread%s: %llu samples in %llu epochs, %.3f CPU us each",
                t.name.c_str(), t.threads, t.threads == 1 ? "" : "s",
                static_cast<unsigned long long>(t.samples),
                static_cast<unsigned long long>(t.epochs), t.cpu_us_per_sample);
    for (size_t k = 0; k < t.per_source.size(); ++k) {
      std::printf("%s%llu", k ? " + " : " (", static_cast<unsigned long long>(t.per_source[k]));
    }
    std::printf("%s\n", t.per_source.empty() ? "" : " by source)");
  }
}

json mixture_json(const MixtureRows& m) {
  if (!m.ran) return nullptr;
  json sources = json::array();
  for (size_t k = 0; k < m.names.size(); ++k) {
    sources.push_back({{"name", m.names[k]}, {"samples", m.sizes[k]}, {"count", m.counts[k]}});
  }
  json rows = json::array();
  for (const MixTiming& t : m.timings) {
    rows.push_back(
        {{"name", t.name},
         {"mixture", t.mixture},
         {"batching", t.mixture ? json(kMixBatchingNames.to_string(t.batching)) : json(nullptr)},
         {"threads", t.threads},
         {"samples_per_s", t.samples_per_s},
         {"cpu_us_per_sample", t.cpu_us_per_sample},
         {"samples", t.samples},
         {"epochs", t.epochs},
         {"per_source", t.mixture ? json(t.per_source) : json(nullptr)}});
  }
  json ratios = json::array();
  for (MixBatching b : batchings_timed(m)) {
    for (int t : thread_counts(m)) {
      const MixRatio r = mixture_ratio(m, b, t);
      ratios.push_back({{"batching", kMixBatchingNames.to_string(b)},
                        {"threads", t},
                        {"ratio", r.wall},
                        {"cpu_ratio", r.cpu}});
    }
  }
  return {{"sources", sources},
          {"shares", m.shares},
          {"epoch_samples", m.epoch_samples},
          {"single_samples", m.single_samples},
          {"rounds", m.rounds},
          {"rows", rows},
          {"ratios", ratios}};
}

}  // namespace dscache
