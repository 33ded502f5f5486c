// loader_dump: the C++ Loader's batches written to files, the reference the Python module's
// tests compare dscache.Loader with (same cache, options, seed and epoch).
//
// Usage: loader_dump CACHE OUT SEED EPOCH BATCH SHUFFLE RANK WORLD DROP_LAST WORKERS PREFETCH
//                    CROP H W FLIP CURSOR
//   SHUFFLE none|global|windowed (windowed: block 7, window_blocks 2); CROP none|center|random;
//   CURSOR: restore() to this batch of the epoch instead of start_epoch() when > 0.
// Writes OUT.images (every batch's NHWC bytes, back to back), OUT.labels (int64),
// OUT.indices (uint64) and prints one line per batch: "INDEX SIZE H W C". Exit 1 on an Error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "dscache/cache.h"
#include "dscache/error.h"
#include "dscache/loader.h"

int main(int argc, char** argv) {
  if (argc != 17) {
    std::cerr << "usage: loader_dump CACHE OUT SEED EPOCH BATCH SHUFFLE RANK WORLD DROP_LAST "
                 "WORKERS PREFETCH CROP H W FLIP CURSOR\n";
    return 2;
  }
  auto num = [&](int k) { return std::strtoull(argv[k], nullptr, 10); };
  const std::string out = argv[2], shuffle = argv[6], crop = argv[12];
  try {
    dscache::LoaderOptions o;
    o.batch_size = static_cast<uint32_t>(num(5));
    o.sampler.shuffle = shuffle == "none"       ? dscache::Shuffle::kNone
                        : shuffle == "windowed" ? dscache::Shuffle::kWindowed
                                                : dscache::Shuffle::kGlobal;
    if (o.sampler.shuffle == dscache::Shuffle::kWindowed) {
      o.sampler.block = 7;
      o.sampler.window_blocks = 2;
    }
    o.sampler.rank = static_cast<uint32_t>(num(7));
    o.sampler.world_size = static_cast<uint32_t>(num(8));
    o.drop_last = num(9) != 0;
    o.workers = static_cast<uint32_t>(num(10));
    o.prefetch = static_cast<uint32_t>(num(11));
    o.transform.crop = crop == "center"   ? dscache::CropMode::kCenter
                       : crop == "random" ? dscache::CropMode::kRandomResized
                                          : dscache::CropMode::kNone;
    o.transform.height = static_cast<uint32_t>(num(13));
    o.transform.width = static_cast<uint32_t>(num(14));
    o.transform.flip = num(15) != 0;
    dscache::Loader loader(dscache::Cache::open(argv[1]), o);
    const uint64_t cursor = num(16);
    if (cursor > 0) {
      loader.restore(dscache::LoaderPosition{num(3), num(4), cursor});
    } else {
      loader.start_epoch(num(3), num(4));
    }
    std::ofstream images(out + ".images", std::ios::binary);
    std::ofstream labels(out + ".labels", std::ios::binary);
    std::ofstream indices(out + ".indices", std::ios::binary);
    while (const dscache::Batch* b = loader.next()) {
      const uint64_t bytes = uint64_t{b->size} * b->height * b->width * b->channels;
      images.write(reinterpret_cast<const char*>(b->images), static_cast<std::streamsize>(bytes));
      labels.write(reinterpret_cast<const char*>(b->labels),
                   static_cast<std::streamsize>(sizeof(int64_t) * b->size));
      indices.write(reinterpret_cast<const char*>(b->indices),
                    static_cast<std::streamsize>(sizeof(uint64_t) * b->size));
      std::cout << b->index << ' ' << b->size << ' ' << b->height << ' ' << b->width << ' '
                << b->channels << '\n';
    }
    if (!images || !labels || !indices) {
      std::cerr << "loader_dump: cannot write " << out << ".*\n";
      return 1;
    }
  } catch (const dscache::Error& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
  return 0;
}
