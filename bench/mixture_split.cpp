// mixture_split: where a Loader over a Mixture spends CPU time beyond a single Loader serving
// the same bytes (issue 39's >= 0.9x goal). One thread, thread CPU time, each step's minimum
// over REPS alternating repetitions (the least disturbed by other processes on the cores):
//   cache copy+label     Cache::copy_sample + label in a global-shuffle order (a single
//                        Loader's per-sample work on the merged cache)
//   view copy+label      the same through Mixture::view() (locate by offsets, a virtual call
//                        into the source, the label remap), in the same view order
//   entry copy+label     the same with (source, local) known in advance, calling the source
//                        and the remap directly: what a fill reading its entries could do
//   stream_id            one stream_id() per sample (a mixture sample's transform key)
//   loader ...           whole epochs of Loaders with workers 0 (each batch filled on this
//                        thread): single over the cache, mixture random and stratified
//   start_epoch ...      start_epoch() alone: building the epoch's order
//
// Usage: mixture_split DIR [REPS]   DIR holds cache, part0 and part1 as bench/mixture.py makes
// them. Prints one line per step in ns per sample.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/mixture.h"
#include "dscache/sampler.h"

namespace {

using dscache::Loader;

double thread_cpu() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

constexpr int kSteps = 9;
const char* const kNames[kSteps] = {
    "cache copy+label",   "view copy+label",       "entry copy+label",      "stream_id",
    "loader single",      "loader mixture random", "loader mixture strat.", "start_epoch single",
    "start_epoch mixture"};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: mixture_split DIR [REPS]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int reps = argc == 3 ? std::atoi(argv[2]) : 15;
  try {
    auto cache = dscache::Cache::open(dir + "/cache");
    std::vector<dscache::MixSource> sources;
    for (const char* part : {"part0", "part1"}) {
      dscache::MixSource s;
      auto c = dscache::Cache::open(dir + "/" + part);
      s.classes = c->manifest().classes;
      s.source = c;
      s.name = part;
      sources.push_back(std::move(s));
    }
    dscache::MixtureOptions strat;
    strat.batching = dscache::MixBatching::kStratified;
    auto random = dscache::Mixture::make(sources),
         stratified = dscache::Mixture::make(sources, strat);
    auto view = random->view();
    std::vector<const dscache::SampleSource*> raw = {sources[0].source.get(),
                                                     sources[1].source.get()};
    const uint64_t n = cache->size(), sb = cache->manifest().sample_bytes();
    const std::vector<uint64_t> order = dscache::epoch_order(n, dscache::SamplerOptions{}, 1, 0);
    std::vector<std::pair<uint32_t, uint64_t>> entries(n);
    for (uint64_t i = 0; i < n; ++i) entries[i] = random->locate(order[i]);
    std::vector<uint8_t> ring(size_t{5} * 256 * sb);  // as large as a Loader's buffers
    const uint64_t slots = ring.size() / sb;
    dscache::LoaderOptions lo;
    lo.batch_size = 256;
    lo.workers = 0;
    lo.direct_read = dscache::DirectRead::kOff;
    Loader single(cache, lo), mixed(random, lo), mixed_strat(stratified, lo);
    double best[kSteps];
    for (double& b : best) b = 1e30;
    int64_t sink = 0;
    for (int r = 0; r < reps; ++r) {
      double t[kSteps + 1];
      t[0] = thread_cpu();
      for (uint64_t i = 0; i < n; ++i) {
        cache->copy_sample(order[i], ring.data() + (i % slots) * sb);
        sink += cache->label(order[i]);
      }
      t[1] = thread_cpu();
      for (uint64_t i = 0; i < n; ++i) {
        view->copy_sample(order[i], ring.data() + (i % slots) * sb);
        sink += view->label(order[i]);
      }
      t[2] = thread_cpu();
      for (uint64_t i = 0; i < n; ++i) {
        const auto [k, local] = entries[i];
        raw[k]->copy_sample(local, ring.data() + (i % slots) * sb);
        sink += random->remap(k)[static_cast<size_t>(raw[k]->label(local))];
      }
      t[3] = thread_cpu();
      for (uint64_t i = 0; i < n; ++i)
        sink += int64_t(dscache::stream_id(0x6d697864726177ull, order[i], 3) & 1);
      t[4] = thread_cpu();
      Loader* loaders[3] = {&single, &mixed, &mixed_strat};
      for (int j = 0; j < 3; ++j) {
        loaders[j]->start_epoch(1, uint64_t(r));
        while (const dscache::Batch* b = loaders[j]->next()) sink += b->images[0];
        t[5 + j] = thread_cpu();
      }
      single.start_epoch(1, uint64_t(reps + r));
      t[8] = thread_cpu();
      mixed.start_epoch(1, uint64_t(reps + r));
      t[9] = thread_cpu();
      for (int j = 0; j < kSteps; ++j) best[j] = std::min(best[j], t[j + 1] - t[j]);
    }
    for (int j = 0; j < kSteps; ++j) {
      std::printf("%-24s %8.1f ns/sample\n", kNames[j], best[j] * 1e9 / double(n));
    }
    std::printf("(%llu samples of %llu bytes, min of %d; checksum %lld)\n",
                static_cast<unsigned long long>(n), static_cast<unsigned long long>(sb), reps,
                static_cast<long long>(sink));
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "mixture_split: %s\n", e.what());
    return 1;
  }
  return 0;
}
