// Fixtures of the JPEG codec tests (test_jpeg*.cpp): synthetic and real images, encoding,
// PSNR and difference statistics, and serve-time tolerances of the crop decoder.
#pragma once

#include <doctest/doctest.h>
#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codec/jpeg_internal.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/transform.h"
#include "test_util.h"

namespace dscache::test {

// The library's names the test files use unqualified: they take them, with the fixtures,
// by `using namespace dscache::test`.
using dscache::CropBox;
using dscache::CropMode;
using dscache::Error;
using dscache::ErrorKind;
using dscache::ImageView;
using dscache::JpegDecodeOptions;
using dscache::JpegScratch;
using dscache::TransformOptions;

// Serve-time tolerance of jpeg_decode_crop (defaults) against jpeg_decode + crop_resize, per
// channel value: docs/FORMAT.md, "Serve-time decode". Keep the two in step.
// Over DCT-scaled crops (those at full scale are exact): the pooled mean, the pooled 99.9th
// percentile, and the mean of any one crop.
constexpr double kMaxMeanAbsDiff = 2.0;
constexpr int kMaxP999AbsDiff = 40;
constexpr double kMaxBoxMeanAbsDiff = 5.0;

struct Image {
  uint32_t h = 0, w = 0, c = 0;
  std::vector<uint8_t> px;
  Image() = default;
  Image(uint32_t h_, uint32_t w_, uint32_t c_) : h(h_), w(w_), c(c_), px(size_t{h_} * w_ * c_) {}
  ImageView view() const { return ImageView{px.data(), h, w, c, 0}; }
};

// A natural-looking test picture: smooth gradients, a textured region, sharp edges, a disc and
// mild noise (deterministic).
inline Image synthetic(uint32_t h, uint32_t w, uint32_t c, uint32_t seed = 1) {
  Image img(h, w, c);
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 2.0);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      const double u = static_cast<double>(x) / w, v = static_cast<double>(y) / h;
      const double tex = 16.0 * std::sin(x * 0.35 + std::sin(y * 0.07) * 3.0) * std::cos(y * 0.2);
      const bool in_disc = (u - 0.6) * (u - 0.6) + (v - 0.4) * (v - 0.4) < 0.05;
      const bool stripe = (x / 9 + y / 23) % 2 == 0 && u < 0.3;
      const double n = noise(rng);
      for (uint32_t ch = 0; ch < c; ++ch) {
        double val = 40.0 + 150.0 * (ch == 0 ? u : ch == 1 ? v : 1.0 - u * v);
        if (v > 0.55) val += tex;
        if (in_disc) val = 220.0 - 60.0 * ch;
        if (stripe) val = 210.0;  // a luminance edge, as most edges in photos are
        val += n;
        img.px[(size_t{y} * w + x) * c + ch] = static_cast<uint8_t>(std::clamp(val, 0.0, 255.0));
      }
    }
  }
  return img;
}

inline std::vector<uint8_t> encode(const Image& img, int quality) {
  std::vector<uint8_t> out;
  dscache::jpeg_encode(img.px.data(), img.h, img.w, img.c, quality, &out);
  return out;
}

inline Image decode(const std::vector<uint8_t>& bytes, uint32_t h, uint32_t w, uint32_t c,
                    JpegScratch* scratch) {
  Image img(h, w, c);
  dscache::jpeg_decode(bytes.data(), bytes.size(), h, w, c, img.px.data(), scratch);
  return img;
}

inline double psnr(const Image& a, const Image& b) {
  REQUIRE(a.px.size() == b.px.size());
  double se = 0;
  for (size_t i = 0; i < a.px.size(); ++i) {
    const double d = static_cast<double>(a.px[i]) - b.px[i];
    se += d * d;
  }
  const double mse = se / static_cast<double>(a.px.size());
  return mse == 0 ? 99.0 : 10.0 * std::log10(255.0 * 255.0 / mse);
}

