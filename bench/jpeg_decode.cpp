// Serve-time JPEG decode throughput: full jpeg_decode + crop_resize against jpeg_decode_crop
// (DCT scaling + cropped/skipped decode) on real photographs, RandomResizedCrop to 224 and 64,
// 1 and 2 threads, plus the pixel difference between the two.
//
// Images: random regions of the photographs in mate-backgrounds (/usr/share/backgrounds/mate/
// nature/*.jpg), reduced with our own decoder so the short side is 256 (aspect 3:4..4:3) and
// encoded with jpeg_encode at Q90, as `dscache build --codec jpeg` stores them.
//
// Usage: jpeg_decode [--images N] [--epochs E] [--sources GLOB]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/transform.h"
#include "photo_sources.h"

namespace {

struct Encoded {
  uint32_t h, w;
  std::vector<uint8_t> bytes;
};

std::vector<Encoded> make_images(const std::vector<std::string>& sources, size_t count) {
  std::vector<Encoded> images;
  dscache::JpegScratch scratch;
  dscache::TransformOptions region;
  region.crop = dscache::CropMode::kRandomResized;
  region.height = region.width = 256;
  region.scale_min = 0.25;
  const Photos photos = load_photos("jpeg_decode", sources);
  const std::vector<std::vector<uint8_t>>& files = photos.files;
  const std::vector<dscache::JpegInfo>& infos = photos.infos;
  for (size_t i = 0; i < count; ++i) {
    const size_t k = i % files.size();
    const dscache::JpegInfo& info = infos[k];
    const dscache::CropBox box = dscache::choose_crop(region, info.height, info.width, 0, 0, i);
    uint32_t oh = 256, ow = 256;
    if (box.width >= box.height) {
      ow = static_cast<uint32_t>(uint64_t{box.width} * 256 / box.height);
    } else {
      oh = static_cast<uint32_t>(uint64_t{box.height} * 256 / box.width);
    }
    std::vector<uint8_t> px(size_t{oh} * ow * 3);
    dscache::jpeg_decode_crop(files[k].data(), files[k].size(), info.height, info.width, 3, box, oh,
                              ow, px.data(), &scratch);
    Encoded e{oh, ow, {}};
    dscache::jpeg_encode(px.data(), oh, ow, 3, 90, &e.bytes);
    images.push_back(std::move(e));
  }
  return images;
}

// Images per second of `threads` threads decoding every image `epochs` times (each thread a
// contiguous share), with crops RandomResizedCrop(size).
double run(const std::vector<Encoded>& images, uint32_t size, bool fast, int threads, int epochs) {
  dscache::TransformOptions o;
  o.crop = dscache::CropMode::kRandomResized;
  o.height = o.width = size;
  o.flip = true;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      dscache::JpegScratch scratch;
      std::vector<uint8_t> full, out(size_t{size} * size * 3);
      const size_t lo = images.size() * t / threads, hi = images.size() * (t + 1) / threads;
      for (int e = 0; e < epochs; ++e) {
        for (size_t i = lo; i < hi; ++i) {
          const Encoded& im = images[i];
          const dscache::CropBox box = dscache::choose_crop(o, im.h, im.w, 1, e, i);
          if (fast) {
            dscache::jpeg_decode_crop(im.bytes.data(), im.bytes.size(), im.h, im.w, 3, box, size,
                                      size, out.data(), &scratch);
          } else {
            full.resize(size_t{im.h} * im.w * 3);
            dscache::jpeg_decode(im.bytes.data(), im.bytes.size(), im.h, im.w, 3, full.data(),
                                 &scratch);
            dscache::crop_resize(dscache::ImageView{full.data(), im.h, im.w, 3, 0}, box, size, size,
                                 out.data());
          }
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(images.size()) * epochs / s;
}

// Mean and max |fast - reference| per channel value, and the 99.9th percentile.
void difference(const std::vector<Encoded>& images, uint32_t size) {
  dscache::TransformOptions o;
  o.crop = dscache::CropMode::kRandomResized;
  o.height = o.width = size;
  o.flip = true;
  dscache::JpegScratch scratch;
  std::vector<uint64_t> hist(256, 0);
  uint64_t sum = 0, n = 0;
  std::vector<uint8_t> full, a(size_t{size} * size * 3), b(a.size());
  for (size_t i = 0; i < images.size(); ++i) {
    const Encoded& im = images[i];
    const dscache::CropBox box = dscache::choose_crop(o, im.h, im.w, 1, 0, i);
    dscache::jpeg_decode_crop(im.bytes.data(), im.bytes.size(), im.h, im.w, 3, box, size, size,
                              a.data(), &scratch);
    full.resize(size_t{im.h} * im.w * 3);
    dscache::jpeg_decode(im.bytes.data(), im.bytes.size(), im.h, im.w, 3, full.data(), &scratch);
    dscache::crop_resize(dscache::ImageView{full.data(), im.h, im.w, 3, 0}, box, size, size,
                         b.data());
    for (size_t k = 0; k < a.size(); ++k) {
      const int d = std::abs(int{a[k]} - int{b[k]});
      ++hist[d];
      sum += d;
    }
    n += a.size();
  }
  int max = 0, p999 = 0;
  uint64_t seen = 0;
  for (int d = 0; d < 256; ++d) {
    if (hist[d]) max = d;
    if (seen < std::ceil(0.999 * n)) p999 = d;
    seen += hist[d];
  }
  std::printf("  difference at %u: mean |diff| %.3f, p99.9 %d, max %d (per channel value)\n", size,
              static_cast<double>(sum) / n, p999, max);
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = 240;
  int epochs = 3;
  std::string pattern = "/usr/share/backgrounds/mate/nature/*.jpg";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--images" && i + 1 < argc) {
      count = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--epochs" && i + 1 < argc) {
      epochs = std::atoi(argv[++i]);
    } else if (a == "--sources" && i + 1 < argc) {
      pattern = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--images N] [--epochs E] [--sources GLOB]\n", argv[0]);
      return 2;
    }
  }
  if (!dscache::jpeg_supported()) {
    std::fprintf(stderr, "jpeg_decode: this libcache has no JPEG support\n");
    return 77;
  }
  const std::vector<std::string> sources = photo_sources("jpeg_decode", pattern);
  if (sources.empty()) return 1;
  try {
    const std::vector<Encoded> images = make_images(sources, count);
    size_t bytes = 0;
    for (const Encoded& e : images) bytes += e.bytes.size();
    std::printf("%zu images from %zu photographs, short side 256, Q90, mean %.1f KiB; %d epochs\n",
                images.size(), sources.size(), bytes / 1024.0 / images.size(), epochs);
    for (uint32_t size : {224u, 64u}) {
      std::printf("RandomResizedCrop(%u), flip:\n", size);
      for (int threads : {1, 2}) {
        run(images, size, true, threads, 1);  // warm up
        const double full = run(images, size, false, threads, epochs);
        const double fast = run(images, size, true, threads, epochs);
        std::printf(
            "  %d thread%s: full decode + crop_resize %8.0f img/s, jpeg_decode_crop %8.0f "
            "img/s, ratio %.2fx\n",
            threads, threads > 1 ? "s" : " ", full, fast, fast / full);
      }
      difference(images, size);
    }
  } catch (const dscache::Error& e) {
    std::fprintf(stderr, "jpeg_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
