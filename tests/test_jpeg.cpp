// JPEG codec: encode/decode round trips, grey<->RGB, the crop decoder against decode +
// crop_resize (exact with the fast path off, within docs/FORMAT.md's tolerance with it on), the
// fast path's evidence, and a mutation fuzz of real encoded streams.
#include <doctest/doctest.h>
#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/transform.h"
#include "jpeg_internal.h"
#include "test_util.h"

namespace {

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
Image synthetic(uint32_t h, uint32_t w, uint32_t c, uint32_t seed = 1) {
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

std::vector<uint8_t> encode(const Image& img, int quality) {
  std::vector<uint8_t> out;
  dscache::jpeg_encode(img.px.data(), img.h, img.w, img.c, quality, &out);
  return out;
}

Image decode(const std::vector<uint8_t>& bytes, uint32_t h, uint32_t w, uint32_t c,
             JpegScratch* scratch) {
  Image img(h, w, c);
  dscache::jpeg_decode(bytes.data(), bytes.size(), h, w, c, img.px.data(), scratch);
  return img;
}

double psnr(const Image& a, const Image& b) {
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
std::vector<std::string> photo_paths() {
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
Image load_photo(const std::string& path, uint32_t short_side, JpegScratch* scratch) {
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
std::vector<uint8_t> reference_crop(const Image& full, const CropBox& box, uint32_t oh,
                                    uint32_t ow) {
  std::vector<uint8_t> out(size_t{oh} * ow * full.c);
  dscache::crop_resize(full.view(), box, oh, ow, out.data());
  return out;
}

std::vector<uint8_t> crop_decode(const std::vector<uint8_t>& bytes, const Image& full,
                                 const CropBox& box, uint32_t oh, uint32_t ow, JpegScratch* scratch,
                                 JpegDecodeOptions options = {}) {
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

TransformOptions recipe_options(const Recipe& r) {
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
Outcome classify(Fn&& fn) {
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

}  // namespace

TEST_SUITE("jpeg") {
  TEST_CASE("this build has JPEG support") { CHECK(dscache::jpeg_supported()); }

  TEST_CASE("encode -> decode round trip: sizes, quality, channels, determinism") {
    JpegScratch scratch;
    struct Case {
      uint32_t h, w, c;
      int quality;
      double min_psnr;
    };
    // Odd sizes exercise partial MCUs; 1x1 is the smallest stream there is.
    const Case cases[] = {
        {96, 128, 3, 90, 28.0}, {96, 128, 1, 90, 34.0}, {17, 33, 3, 90, 25.0},
        {17, 33, 1, 90, 30.0},  {1, 1, 3, 90, 30.0},    {1, 1, 1, 90, 40.0},
        {5, 300, 3, 75, 20.0},  {257, 3, 1, 100, 40.0},
    };
    for (const Case& k : cases) {
      CAPTURE(k.h);
      CAPTURE(k.w);
      CAPTURE(k.c);
      const Image img = synthetic(k.h, k.w, k.c);
      const std::vector<uint8_t> bytes = encode(img, k.quality);
      CHECK(bytes == encode(img, k.quality));  // same bytes every time
      REQUIRE(bytes.size() > 4);
      CHECK(bytes[0] == 0xFF);
      CHECK(bytes[1] == 0xD8);
      const dscache::JpegInfo info = dscache::jpeg_info(bytes.data(), bytes.size());
      CHECK(info.height == k.h);
      CHECK(info.width == k.w);
      CHECK(info.channels == k.c);
      const Image back = decode(bytes, k.h, k.w, k.c, &scratch);
      CHECK(psnr(img, back) > k.min_psnr);
      CHECK(back.px == decode(bytes, k.h, k.w, k.c, &scratch).px);  // the scratch is reusable
    }
  }

  TEST_CASE("quality: higher quality, closer image and more bytes") {
    JpegScratch scratch;
    for (uint32_t c : {1u, 3u}) {
      const Image img = synthetic(160, 200, c, 7);
      double last_psnr = 0;
      size_t last_size = 0;
      for (int q : {10, 50, 75, 90, 95}) {
        CAPTURE(q);
        const std::vector<uint8_t> bytes = encode(img, q);
        const double p = psnr(img, decode(bytes, img.h, img.w, c, &scratch));
        CHECK(p > last_psnr);
        CHECK(bytes.size() > last_size);
        last_psnr = p;
        last_size = bytes.size();
      }
      CHECK(last_psnr > 30.0);  // Q95
    }
  }

  TEST_CASE("grey <-> RGB: a stream decodes to either channel count") {
    JpegScratch scratch;
    const Image rgb = synthetic(40, 56, 3, 3);
    const std::vector<uint8_t> colour = encode(rgb, 92);
    const Image as_rgb = decode(colour, 40, 56, 3, &scratch);
    const Image as_grey = decode(colour, 40, 56, 1, &scratch);
    // Grey from a YCbCr stream is its Y plane: the BT.601 luma of the decoded RGB, within
    // chroma upsampling and rounding.
    double err = 0;
    for (size_t i = 0; i < as_grey.px.size(); ++i) {
      const uint8_t* p = &as_rgb.px[i * 3];
      const double y = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
      err += std::abs(y - as_grey.px[i]);
    }
    CHECK(err / as_grey.px.size() < 2.0);

    const Image grey = synthetic(40, 56, 1, 4);
    const std::vector<uint8_t> mono = encode(grey, 92);
    CHECK(dscache::jpeg_info(mono.data(), mono.size()).channels == 1);
    const Image g1 = decode(mono, 40, 56, 1, &scratch);
    const Image g3 = decode(mono, 40, 56, 3, &scratch);
    bool replicated = true;
    for (size_t i = 0; i < g1.px.size(); ++i) {
      for (int ch = 0; ch < 3; ++ch) replicated &= g3.px[i * 3 + ch] == g1.px[i];
    }
    CHECK(replicated);
  }

  TEST_CASE("bad arguments and bad streams are errors of the right kind") {
    JpegScratch scratch;
    const Image img = synthetic(32, 48, 3);
    const std::vector<uint8_t> bytes = encode(img, 90);
    std::vector<uint8_t> out(32 * 48 * 3);
    std::vector<uint8_t> sink;
    for (int q : {0, -5, 101}) {
      CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 32, 48, 3, q, &sink),
                           doctest::Contains("InvalidArgument"), Error);
    }
    CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 32, 48, 2, 90, &sink),
                         doctest::Contains("channels"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 0, 48, 3, 90, &sink),
                         doctest::Contains("InvalidArgument"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 70000, 48, 3, 90, &sink),
                         doctest::Contains("InvalidArgument"), Error);
    // A size mismatch names both sizes.
    CHECK_THROWS_WITH_AS(
        dscache::jpeg_decode(bytes.data(), bytes.size(), 48, 32, 3, out.data(), &scratch),
        doctest::Contains("Corruption: jpeg: stream is 32x48, expected 48x32"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_decode(bytes.data(), 0, 32, 48, 3, out.data(), &scratch),
                         doctest::Contains("Corruption: jpeg: empty stream"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_info(bytes.data(), 0), doctest::Contains("empty"), Error);
    const uint8_t junk[] = {'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g', 0xFF, 0xD9};
    CHECK_THROWS_WITH_AS(dscache::jpeg_info(junk, sizeof junk),
                         doctest::Contains("Corruption: jpeg: Not a JPEG file"), Error);
    // Truncated: one byte short of EOI, and half the stream.
    CHECK_THROWS_WITH_AS(
        dscache::jpeg_decode(bytes.data(), bytes.size() - 1, 32, 48, 3, out.data(), &scratch),
        doctest::Contains("Corruption"), Error);
    std::vector<uint8_t> half(bytes.begin(), bytes.begin() + bytes.size() / 2);
    half.push_back(0xFF);
    half.push_back(0xD9);  // a fake EOI does not hide the missing data
    CHECK_THROWS_WITH_AS(
        dscache::jpeg_decode(half.data(), half.size(), 32, 48, 3, out.data(), &scratch),
        doctest::Contains("Corruption: jpeg: "), Error);
    // Crop arguments: a box outside the image, an empty output.
    const CropBox outside{20, 0, 20, 10, false};
    CHECK_THROWS_WITH_AS(dscache::jpeg_decode_crop(bytes.data(), bytes.size(), 32, 48, 3, outside,
                                                   8, 8, out.data(), &scratch),
                         doctest::Contains("outside"), Error);
    const CropBox whole{0, 0, 32, 48, false};
    CHECK_THROWS_AS(dscache::jpeg_decode_crop(bytes.data(), bytes.size(), 32, 48, 3, whole, 0, 8,
                                              out.data(), &scratch),
                    Error);
    // After all those failures the scratch still decodes.
    CHECK_NOTHROW(
        dscache::jpeg_decode(bytes.data(), bytes.size(), 32, 48, 3, out.data(), &scratch));
    CHECK(psnr(img, Image(decode(bytes, 32, 48, 3, &scratch))) > 26.0);
  }

  TEST_CASE("bytes after the first EOI are Corruption; FF D9 inside an APP segment is not an EOI") {
    JpegScratch scratch;
    const Image img = synthetic(32, 48, 3);
    const std::vector<uint8_t> bytes = encode(img, 90);
    const std::vector<uint8_t> second = encode(synthetic(16, 16, 3, 7), 50);
    std::vector<uint8_t> out(32 * 48 * 3);
    const CropBox box{0, 0, 16, 16, false};
    std::vector<std::vector<uint8_t>> bad;
    bad.push_back(bytes);
    bad.back().insert(bad.back().end(), second.begin(), second.end());  // a second image
    bad.push_back(bytes);
    bad.back().insert(bad.back().end(), {0x00, 0x12, 0xFF, 0xD9});  // junk ending in EOI
    for (const std::vector<uint8_t>& b : bad) {
      CAPTURE(b.size());
      for (int entry = 0; entry < 3; ++entry) {
        CAPTURE(entry);
        try {
          if (entry == 0) dscache::jpeg_decode(b.data(), b.size(), 32, 48, 3, out.data(), &scratch);
          if (entry == 1) {
            dscache::jpeg_decode_crop(b.data(), b.size(), 32, 48, 3, box, 8, 8, out.data(),
                                      &scratch, JpegDecodeOptions{});
          }
          if (entry == 2) dscache::jpeg_info(b.data(), b.size());
          FAIL("accepted a stream with bytes after its EOI");
        } catch (const Error& e) {
          CHECK(e.kind() == ErrorKind::kCorruption);
          CHECK(std::string(e.what()).find("after the end-of-image marker") != std::string::npos);
        }
      }
    }
    // An APP15 segment holding FF D9 (as an EXIF thumbnail would) right after SOI: still one
    // image, which decodes to the same pixels.
    std::vector<uint8_t> app = {bytes[0], bytes[1], 0xFF, 0xEF, 0x00, 0x06, 0xFF, 0xD9, 0xFF, 0xD8};
    app.insert(app.end(), bytes.begin() + 2, bytes.end());
    const Image a = decode(app, 32, 48, 3, &scratch), b = decode(bytes, 32, 48, 3, &scratch);
    CHECK(a.px == b.px);
  }

  TEST_CASE("the DCT scale rule") {
    using dscache::detail::jpeg_scale_num;
    struct Case {
      CropBox box;
      uint32_t oh, ow, m;
    };
    const Case cases[] = {
        {{0, 0, 256, 256, false}, 224, 224, 8},  // less than 2x: full scale
        {{0, 0, 256, 256, false}, 64, 64, 2},    // 256 * 2/8 = 64
        {{0, 0, 255, 256, false}, 64, 64, 3},    // 255 * 2/8 < 64
        {{0, 0, 128, 128, false}, 64, 64, 4},    // exactly 2x
        {{0, 0, 127, 400, false}, 64, 64, 8},    // one axis under 2x
        {{0, 0, 2000, 2000, false}, 64, 64, 1},  // 1/8 still holds 250 >= 64
        {{0, 0, 300, 900, false}, 100, 100, 3},  // the tighter axis decides
    };
    for (const Case& k : cases) {
      CAPTURE(k.box.height);
      CAPTURE(k.box.width);
      CHECK(jpeg_scale_num(k.box, k.oh, k.ow) == k.m);
    }
  }

  TEST_CASE("jpeg_decode_crop with {scale=false, crop=false} is decode + crop_resize, exactly") {
    JpegScratch scratch;
    for (uint32_t c : {3u, 1u}) {
      const Image img = synthetic(256, 341, c, 11);
      const std::vector<uint8_t> bytes = encode(img, 90);
      const Image full = decode(bytes, 256, 341, c, &scratch);
      int n = 0;
      for (const Recipe& r : kRecipes) {
        const TransformOptions o = recipe_options(r);
        for (uint64_t s = 0; s < 25; ++s, ++n) {
          const CropBox box = dscache::choose_crop(o, 256, 341, 5, 0, s);
          CHECK(crop_decode(bytes, full, box, r.size, r.size, &scratch, {false, false}) ==
                reference_crop(full, box, r.size, r.size));
          CHECK_FALSE(dscache::detail::last_decode_stats(scratch).fast);
        }
      }
      CHECK(n == 100);
    }
  }

  TEST_CASE("jpeg_decode_crop with crop only (no scaling) is exact too") {
    // Skipped rows and cropped columns decode to the same pixels (the region keeps one pixel of
    // context around the box), and the taps are crop_resize's: the same bytes.
    JpegScratch scratch;
    const Image img = synthetic(256, 341, 3, 12);
    const std::vector<uint8_t> bytes = encode(img, 90);
    const Image full = decode(bytes, 256, 341, 3, &scratch);
    size_t cropped = 0;
    for (const Recipe& r : kRecipes) {
      const TransformOptions o = recipe_options(r);
      for (uint64_t s = 0; s < 25; ++s) {
        const CropBox box = dscache::choose_crop(o, 256, 341, 6, 0, s);
        CHECK(crop_decode(bytes, full, box, r.size, r.size, &scratch, {false, true}) ==
              reference_crop(full, box, r.size, r.size));
        const auto st = dscache::detail::last_decode_stats(scratch);
        CHECK(st.fast);
        CHECK(st.scale_num == 8);
        if (st.rows < st.image_rows && st.cols < st.image_cols) ++cropped;
      }
    }
    CHECK(cropped > 40);
  }

  TEST_CASE("jpeg_decode_crop (defaults) is within the documented tolerance") {
    JpegScratch scratch;
    // Synthetic pictures of four shapes always, and four real photographs (mate-backgrounds,
    // which setup-deps installs). The counts below hold on the synthetic set alone, so a
    // machine without the photographs still checks every assertion (the photograph test below
    // fails there instead).
    std::vector<Image> images;
    images.push_back(synthetic(256, 341, 3, 21));
    images.push_back(synthetic(300, 240, 3, 22));
    images.push_back(synthetic(256, 256, 3, 23));
    images.push_back(synthetic(180, 420, 3, 24));
    const std::vector<std::string> photos = photo_paths();
    if (photos.empty()) {
      MESSAGE("mate-backgrounds is not installed: tolerance checked on synthetic images only");
    }
    for (size_t i = 0; i < photos.size() && i < 4; ++i) {
      images.push_back(load_photo(photos[i * photos.size() / 4], 256, &scratch));
    }
    DiffStats scaled_diff;
    double worst_box = 0;
    uint64_t scaled = 0, exact = 0, cropped = 0, boxes = 0;
    for (size_t k = 0; k < images.size(); ++k) {
      const Image& img = images[k];
      const std::vector<uint8_t> bytes = encode(img, 90);
      const Image full = decode(bytes, img.h, img.w, 3, &scratch);
      for (const Recipe& r : kRecipes) {
        const TransformOptions o = recipe_options(r);
        const uint64_t per = r.mode == CropMode::kCenter ? 4 : 60;
        for (uint64_t s = 0; s < per; ++s, ++boxes) {
          const CropBox box = dscache::choose_crop(o, img.h, img.w, 9, k, s);
          const std::vector<uint8_t> fast = crop_decode(bytes, full, box, r.size, r.size, &scratch);
          const std::vector<uint8_t> ref = reference_crop(full, box, r.size, r.size);
          const auto st = dscache::detail::last_decode_stats(scratch);
          CHECK(st.fast);
          cropped += st.rows < st.image_rows || st.cols < st.image_cols;
          if (st.scale_num == 8) {  // crop only: exact
            exact += fast == ref;
            continue;
          }
          ++scaled;
          DiffStats one;
          one.add(fast, ref);
          worst_box = std::max(worst_box, one.mean());
          scaled_diff.add(fast, ref);
        }
      }
    }
    MESSAGE("crop decode vs decode + crop_resize: "
            << boxes << " boxes on " << images.size() << " images; " << exact
            << " at full scale, all exact; " << scaled << " DCT-scaled: mean |diff| "
            << scaled_diff.mean() << ", p99.9 " << scaled_diff.quantile(0.999) << ", max "
            << scaled_diff.max() << ", worst box mean " << worst_box << "; cropped " << cropped);
    CHECK(boxes >= 200);
    CHECK(exact + scaled == boxes);
    CHECK(scaled > boxes / 5);  // RandomResizedCrop/center crop to 64 mostly scale
    CHECK(cropped > boxes / 2);
    CHECK(scaled_diff.mean() <= kMaxMeanAbsDiff);
    CHECK(scaled_diff.quantile(0.999) <= kMaxP999AbsDiff);
    CHECK(worst_box <= kMaxBoxMeanAbsDiff);
  }

  TEST_CASE("jpeg_decode_crop: grey output and grey streams take the fast path too") {
    JpegScratch scratch;
    const Image grey = synthetic(256, 300, 1, 31);
    const std::vector<uint8_t> mono = encode(grey, 90);
    const Image rgb = synthetic(256, 300, 3, 32);
    const std::vector<uint8_t> colour = encode(rgb, 90);
    struct Case {
      const std::vector<uint8_t>* bytes;
      uint32_t c;
    };
    for (const Case& k : {Case{&mono, 1}, Case{&mono, 3}, Case{&colour, 1}}) {
      CAPTURE(k.c);
      const Image full = decode(*k.bytes, 256, 300, k.c, &scratch);
      DiffStats d;
      for (uint64_t s = 0; s < 30; ++s) {
        const CropBox box = dscache::choose_crop(recipe_options(kRecipes[1]), 256, 300, 3, 0, s);
        d.add(crop_decode(*k.bytes, full, box, 64, 64, &scratch),
              reference_crop(full, box, 64, 64));
        CHECK(dscache::detail::last_decode_stats(scratch).fast);
      }
      MESSAGE("channels " << k.c << ": mean |diff| " << d.mean() << ", p99.9 "
                          << d.quantile(0.999));
      CHECK(d.mean() <= kMaxMeanAbsDiff);
      CHECK(d.quantile(0.999) <= kMaxP999AbsDiff);
    }
  }

  TEST_CASE("real photographs decode like the synthetic image") {
    const std::vector<std::string> photos = photo_paths();
    // setup-deps installs mate-backgrounds: its absence is a broken setup, not a pass.
    INFO("no photographs in /usr/share/backgrounds/mate/nature: run scripts/setup-deps");
    REQUIRE_FALSE(photos.empty());
    JpegScratch scratch;
    for (size_t i = 0; i < 2 && i < photos.size(); ++i) {
      CAPTURE(photos[i]);
      const std::string s = dscache::test::read_all(photos[i]);
      const auto* data = reinterpret_cast<const uint8_t*>(s.data());
      const dscache::JpegInfo info = dscache::jpeg_info(data, s.size());
      CHECK(info.channels == 3);
      CHECK(info.width >= 1280);
      Image full(info.height, info.width, 3);
      dscache::jpeg_decode(data, s.size(), info.height, info.width, 3, full.px.data(), &scratch);
      // The whole frame at 1/8 of its size through the crop decoder vs the full decode reduced.
      const CropBox box{0, 0, info.height, info.width, false};
      const uint32_t oh = info.height / 8, ow = info.width / 8;
      std::vector<uint8_t> small(size_t{oh} * ow * 3);
      dscache::jpeg_decode_crop(data, s.size(), info.height, info.width, 3, box, oh, ow,
                                small.data(), &scratch);
      CHECK(dscache::detail::last_decode_stats(scratch).scale_num == 1);
      DiffStats d;
      d.add(small, reference_crop(full, box, oh, ow));
      CHECK(d.mean() <= kMaxMeanAbsDiff);
      // Re-encoded at Q90 it round-trips with a high PSNR.
      const Image reduced = load_photo(photos[i], 256, &scratch);
      const std::vector<uint8_t> bytes = encode(reduced, 90);
      CHECK(psnr(reduced, decode(bytes, reduced.h, reduced.w, 3, &scratch)) > 30.0);
    }
  }

  TEST_CASE("fuzz: mutated streams decode or throw Error(kCorruption), truncations always throw") {
    JpegScratch scratch;
    const std::vector<std::string> photos = photo_paths();
    std::vector<std::vector<uint8_t>> bases;
    std::vector<Image> images;
    images.push_back(synthetic(48, 64, 3, 41));
    images.push_back(synthetic(40, 40, 1, 42));
    if (!photos.empty()) images.push_back(load_photo(photos[0], 48, &scratch));
    for (const Image& img : images) bases.push_back(encode(img, 85));

    uint64_t ok = 0, caught = 0, truncations = 0;
    // Runs the three entry points on `b` (meant as an image of `img`'s shape).
    auto run_all = [&](const std::vector<uint8_t>& b, const Image& img) {
      std::vector<uint8_t> out(size_t{img.h} * img.w * 3);
      const CropBox box =
          dscache::choose_crop(recipe_options(kRecipes[1]), img.h, img.w, 1, 0, b.size());
      bool all_ok = true;
      for (int which = 0; which < 4; ++which) {
        const Outcome o = classify([&] {
          switch (which) {
            case 0:
              dscache::jpeg_info(b.data(), b.size());
              break;
            case 1:
              dscache::jpeg_decode(b.data(), b.size(), img.h, img.w, img.c, out.data(), &scratch);
              break;
            case 2:
              dscache::jpeg_decode_crop(b.data(), b.size(), img.h, img.w, 3, box, 16, 16,
                                        out.data(), &scratch);
              break;
            case 3:
              dscache::jpeg_decode_crop(b.data(), b.size(), img.h, img.w, 1, box, 8, 8, out.data(),
                                        &scratch, {false, true});
              break;
          }
        });
        all_ok &= o == Outcome::kOk;
        (o == Outcome::kOk ? ok : caught) += 1;
      }
      return all_ok;
    };

    // Every truncation of each stream (all lengths) is an error in every entry point but
    // jpeg_info, which only reads the header... and checks the EOI: an error there too.
    for (size_t k = 0; k < bases.size(); ++k) {
      for (size_t len = 0; len < bases[k].size(); ++len) {
        const std::vector<uint8_t> t(bases[k].begin(), bases[k].begin() + len);
        ++truncations;
        if (run_all(t, images[k])) FAIL("a truncation to " << len << " bytes decoded as good");
      }
    }
    const uint64_t truncation_calls = ok + caught;
    CHECK(ok == 0);
    CHECK(caught == truncation_calls);

    // Random mutations: bit flips, byte sets, inserted/deleted bytes, bogus markers, truncation.
    std::mt19937_64 rng(0x1F1F);
    const uint8_t markers[] = {0xD8, 0xD9, 0xDA, 0xDB, 0xC0, 0xC2, 0xC4, 0xDD,
                               0xD0, 0xE1, 0xFE, 0xC9, 0xCF, 0x00, 0xFF};
    uint64_t mutated_ok = 0, mutated_caught = 0;
    constexpr int kIterations = 6000;
    for (int iter = 0; iter < kIterations; ++iter) {
      const size_t k = iter % bases.size();
      std::vector<uint8_t> b = bases[k];
      const int mutations = 1 + static_cast<int>(rng() % 3);
      for (int m = 0; m < mutations; ++m) {
        const size_t pos = b.empty() ? 0 : rng() % b.size();
        switch (rng() % 7) {
          case 0:  // flip a bit
            if (!b.empty()) b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
            break;
          case 1:  // set a byte
            if (!b.empty()) b[pos] = static_cast<uint8_t>(rng());
            break;
          case 2:  // insert a byte
            b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<uint8_t>(rng()));
            break;
          case 3:  // delete a byte
            if (!b.empty()) b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos));
            break;
          case 4:  // a bogus marker
            if (b.size() > 1) {
              const size_t p = std::min(pos, b.size() - 2);
              b[p] = 0xFF;
              b[p + 1] = markers[rng() % sizeof markers];
            }
            break;
          case 5:  // a header byte (the first 700 hold the tables and SOF)
            if (!b.empty())
              b[rng() % std::min<size_t>(b.size(), 700)] = static_cast<uint8_t>(rng());
            break;
          case 6:  // truncate, keeping EOI so the damage reaches libjpeg
            if (b.size() > 2) {
              b.resize(pos);
              b.push_back(0xFF);
              b.push_back(0xD9);
            }
            break;
        }
      }
      const uint64_t before_ok = ok;
      run_all(b, images[k]);
      mutated_ok += ok - before_ok;
      mutated_caught += 4 - (ok - before_ok);
    }
    MESSAGE("fuzz: " << truncations << " truncations (" << truncation_calls
                     << " calls, all errors); " << kIterations << " mutated streams: " << mutated_ok
                     << " calls decoded, " << mutated_caught << " caught");
    CHECK(mutated_ok + mutated_caught == 4 * kIterations);
    CHECK(mutated_caught > kIterations);  // the damage is noticed...
    CHECK(mutated_ok > kIterations / 4);  // ...and not everything is rejected blindly
  }
}