// The real photographs Debian's mate-backgrounds ships (scripts/setup-deps installs it; empty
// when it is missing, which the photograph test reports as a failure).
inline std::vector<std::string> photo_paths() {
  std::vector<std::string> paths;
  glob_t g{};
  if (::glob("/usr/share/backgrounds/mate/nature/*.jpg", 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  std::sort(paths.begin(), paths.end());
  return paths;
}

// A real photo read with our own decoder, cut to `aspect` (w/h) and reduced so the short side
// is `short_side` (DCT scaling + area resize: jpeg_decode_crop on the whole frame).
inline Image load_photo(const std::string& path, uint32_t short_side, JpegScratch* scratch) {
  const std::string s = dscache::test::read_all(path);
  const auto* data = reinterpret_cast<const uint8_t*>(s.data());
  const dscache::JpegInfo info = dscache::jpeg_info(data, s.size());
  CropBox box{0, 0, info.height, info.width, false};
  uint32_t out_h = short_side, out_w = short_side;
  if (info.width >= info.height) {
    out_w = static_cast<uint32_t>(uint64_t{info.width} * short_side / info.height);
  } else {
    out_h = static_cast<uint32_t>(uint64_t{info.height} * short_side / info.width);
  }
  Image img(out_h, out_w, 3);
  dscache::jpeg_decode_crop(data, s.size(), info.height, info.width, 3, box, out_h, out_w,
                            img.px.data(), scratch);
  return img;
}

// Differences between two equally sized byte images, pooled over many comparisons.
struct DiffStats {
  std::vector<uint64_t> histogram = std::vector<uint64_t>(256, 0);
  uint64_t count = 0, sum = 0;
  void add(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const int d = std::abs(int{a[i]} - int{b[i]});
      ++histogram[d];
      sum += d;
    }
    count += a.size();
  }
  double mean() const { return count ? static_cast<double>(sum) / count : 0.0; }
  int quantile(double q) const {
    const uint64_t target = static_cast<uint64_t>(std::ceil(q * count));
    uint64_t seen = 0;
    for (int d = 0; d < 256; ++d) {
      seen += histogram[d];
      if (seen >= target) return d;
    }
    return 255;
  }
  int max() const {
    for (int d = 255; d >= 0; --d) {
      if (histogram[d]) return d;
    }
    return 0;
  }
};

// jpeg_decode + crop_resize: what jpeg_decode_crop must equal.
inline std::vector<uint8_t> reference_crop(const Image& full, const CropBox& box, uint32_t oh,
                                           uint32_t ow) {
  std::vector<uint8_t> out(size_t{oh} * ow * full.c);
  dscache::crop_resize(full.view(), box, oh, ow, out.data());
  return out;
}

inline std::vector<uint8_t> crop_decode(const std::vector<uint8_t>& bytes, const Image& full,
                                        const CropBox& box, uint32_t oh, uint32_t ow,
                                        JpegScratch* scratch, JpegDecodeOptions options = {}) {
  std::vector<uint8_t> out(size_t{oh} * ow * full.c);
  dscache::jpeg_decode_crop(bytes.data(), bytes.size(), full.h, full.w, full.c, box, oh, ow,
                            out.data(), scratch, options);
  return out;
}

// The crops a serving run draws: RandomResizedCrop to 224 and 64 and center crops, flip on.
struct Recipe {
  CropMode mode;
  uint32_t size;
};
constexpr Recipe kRecipes[] = {
    {CropMode::kRandomResized, 224},
    {CropMode::kRandomResized, 64},
    {CropMode::kCenter, 224},
    {CropMode::kCenter, 64},
};

inline TransformOptions recipe_options(const Recipe& r) {
  TransformOptions o;
  o.crop = r.mode;
  o.height = r.size;
  o.width = r.size;
  o.flip = true;
  return o;
}

// Every outcome of one call on possibly damaged bytes: success or Error(kCorruption).
enum class Outcome { kOk, kCorrupt };

template <typename Fn>
inline Outcome classify(Fn&& fn) {
  try {
    fn();
    return Outcome::kOk;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kCorruption) FAIL("unexpected error kind: " << e.what());
    return Outcome::kCorrupt;
  } catch (const std::exception& e) {
    FAIL("non-dscache exception: " << e.what());
  }
  return Outcome::kCorrupt;
}

}  // namespace dscache::test
