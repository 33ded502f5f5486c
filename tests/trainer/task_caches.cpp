// Caches with fields for the --task tests (task_caches.h).
#include "task_caches.h"

#include <algorithm>
#include <random>
#include <vector>

#include "dscache/cache_writer.h"
#include "dscache/fields.h"

namespace trainer_test {

using dscache::FieldKind;
using dscache::FieldType;

namespace {

dscache::CacheWriterOptions writer_options(uint32_t side, std::vector<dscache::FieldSpec> f) {
  dscache::CacheWriterOptions o;
  o.recipe.height = o.recipe.width = side;
  o.recipe.channels = 3;
  o.recipe.shard_bytes = 20 * side * side * 3;
  o.classes = {"x", "y"};
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  o.force = true;
  o.fields = std::move(f);
  return o;
}

}  // namespace

std::shared_ptr<dscache::Cache> brightness_cache(const std::string& dir, uint64_t n,
                                                 uint64_t seed) {
  std::vector<dscache::FieldSpec> f(7);
  const char* ints[] = {"a", "b", "c"};
  for (int k = 0; k < 3; ++k) f[k].name = ints[k];
  f[3].name = "tags", f[3].kind = FieldKind::kArray, f[3].dtype = FieldType::kUint8;
  f[3].shape = {3};
  f[3].classes = {"red", "green", "blue"};
  f[4].name = "r", f[4].dtype = FieldType::kFloat32;
  f[5].name = "g", f[5].dtype = FieldType::kFloat32;
  f[6].name = "id";
  dscache::CacheWriterOptions o = writer_options(12, f);
  o.source = {"idx", "/test/fixture", "", n, 0};
  auto w = dscache::CacheWriter::open(dir, o);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> bright(0, 255), noise(-20, 20);
  std::vector<uint8_t> img(12 * 12 * 3);
  for (uint64_t i = 0; i < n; ++i) {
    double c[3];
    for (double& v : c) v = bright(rng);
    for (size_t p = 0; p < img.size(); ++p) {
      img[p] = static_cast<uint8_t>(std::clamp(c[p % 3] + noise(rng), 0.0, 255.0));
    }
    int64_t hot[3];
    uint8_t tags[3];
    for (int k = 0; k < 3; ++k) tags[k] = static_cast<uint8_t>(hot[k] = c[k] > 128);
    const float r = static_cast<float>(5 + 10 * c[0] / 255),
                g = static_cast<float>(0.02 * c[1] - 3);
    const int64_t id = static_cast<int64_t>(i);
    const dscache::FieldData v[7] = {{&hot[0], 8}, {&hot[1], 8}, {&hot[2], 8}, {tags, 3},
                                     {&r, 4},      {&g, 4},      {&id, 8}};
    w->append(img.data(), 12, 12, static_cast<int64_t>(i % 2), "s/" + std::to_string(i), nullptr,
              v);
  }
  w->publish();
  return dscache::Cache::open(dir);
}

std::shared_ptr<dscache::Cache> shapes_cache(const std::string& dir, uint64_t n, uint64_t seed,
                                             bool named) {
  constexpr int kSide = 16;
  std::vector<dscache::FieldSpec> f(2);
  f[0].name = "mask", f[0].kind = FieldKind::kMask, f[0].dtype = FieldType::kUint8;
  if (named) f[0].classes = {"background", "red", "blue"};
  f[1].name = "id";
  dscache::CacheWriterOptions o = writer_options(kSide, f);
  o.source = {"idx", "/test/shapes", "", n, 0};
  auto w = dscache::CacheWriter::open(dir, o);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grey(20, 70), jitter(-20, 20), side(5, 11), count(1, 3),
      cls(1, 2);
  std::vector<uint8_t> img(kSide * kSide * 3), mask(kSide * kSide);
  for (uint64_t i = 0; i < n; ++i) {
    for (uint8_t& v : img) v = static_cast<uint8_t>(grey(rng));
    std::fill(mask.begin(), mask.end(), 0);
    for (int r = count(rng); r > 0; --r) {
      const int k = cls(rng), h = side(rng), wd = side(rng);
      const int top = std::uniform_int_distribution<int>(0, kSide - h)(rng);
      const int left = std::uniform_int_distribution<int>(0, kSide - wd)(rng);
      for (int y = top; y < top + h; ++y) {
        for (int x = left; x < left + wd; ++x) {
          uint8_t* px = &img[(y * kSide + x) * 3];
          px[0] = static_cast<uint8_t>(k == 1 ? 200 + jitter(rng) : 40 + jitter(rng));
          px[1] = static_cast<uint8_t>(40 + jitter(rng));
          px[2] = static_cast<uint8_t>(k == 2 ? 200 + jitter(rng) : 40 + jitter(rng));
          const bool edge = y == top || y == top + h - 1 || x == left || x == left + wd - 1;
          mask[y * kSide + x] = static_cast<uint8_t>(edge ? 255 : k);
        }
      }
    }
    if (i % 7 == 3) std::fill(mask.begin(), mask.end(), 255);
    const int64_t id = static_cast<int64_t>(i);
    const dscache::FieldData v[2] = {{mask.data(), mask.size()}, {&id, 8}};
    w->append(img.data(), kSide, kSide, static_cast<int64_t>(i % 2), "s/" + std::to_string(i),
              nullptr, v);
  }
  w->publish();
  return dscache::Cache::open(dir);
}

std::unique_ptr<dscache::Loader> fields_loader(std::shared_ptr<dscache::Cache> cache,
                                               uint32_t batch,
                                               const std::vector<std::string>& fields,
                                               dscache::Shuffle shuffle) {
  dscache::LoaderOptions lo;
  lo.batch_size = batch;
  lo.sampler.shuffle = shuffle;
  lo.fields = fields;
  return std::make_unique<dscache::Loader>(std::move(cache), lo);
}

}  // namespace trainer_test
