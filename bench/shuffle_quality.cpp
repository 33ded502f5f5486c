// How well a shuffle mixes a cache, measured on the orders the Loader really uses (epoch_order),
// not on its speed: for each mode, the mean and minimum number of distinct classes per batch
// and how far samples move from their storage position. A class-sorted cache (an image folder
// built in source order) read with a windowed shuffle keeps few classes per batch; a cache
// built with --shuffle does not.
//
// Usage: shuffle_quality CACHE [--batch B] [--block N] [--window-blocks W] [--epochs E]
//                        [--seed S]
// --block: samples per storage block for the windowed mode (default: the cache's
// locality_block(), i.e. its largest shard); --window-blocks: blocks shuffled together
// (default 4). Prints one JSON object: the cache's count and classes, then per mode ("none",
// "global", "windowed"): classes_per_batch_mean/min, displacement percentiles p10/p50/p90 as
// fractions of the cache (|position in the epoch - storage index| / count), and, for the
// windowed mode, block and window_blocks. Averages over E epochs (default 3).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/sampler.h"

namespace {

struct Args {
  std::string cache;
  uint64_t batch = 256;
  uint64_t block = 0;
  uint64_t window_blocks = 4;
  uint64_t epochs = 3;
  uint64_t seed = 0;
};

uint64_t number(const char* flag, const char* v) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*v == '\0' || *end != '\0' || *v == '-') {
    std::fprintf(stderr, "shuffle_quality: %s '%s': expected a non-negative integer\n", flag, v);
    std::exit(2);
  }
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const bool has_value = i + 1 < argc;
    if (k == "--batch" && has_value) {
      a.batch = number("--batch", argv[++i]);
    } else if (k == "--block" && has_value) {
      a.block = number("--block", argv[++i]);
    } else if (k == "--window-blocks" && has_value) {
      a.window_blocks = number("--window-blocks", argv[++i]);
    } else if (k == "--epochs" && has_value) {
      a.epochs = number("--epochs", argv[++i]);
    } else if (k == "--seed" && has_value) {
      a.seed = number("--seed", argv[++i]);
    } else if (a.cache.empty() && k.rfind("--", 0) != 0) {
      a.cache = k;
    } else {
      std::fprintf(stderr, "shuffle_quality: unexpected argument '%s'\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.cache.empty() || a.batch == 0 || a.epochs == 0 || a.window_blocks == 0) {
    std::fprintf(stderr,
                 "usage: shuffle_quality CACHE [--batch B>0] [--block N] [--window-blocks W>0] "
                 "[--epochs E>0] [--seed S]\n");
    std::exit(2);
  }
  return a;
}

struct Quality {
  double classes_mean = 0;
  uint64_t classes_min = UINT64_MAX;
  double p10 = 0, p50 = 0, p90 = 0;
};

Quality measure(const dscache::Cache& c, const dscache::SamplerOptions& so, const Args& a,
                size_t nclasses) {
  const uint64_t n = c.size();
  Quality q;
  uint64_t batches = 0;
  std::vector<double> disp;
  std::vector<uint64_t> seen(nclasses, UINT64_MAX);
  for (uint64_t e = 0; e < a.epochs; ++e) {
    const std::vector<uint64_t> order = dscache::epoch_order(n, so, a.seed, e);
    for (uint64_t b = 0; b * a.batch < order.size(); ++b) {
      const uint64_t stamp = e * order.size() + b;  // marks a class as seen in this batch
      uint64_t distinct = 0;
      for (uint64_t k = b * a.batch; k < std::min<uint64_t>(order.size(), (b + 1) * a.batch); ++k) {
        const auto label = static_cast<size_t>(c.label(order[k]));
        if (seen[label] != stamp) {
          seen[label] = stamp;
          ++distinct;
        }
      }
      q.classes_mean += static_cast<double>(distinct);
      q.classes_min = std::min(q.classes_min, distinct);
      ++batches;
    }
    for (uint64_t k = 0; k < order.size(); ++k) {
      const double d = order[k] > k ? double(order[k] - k) : double(k - order[k]);
      disp.push_back(d / static_cast<double>(n));
    }
  }
  q.classes_mean /= static_cast<double>(batches);
  std::sort(disp.begin(), disp.end());
  auto pct = [&](double p) { return disp[static_cast<size_t>(p * double(disp.size() - 1))]; };
  q.p10 = pct(0.1);
  q.p50 = pct(0.5);
  q.p90 = pct(0.9);
  return q;
}

void print(const char* name, const Quality& q, bool last, const std::string& extra) {
  std::printf(
      "  \"%s\": {\"classes_per_batch_mean\": %.3f, \"classes_per_batch_min\": %llu, "
      "\"displacement_p10\": %.4f, \"displacement_p50\": %.4f, \"displacement_p90\": %.4f%s}%s\n",
      name, q.classes_mean, static_cast<unsigned long long>(q.classes_min), q.p10, q.p50, q.p90,
      extra.c_str(), last ? "" : ",");
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    const auto cache = dscache::Cache::open(a.cache);
    const auto& m = cache->manifest();
    if (m.classes.empty() || cache->size() == 0) {
      std::fprintf(stderr, "shuffle_quality: %s: needs a labelled, non-empty cache\n",
                   a.cache.c_str());
      return 1;
    }
    dscache::SamplerOptions none, global, windowed;
    none.shuffle = dscache::Shuffle::kNone;
    global.shuffle = dscache::Shuffle::kGlobal;
    windowed.shuffle = dscache::Shuffle::kWindowed;
    windowed.block = a.block ? a.block : cache->locality_block();
    windowed.window_blocks = a.window_blocks;
    std::printf(
        "{\n  \"cache\": \"%s\", \"count\": %llu, \"classes\": %zu, \"batch\": %llu, "
        "\"epochs\": %llu, \"build_shuffled\": %s,\n",
        a.cache.c_str(), static_cast<unsigned long long>(cache->size()), m.classes.size(),
        static_cast<unsigned long long>(a.batch), static_cast<unsigned long long>(a.epochs),
        m.recipe.shuffled ? "true" : "false");
    print("none", measure(*cache, none, a, m.classes.size()), false, "");
    print("global", measure(*cache, global, a, m.classes.size()), false, "");
    const std::string extra = ", \"block\": " + std::to_string(windowed.block) +
                              ", \"window_blocks\": " + std::to_string(windowed.window_blocks);
    print("windowed", measure(*cache, windowed, a, m.classes.size()), true, extra);
    std::printf("}\n");
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "shuffle_quality: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shuffle_quality: %s\n", e.what());
    return 1;
  }
  return 0;
}
