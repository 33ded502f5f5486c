// fields_serve: what serving a sample's fields costs. Writes two caches of the same images -- one
// with no fields, one with a segmentation mask (uint8, the image's size), boxes and their labels
// -- and serves both through the Loader with the same transform, alternating rounds, best of
// each. Prints one JSON line per transform: samples/s of each cache and the ratio fields/plain
// (issue 19's goal: >= 0.7 with image + mask + boxes).
//
// Usage: fields_serve DIR [SAMPLES] [SIDE] [ROUNDS] [WORKERS]
//   DIR is created and filled (two caches); defaults 4000 samples of 160x160, 3 rounds, 2 workers.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "dscache/cache.h"
#include "dscache/cache_writer.h"
#include "dscache/error.h"
#include "dscache/loader.h"

namespace {

using dscache::FieldKind;
using dscache::FieldSpec;
using dscache::FieldType;

std::vector<FieldSpec> seg_det_fields() {
  std::vector<FieldSpec> f(3);
  f[0].name = "mask", f[0].kind = FieldKind::kMask, f[0].dtype = FieldType::kUint8;
  f[1].name = "boxes", f[1].kind = FieldKind::kBoxes, f[1].dtype = FieldType::kFloat32;
  f[1].shape = {4};
  f[2].name = "box_labels", f[2].kind = FieldKind::kRows, f[2].dtype = FieldType::kInt64;
  f[2].rows_of = "boxes";
  return f;
}

// Sample i: noise-free stripes plus 1-4 rectangles, each a box, a mask class and a label.
void write_cache(const std::string& dir, uint64_t n, uint32_t side, bool with_fields) {
  dscache::CacheWriterOptions o;
  o.recipe.height = o.recipe.width = side;
  o.recipe.channels = 3;
  o.recipe.shard_bytes = uint64_t{1} << 28;
  o.classes = {"a", "b", "c"};
  o.force = true;
  if (with_fields) o.fields = seg_det_fields();
  auto w = dscache::CacheWriter::open(dir, o);
  std::vector<uint8_t> px(size_t{side} * side * 3), mask(size_t{side} * side);
  std::vector<float> boxes;
  std::vector<int64_t> labels;
  for (uint64_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < px.size(); ++p) px[p] = uint8_t((p / 3 + i) % 251);
    std::fill(mask.begin(), mask.end(), 0);
    boxes.clear();
    labels.clear();
    for (uint32_t r = 0; r < 1 + i % 4; ++r) {
      const uint32_t x1 = (37 * (i + r)) % (side / 2), y1 = (53 * (i + 3 * r)) % (side / 2);
      const uint32_t x2 = x1 + side / 4 + r, y2 = y1 + side / 5 + r;
      for (uint32_t y = y1; y < y2; ++y) {
        for (uint32_t x = x1; x < x2; ++x) mask[size_t{y} * side + x] = uint8_t(1 + r % 3);
      }
      boxes.insert(boxes.end(), {float(x1), float(y1), float(x2), float(y2)});
      labels.push_back(r % 3);
    }
    const dscache::FieldData v[3] = {{mask.data(), mask.size()},
                                     {boxes.data(), boxes.size() * sizeof(float)},
                                     {labels.data(), labels.size() * sizeof(int64_t)}};
    w->append(px.data(), side, side, int64_t(i % 3), "s" + std::to_string(i), nullptr,
              with_fields ? v : nullptr);
  }
  w->publish();
}

double serve(const std::shared_ptr<dscache::Cache>& cache, const dscache::LoaderOptions& o,
             uint64_t epoch) {
  dscache::Loader loader(cache, o);
  const auto t0 = std::chrono::steady_clock::now();
  loader.start_epoch(1, epoch);
  uint64_t samples = 0, sink = 0;
  while (const dscache::Batch* b = loader.next()) {
    samples += b->size;
    sink += b->images[0];
    for (const auto& f : b->fields) sink += f.bytes;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink == 42) std::cerr << "";  // keep the reads
  return double(samples) / s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fields_serve DIR [SAMPLES] [SIDE] [ROUNDS] [WORKERS]\n";
    return 2;
  }
  auto arg = [&](int k, uint64_t dflt) {
    return argc > k ? std::strtoull(argv[k], nullptr, 10) : dflt;
  };
  const std::string dir = argv[1];
  const uint64_t n = arg(2, 4000), rounds = arg(4, 3);
  const auto side = static_cast<uint32_t>(arg(3, 160));
  try {
    write_cache(dir + "/plain", n, side, false);
    write_cache(dir + "/fields", n, side, true);
    auto plain = dscache::Cache::open(dir + "/plain");
    auto fields = dscache::Cache::open(dir + "/fields");
    struct Row {
      const char* name;
      dscache::CropMode crop;
      uint32_t out;
      bool flip;
    };
    const Row rows[] = {{"as stored (crop none)", dscache::CropMode::kNone, 0, false},
                        {"random_resized 128 + flip", dscache::CropMode::kRandomResized, 128, true},
                        {"center 128", dscache::CropMode::kCenter, 128, false}};
    for (const Row& r : rows) {
      dscache::LoaderOptions o;
      o.batch_size = 128;
      o.workers = static_cast<uint32_t>(arg(5, 2));
      o.transform.crop = r.crop;
      o.transform.height = o.transform.width = r.out;
      o.transform.flip = r.flip;
      double best_plain = 0, best_fields = 0;
      for (uint64_t k = 0; k < rounds; ++k) {  // alternating, so drift hits both alike
        best_plain = std::max(best_plain, serve(plain, o, k));
        best_fields = std::max(best_fields, serve(fields, o, k));
      }
      std::cout << "{\"transform\": \"" << r.name << "\", \"samples\": " << n
                << ", \"side\": " << side << ", \"plain_samples_per_s\": " << uint64_t(best_plain)
                << ", \"fields_samples_per_s\": " << uint64_t(best_fields)
                << ", \"ratio\": " << best_fields / best_plain << "}\n";
    }
  } catch (const dscache::Error& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
  return 0;
}
