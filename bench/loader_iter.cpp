// loader_iter: the C++ Loader iterated over whole epochs with given options and nothing else
// done with the batches: the ceiling bench/py_loader.py compares dscache.Loader (Python) with.
//
// Usage: loader_iter CACHE BATCH WORKERS PREFETCH EPOCHS SEED
// Prints one JSON object: {"samples_per_s": best epoch, "epochs": [samples/s per epoch], ...}.
// Each epoch is timed from start_epoch() to the end-of-epoch nullptr, like the Python loops.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/loader.h"

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: loader_iter CACHE BATCH WORKERS PREFETCH EPOCHS SEED\n";
    return 2;
  }
  auto num = [&](int k) { return std::strtoull(argv[k], nullptr, 10); };
  try {
    dscache::LoaderOptions o;
    o.batch_size = static_cast<uint32_t>(num(2));
    o.workers = static_cast<uint32_t>(num(3));
    o.prefetch = static_cast<uint32_t>(num(4));
    dscache::Loader loader(dscache::Cache::open(argv[1]), o);
    std::vector<double> rates;
    uint64_t checksum = 0;  // a byte of every batch, so nothing can be optimized away
    for (uint64_t e = 0; e < num(5); ++e) {
      const auto t0 = std::chrono::steady_clock::now();
      loader.start_epoch(num(6), e);
      uint64_t samples = 0;
      while (const dscache::Batch* b = loader.next()) {
        samples += b->size;
        checksum += b->images[0];
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rates.push_back(static_cast<double>(samples) / s);
    }
    double best = 0;
    std::cout << "{\"epochs\": [";
    for (size_t k = 0; k < rates.size(); ++k) {
      std::cout << (k ? ", " : "") << static_cast<uint64_t>(rates[k]);
      if (rates[k] > best) best = rates[k];
    }
    std::cout << "], \"samples_per_s\": " << static_cast<uint64_t>(best)
              << ", \"checksum\": " << checksum << "}\n";
  } catch (const dscache::Error& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
  return 0;
}
