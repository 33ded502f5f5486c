// A complete program against the installed library: open a cache, train-style epochs of
// shuffled batches. Build it with:
//   c++ -std=c++17 example.cpp $(pkg-config --cflags --libs dscache) -o example
#include <dscache/cache.h>
#include <dscache/error.h>
#include <dscache/loader.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CACHE\n", argv[0]);
    return 2;
  }
  try {
    // Validates every file against the manifest, then memory-maps the shards.
    std::shared_ptr<dscache::Cache> cache = dscache::Cache::open(argv[1]);

    dscache::LoaderOptions options;
    options.batch_size = 32;
    options.sampler.shuffle = dscache::Shuffle::kGlobal;
    options.workers = 2;
    dscache::Loader loader(cache, options);

    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(/*seed=*/42, epoch);
      uint64_t samples = 0, label_sum = 0;
      while (const dscache::Batch* batch = loader.next()) {
        // batch->images: batch->size x H x W x C uint8 (NHWC); batch->labels: int64.
        for (uint32_t i = 0; i < batch->size; ++i) label_sum += batch->labels[i];
        samples += batch->size;
      }
      std::printf("epoch %llu: %llu samples, label sum %llu\n",
                  static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(samples),
                  static_cast<unsigned long long>(label_sum));
    }
    return 0;
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
