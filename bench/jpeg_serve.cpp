// Serving a JPEG cache against the raw cache of the same images, in one run: the Loader with a
// random-resized crop (+ flip) to each --sizes output, on --threads workers, from
//   raw      the raw cache (pixels mapped, crop_resize only),
//   full     the JPEG cache decoded whole, then crop_resize (CacheOptions.jpeg {false, false}),
//   reduced  the JPEG cache with the serve-time savings (DCT scaling + cropped decode; default).
// Each row runs whole epochs (global shuffle) for at least --seconds after one warm-up epoch, so
// the caches are in the page cache: this measures CPU cost, not the disk. Prints one JSON
// object: the caches' stored bytes and their ratio, then per size the three rows' images/s,
// images/s per worker thread, and the ratios reduced/full and reduced/raw.
//
// Usage: jpeg_serve RAW_CACHE JPEG_CACHE [--sizes 224,64] [--threads 2] [--batch 64]
//                   [--seconds 3]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/loader.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string raw, jpeg;
  std::vector<uint32_t> sizes{224, 64};
  uint32_t threads = 2;
  uint32_t batch = 64;
  double seconds = 3;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "jpeg_serve: %s\nusage: jpeg_serve RAW_CACHE JPEG_CACHE [--sizes 224,64] "
               "[--threads 2] [--batch 64] [--seconds 3]\n",
               why.c_str());
  std::exit(2);
}

uint64_t number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || v[0] == '-' || x == 0) {
    usage(flag + " '" + v + "': expected a positive integer");
  }
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const bool has = i + 1 < argc;
    if (k == "--sizes" && has) {
      a.sizes.clear();
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) {
        a.sizes.push_back(static_cast<uint32_t>(number("--sizes", item)));
      }
    } else if (k == "--threads" && has) {
      a.threads = static_cast<uint32_t>(number(k, argv[++i]));
    } else if (k == "--batch" && has) {
      a.batch = static_cast<uint32_t>(number(k, argv[++i]));
    } else if (k == "--seconds" && has) {
      a.seconds = std::atof(argv[++i]);
      if (!(a.seconds > 0)) usage("--seconds must be positive");
    } else if (!k.empty() && k[0] == '-') {
      usage("unknown option " + k);
    } else {
      pos.push_back(k);
    }
  }
  if (pos.size() != 2) usage("expected RAW_CACHE and JPEG_CACHE");
  a.raw = pos[0];
  a.jpeg = pos[1];
  return a;
}

uint64_t stored_bytes(const dscache::Cache& c) {
  uint64_t n = 0;
  for (const auto& s : c.manifest().shards) n += s.bytes;
  return n;
}

// Images/s of the Loader over whole epochs, after one warm-up epoch.
double images_per_s(std::shared_ptr<const dscache::Cache> cache, const Args& a, uint32_t size) {
  dscache::LoaderOptions o;
  o.batch_size = a.batch;
  o.workers = a.threads;
  o.prefetch = 2 * a.threads;
  o.transform.crop = dscache::CropMode::kRandomResized;
  o.transform.height = o.transform.width = size;
  o.transform.flip = true;
  dscache::Loader loader(cache, o);
  uint64_t epoch = 0;
  loader.start_epoch(1, epoch++);
  while (loader.next() != nullptr) {
  }
  uint64_t images = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    loader.start_epoch(1, epoch++);
    while (const dscache::Batch* b = loader.next()) images += b->size;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < a.seconds);
  return images / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    dscache::CacheOptions mapped;
    mapped.memory = dscache::MemoryMode::kPageCache;
    auto raw = dscache::Cache::open(a.raw, mapped);
    auto reduced = dscache::Cache::open(a.jpeg, mapped);
    dscache::CacheOptions ref = mapped;
    ref.jpeg = dscache::JpegDecodeOptions{false, false};
    auto full = dscache::Cache::open(a.jpeg, ref);
    if (!reduced->encoded() || raw->encoded()) {
      usage("RAW_CACHE must be a raw cache and JPEG_CACHE a --codec jpeg cache");
    }
    if (raw->size() != reduced->size()) usage("the two caches hold different sample counts");
    const uint64_t raw_bytes = stored_bytes(*raw), jpeg_bytes = stored_bytes(*reduced);
    std::printf("{\n  \"samples\": %llu,\n  \"threads\": %u,\n  \"batch\": %u,\n",
                static_cast<unsigned long long>(raw->size()), a.threads, a.batch);
    std::printf("  \"raw_shard_bytes\": %llu,\n  \"jpeg_shard_bytes\": %llu,\n",
                static_cast<unsigned long long>(raw_bytes),
                static_cast<unsigned long long>(jpeg_bytes));
    std::printf("  \"jpeg_quality\": %u,\n  \"size_ratio_jpeg_to_raw\": %.4f,\n  \"rows\": [\n",
                reduced->manifest().recipe.quality,
                raw_bytes ? static_cast<double>(jpeg_bytes) / raw_bytes : 0.0);
    for (size_t k = 0; k < a.sizes.size(); ++k) {
      const uint32_t s = a.sizes[k];
      const double r = images_per_s(raw, a, s);
      const double f = images_per_s(full, a, s);
      const double d = images_per_s(reduced, a, s);
      std::printf(
          "    {\"size\": %u, \"raw_images_per_s\": %.1f, \"full_decode_images_per_s\": %.1f, "
          "\"reduced_decode_images_per_s\": %.1f, \"reduced_per_thread\": %.1f, "
          "\"full_per_thread\": %.1f, \"raw_per_thread\": %.1f, \"reduced_vs_full\": %.3f, "
          "\"reduced_vs_raw\": %.3f}%s\n",
          s, r, f, d, d / a.threads, f / a.threads, r / a.threads, f > 0 ? d / f : 0.0,
          r > 0 ? d / r : 0.0, k + 1 < a.sizes.size() ? "," : "");
    }
    std::printf("  ]\n}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jpeg_serve: %s\n", e.what());
    return 1;
  }
  return 0;
}
