// Host-to-device copy rate of Loader batches: the Loader's buffers page-locked (what
// dscache-train --device cuda uses) against ordinary pageable buffers, each batch copied to the
// GPU with non_blocking and the stream synchronized per batch. Prints one JSON object; on a
// machine without CUDA it says so ("cuda": false) and exits 0 without measuring.
//
// Usage: h2d_copy CACHE [--batch 256] [--seconds 3]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "device_input.h"
#include "dscache/cache.h"
#include "dscache/loader.h"

namespace {

using Clock = std::chrono::steady_clock;

// Bytes/s of copying every batch of whole epochs to the GPU for at least `seconds`.
double copy_rate(std::shared_ptr<const dscache::Cache> cache, uint32_t batch, double seconds,
                 bool pinned) {
  dscache::LoaderOptions o;
  o.batch_size = batch;
  o.workers = 2;
  o.allocator = dscache::train::tensor_allocator(pinned);
  dscache::Loader loader(cache, o);
  const torch::Device gpu(torch::kCUDA, 0);
  uint64_t bytes = 0, epoch = 0;
  double copy_seconds = 0;
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
    loader.start_epoch(0, epoch++);
    while (const dscache::Batch* b = loader.next()) {
      const int64_t n = int64_t{b->size} * b->height * b->width * b->channels;
      const auto c0 = Clock::now();
      torch::Tensor host = torch::from_blob(const_cast<uint8_t*>(b->images), {n}, torch::kUInt8);
      torch::Tensor dev = host.to(gpu, /*non_blocking=*/true);
      torch::cuda::synchronize();
      copy_seconds += std::chrono::duration<double>(Clock::now() - c0).count();
      bytes += static_cast<uint64_t>(n);
    }
  }
  return copy_seconds > 0 ? bytes / copy_seconds : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: h2d_copy CACHE [--batch 256] [--seconds 3]\n");
    return 2;
  }
  uint32_t batch = 256;
  double seconds = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--batch") {
      batch = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    } else if (k == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "h2d_copy: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    auto cache = dscache::Cache::open(argv[1]);
    if (!torch::cuda::is_available()) {
      std::printf("{\"cuda\": false, \"note\": \"no CUDA device: nothing measured\"}\n");
      return 0;
    }
    const double pinned = copy_rate(cache, batch, seconds, true);
    const double pageable = copy_rate(cache, batch, seconds, false);
    std::printf(
        "{\"cuda\": true, \"batch\": %u, \"sample_bytes\": %llu, \"pinned_bytes_per_s\": %.0f, "
        "\"pageable_bytes_per_s\": %.0f, \"pinned_vs_pageable\": %.3f}\n",
        batch, static_cast<unsigned long long>(cache->shape().bytes()), pinned, pageable,
        pageable > 0 ? pinned / pageable : 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "h2d_copy: %s\n", e.what());
    return 1;
  }
  return 0;
}
