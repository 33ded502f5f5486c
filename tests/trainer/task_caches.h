// Caches with fields for the --task tests (test_tasks.cpp, test_segment.cpp), written with
// libcache's CacheWriter, whose targets a model can learn from the pixels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/loader.h"

namespace trainer_test {

// 12x12x3 images whose channel k has brightness c_k (uniform 0..255, +-20 noise per pixel). The
// fields follow the brightness: a, b, c = int64 (c_k > 128); tags = the same as a uint8 multi-hot
// array [3]; r = 5 + 10 c_0/255 and g = 0.02 c_1 - 3 (float32); id = int64 sample number.
std::shared_ptr<dscache::Cache> brightness_cache(const std::string& dir, uint64_t n, uint64_t seed);

// 16x16x3 images of grey noise (20..70) with one to three rectangles (5..11 px a side): red ones
// are class 1, blue ones class 2 in the uint8 mask field `mask` (0 = background); each rectangle's
// outermost pixels are 255 (ignored), and every 7th sample's mask is all 255, so micro-batches
// label very different numbers of pixels. `named`: the mask names its classes ("background",
// "red", "blue"); otherwise it names none. A second field `id` (int64) holds the sample number.
std::shared_ptr<dscache::Cache> shapes_cache(const std::string& dir, uint64_t n, uint64_t seed,
                                             bool named = true);

// A Loader over `cache` serving `fields`, `batch` samples a batch, no crop.
std::unique_ptr<dscache::Loader> fields_loader(std::shared_ptr<dscache::Cache> cache,
                                               uint32_t batch,
                                               const std::vector<std::string>& fields,
                                               dscache::Shuffle shuffle);

}  // namespace trainer_test
