// Transform: crop choice (none, center, random-resized, flip) and the OpenCV-free resize.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dscache/error.h"
#include "dscache/transform.h"
#include "test_util.h"

namespace {

using dscache::choose_crop;
using dscache::crop_resize;
using dscache::CropBox;
using dscache::CropMode;
using dscache::Error;
using dscache::ErrorKind;
using dscache::ImageView;
using dscache::Layout;
using dscache::TransformOptions;

// An HWC image owned by the test.
struct Image {
  uint32_t h = 0, w = 0, c = 1;
  std::vector<uint8_t> px;
  Image(uint32_t h_, uint32_t w_, uint32_t c_, uint8_t fill = 0)
      : h(h_), w(w_), c(c_), px(size_t{h_} * w_ * c_, fill) {}
  uint8_t& at(uint32_t y, uint32_t x, uint32_t ch = 0) { return px[(size_t{y} * w + x) * c + ch]; }
  uint8_t at(uint32_t y, uint32_t x, uint32_t ch = 0) const {
    return px[(size_t{y} * w + x) * c + ch];
  }
  ImageView view() const { return ImageView{px.data(), h, w, c, 0}; }
};

Image resize(const Image& src, const CropBox& box, uint32_t out_h, uint32_t out_w) {
  Image out(out_h, out_w, src.c, 0xAB);
  crop_resize(src.view(), box, out_h, out_w, out.px.data());
  return out;
}

CropBox whole(const Image& img, bool flip = false) {
  CropBox b;
  b.height = img.h;
  b.width = img.w;
  b.flip = flip;
  return b;
}

Image from_rows(const std::vector<std::vector<int>>& rows) {
  Image img(static_cast<uint32_t>(rows.size()), static_cast<uint32_t>(rows[0].size()), 1);
  for (uint32_t y = 0; y < img.h; ++y) {
    for (uint32_t x = 0; x < img.w; ++x) img.at(y, x) = static_cast<uint8_t>(rows[y][x]);
  }
  return img;
}

std::vector<int> pixels(const Image& img) { return std::vector<int>(img.px.begin(), img.px.end()); }

TransformOptions crop_options(CropMode mode, uint32_t h, uint32_t w, bool flip = false) {
  TransformOptions o;
  o.crop = mode;
  o.height = h;
  o.width = w;
  o.flip = flip;
  return o;
}

std::string validate_message(const TransformOptions& o, Layout layout) {
  return dscache::test::invalid_argument_message([&] { dscache::validate(o, layout); });
}

}  // namespace

TEST_SUITE("transform") {
  TEST_CASE("validate accepts good options and names the bad field") {
    struct Case {
      TransformOptions options;
      Layout layout;
      const char* field;  // expected at the start of the reason; "" = accepted
    };
    auto rrc = [](double smin, double smax, double rmin, double rmax) {
      TransformOptions o = crop_options(CropMode::kRandomResized, 32, 32);
      o.scale_min = smin;
      o.scale_max = smax;
      o.ratio_min = rmin;
      o.ratio_max = rmax;
      return o;
    };
    const Case cases[] = {
        {TransformOptions{}, Layout::kFixed, ""},
        {crop_options(CropMode::kNone, 0, 0, true), Layout::kFixed, ""},
        {crop_options(CropMode::kCenter, 24, 32), Layout::kFixed, ""},
        {crop_options(CropMode::kCenter, 0, 0), Layout::kFixed, ""},
        {crop_options(CropMode::kCenter, 24, 32), Layout::kRagged, ""},
        {rrc(0.08, 1.0, 0.75, 4.0 / 3), Layout::kRagged, ""},
        {rrc(1.0, 1.0, 1.0, 1.0), Layout::kFixed, ""},
        {TransformOptions{}, Layout::kRagged, "transform.crop none"},
        {crop_options(CropMode::kCenter, 0, 32), Layout::kRagged, "transform.height"},
        {crop_options(CropMode::kCenter, 32, 0), Layout::kRagged, "transform.width"},
        {crop_options(CropMode::kCenter, 32, 0), Layout::kFixed, "transform.height and"},
        {rrc(0.0, 1.0, 0.75, 1.33), Layout::kFixed, "transform.scale_min must be > 0"},
        {rrc(0.5, 0.4, 0.75, 1.33), Layout::kFixed, "transform.scale_min must be <="},
        {rrc(0.5, 1.5, 0.75, 1.33), Layout::kFixed, "transform.scale_max must be <= 1"},
        {rrc(0.5, 1.0, 0.0, 1.33), Layout::kFixed, "transform.ratio_min must be > 0"},
        {rrc(0.5, 1.0, -1.0, 1.33), Layout::kFixed, "transform.ratio_min must be > 0"},
        {rrc(0.5, 1.0, 1.5, 1.33), Layout::kFixed, "transform.ratio_min must be <="},
        {rrc(NAN, 1.0, 0.75, 1.33), Layout::kFixed, "transform.scale_min"},
        {rrc(0.5, 1.0, 0.75, INFINITY), Layout::kFixed, "transform.ratio_max"},
    };
    for (const Case& c : cases) {
      const std::string msg = validate_message(c.options, c.layout);
      CAPTURE(msg);
      if (*c.field == '\0') {
        CHECK(msg.empty());
      } else {
        CHECK(msg.rfind(c.field, 0) == 0);
      }
    }
  }

  TEST_CASE("kNone is the whole image") {
    for (auto [h, w] : {std::pair<uint32_t, uint32_t>{1, 1}, {28, 28}, {10, 37}}) {
      const CropBox b = choose_crop(TransformOptions{}, h, w, 1, 2, 3);
      CHECK(b.y == 0);
      CHECK(b.x == 0);
      CHECK(b.height == h);
      CHECK(b.width == w);
      CHECK_FALSE(b.flip);
    }
  }

  TEST_CASE("kCenter geometry: the largest centred box with the output's aspect ratio") {
    struct Case {
      uint32_t src_h, src_w, out_h, out_w;
      uint32_t y, x, h, w;
    };
    const Case cases[] = {
        {100, 200, 50, 50, 0, 50, 100, 100},     // wide source: full height, centre columns
        {200, 100, 50, 50, 50, 0, 100, 100},     // tall source: full width, centre rows
        {375, 500, 224, 224, 0, 62, 375, 375},   // ImageNet-like: (500 - 375) / 2 = 62
        {100, 100, 50, 100, 25, 0, 50, 100},     // output twice as wide as tall
        {480, 640, 100, 300, 133, 0, 213, 640},  // 640 * 100 / 300 = 213.3 rows
        {101, 50, 1, 1, 25, 0, 50, 50},          // odd remainder: offset rounds down
        {10, 10, 3, 3, 0, 0, 10, 10},            // same aspect: everything
        {7, 10, 7, 10, 0, 0, 7, 10},
        {7, 10, 0, 0, 0, 0, 7, 10},  // 0 = stored size: everything
        {1, 1000, 8, 8, 0, 499, 1, 1},
    };
    for (const Case& c : cases) {
      CAPTURE(c.src_h);
      CAPTURE(c.src_w);
      CAPTURE(c.out_h);
      CAPTURE(c.out_w);
      const CropBox b =
          choose_crop(crop_options(CropMode::kCenter, c.out_h, c.out_w), c.src_h, c.src_w, 0, 0, 0);
      CHECK(b.y == c.y);
      CHECK(b.x == c.x);
      CHECK(b.height == c.h);
      CHECK(b.width == c.w);
    }
  }

  TEST_CASE("choose_crop is a pure function of (options, size, seed, epoch, sample)") {
    const TransformOptions o = crop_options(CropMode::kRandomResized, 32, 32, true);
    auto key = [](const CropBox& b) {
      return std::make_tuple(b.y, b.x, b.height, b.width, b.flip);
    };
    std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, bool>> distinct;
    for (uint64_t s = 0; s < 50; ++s) {
      const CropBox a = choose_crop(o, 300, 400, 7, 1, s);
      CHECK(key(a) == key(choose_crop(o, 300, 400, 7, 1, s)));
      distinct.insert(key(a));
    }
    CHECK(distinct.size() > 40);
    // Seed and epoch matter.
    int seed_differs = 0, epoch_differs = 0;
    for (uint64_t s = 0; s < 20; ++s) {
      const auto a = key(choose_crop(o, 300, 400, 7, 1, s));
      seed_differs += a != key(choose_crop(o, 300, 400, 8, 1, s));
      epoch_differs += a != key(choose_crop(o, 300, 400, 7, 2, s));
    }
    CHECK(seed_differs > 15);
    CHECK(epoch_differs > 15);
  }

  TEST_CASE("kRandomResized: inside the source, area and aspect within bounds") {
    // fallback_h/fallback_w: torchvision's fallback when no attempt fits (the whole image cut to
    // the nearest allowed aspect ratio, centred). `always_fallback`: no crop of the allowed
    // aspect can reach scale_min 0.5 there, so every sample must take it.
    struct Source {
      uint32_t h, w, fallback_h, fallback_w;
      bool always_fallback;  // with scale_min 0.5
    };
    const Source sources[] = {{300, 400, 300, 400, false},
                              {224, 224, 224, 224, false},
                              {37, 53, 37, 53, false},
                              {500, 120, 160, 120, true},  // 120 / 0.75 = 160 rows
                              {64, 640, 64, 85, true}};    // 64 * 4/3 = 85.3 columns
    for (const Source& src : sources) {
      for (double smin : {0.08, 0.5}) {
        CAPTURE(src.h);
        CAPTURE(src.w);
        CAPTURE(smin);
        TransformOptions o = crop_options(CropMode::kRandomResized, 32, 32);
        o.scale_min = smin;
        double area_sum = 0;
        int accepted = 0, fallbacks = 0;
        const int kSamples = 2000;
        for (uint64_t s = 0; s < kSamples; ++s) {
          const CropBox b = choose_crop(o, src.h, src.w, 3, 0, s);
          REQUIRE(b.height >= 1);
          REQUIRE(b.width >= 1);
          REQUIRE(b.y + b.height <= src.h);
          REQUIRE(b.x + b.width <= src.w);
          const double share = double(b.height) * b.width / (double(src.h) * src.w);
          const double aspect = double(b.width) / b.height;
          // Rounding to whole pixels moves both by up to half a pixel per side.
          const double slack = 1.0 / std::min(b.height, b.width) + 1e-9;
          CHECK(aspect >= o.ratio_min * (1 - slack));
          CHECK(aspect <= o.ratio_max * (1 + slack));
          const bool is_fallback = b.height == src.fallback_h && b.width == src.fallback_w &&
                                   b.y == (src.h - b.height) / 2 && b.x == (src.w - b.width) / 2;
          if (is_fallback) {
            ++fallbacks;
            continue;
          }
          CHECK(share <= 1.0);
          CHECK(share >= smin * (1 - 2 * slack));
          area_sum += share;
          ++accepted;
        }
        if (src.always_fallback && smin == 0.5) {
          CHECK(fallbacks == kSamples);
        } else {
          CHECK(accepted > kSamples / 10);  // 64x640 accepts ~1 in 4; the others most
          // Large areas fail to fit more often, so accepted ones skew small, but the mean stays
          // inside the range and above its lower end.
          const double mean = area_sum / accepted;
          CHECK(mean > smin);
          CHECK(mean < 1.0);
        }
      }
    }
  }

  TEST_CASE("flip: about half the samples, only when asked, and never changes the crop") {
    TransformOptions with_flip = crop_options(CropMode::kRandomResized, 32, 32, true);
    TransformOptions without = with_flip;
    without.flip = false;
    int flips = 0;
    const int kSamples = 4000;
    for (uint64_t s = 0; s < kSamples; ++s) {
      const CropBox a = choose_crop(with_flip, 100, 120, 5, 2, s);
      const CropBox b = choose_crop(without, 100, 120, 5, 2, s);
      flips += a.flip;
      CHECK_FALSE(b.flip);
      CHECK(a.y == b.y);
      CHECK(a.x == b.x);
      CHECK(a.height == b.height);
      CHECK(a.width == b.width);
    }
    CHECK(flips > 1800);  // expected 2000, sd ~ 32
    CHECK(flips < 2200);
    // kNone and kCenter flip too.
    int none_flips = 0;
    for (uint64_t s = 0; s < 200; ++s) {
      none_flips += choose_crop(crop_options(CropMode::kNone, 0, 0, true), 8, 8, 1, 1, s).flip;
    }
    CHECK(none_flips > 50);
    CHECK(none_flips < 150);
  }

  TEST_CASE("crop_resize: a box of the output's size is copied byte for byte") {
    for (uint32_t c : {1u, 3u}) {
      Image src(6, 7, c);
      for (size_t i = 0; i < src.px.size(); ++i) src.px[i] = static_cast<uint8_t>(i * 37 + 11);
      CHECK(pixels(resize(src, whole(src), 6, 7)) == pixels(src));
      CropBox box;
      box.y = 2;
      box.x = 3;
      box.height = 3;
      box.width = 4;
      const Image out = resize(src, box, 3, 4);
      for (uint32_t y = 0; y < 3; ++y) {
        for (uint32_t x = 0; x < 4; ++x) {
          for (uint32_t ch = 0; ch < c; ++ch)
            CHECK(out.px[(y * 4 + x) * c + ch] == src.at(y + 2, x + 3, ch));
        }
      }
    }
  }

  TEST_CASE("crop_resize: flip mirrors the output exactly") {
    struct Case {
      uint32_t src_h, src_w, out_h, out_w;
    };
    const Case cases[] = {{5, 6, 5, 6}, {5, 6, 10, 13}, {9, 12, 4, 5}, {9, 12, 3, 2}, {1, 7, 1, 7}};
    for (const Case& k : cases) {
      for (uint32_t c : {1u, 3u}) {
        Image src(k.src_h, k.src_w, c);
        for (size_t i = 0; i < src.px.size(); ++i) src.px[i] = static_cast<uint8_t>(i * 53 + 7);
        const Image plain = resize(src, whole(src), k.out_h, k.out_w);
        const Image flipped = resize(src, whole(src, true), k.out_h, k.out_w);
        for (uint32_t y = 0; y < k.out_h; ++y) {
          for (uint32_t x = 0; x < k.out_w; ++x) {
            for (uint32_t ch = 0; ch < c; ++ch) {
              CHECK(flipped.px[(size_t{y} * k.out_w + x) * c + ch] ==
                    plain.px[(size_t{y} * k.out_w + (k.out_w - 1 - x)) * c + ch]);
            }
          }
        }
      }
    }
    // Same-size flip is the source mirrored.
    const Image src = from_rows({{1, 2, 3}, {4, 5, 6}});
    CHECK(pixels(resize(src, whole(src, true), 2, 3)) == std::vector<int>{3, 2, 1, 6, 5, 4});
  }

  TEST_CASE("crop_resize: a constant image stays constant at every scale") {
    const uint32_t sizes[][4] = {{10, 10, 3, 3},   {10, 10, 30, 30}, {7, 13, 5, 2},
                                 {100, 80, 9, 11}, {3, 5, 17, 4},    {64, 64, 32, 32}};
    for (const auto& s : sizes) {
      for (uint32_t c : {1u, 3u}) {
        for (uint8_t v : {uint8_t{0}, uint8_t{1}, uint8_t{128}, uint8_t{255}}) {
          Image src(s[0], s[1], c, v);
          const Image out = resize(src, whole(src), s[2], s[3]);
          for (uint8_t p : out.px) CHECK(p == v);
        }
      }
    }
  }

  TEST_CASE("crop_resize: only the box is read") {
    Image src(20, 20, 3, 255);
    for (uint32_t y = 4; y < 12; ++y) {
      for (uint32_t x = 5; x < 15; ++x) {
        for (uint32_t ch = 0; ch < 3; ++ch) src.at(y, x, ch) = 7;
      }
    }
    CropBox box;
    box.y = 4;
    box.x = 5;
    box.height = 8;
    box.width = 10;
    for (auto [h, w] : {std::pair<uint32_t, uint32_t>{3, 3}, {16, 25}, {8, 5}, {2, 1}}) {
      for (uint8_t p : resize(src, box, h, w).px) CHECK(p == 7);
    }
  }

  TEST_CASE("crop_resize: a horizontal gradient stays monotone") {
    Image src(4, 50, 1);
    for (uint32_t y = 0; y < 4; ++y) {
      for (uint32_t x = 0; x < 50; ++x) src.at(y, x) = static_cast<uint8_t>(x * 5);
    }
    for (uint32_t out_w : {7u, 20u, 26u, 49u, 50u, 77u, 200u}) {
      const Image out = resize(src, whole(src), 3, out_w);
      for (uint32_t y = 0; y < 3; ++y) {
        for (uint32_t x = 1; x < out_w; ++x) CHECK(out.at(y, x - 1) <= out.at(y, x));
      }
      CHECK(out.at(0, 0) < out.at(0, out_w - 1));
    }
  }

  TEST_CASE("crop_resize: hand-computed small cases") {
    struct Case {
      std::vector<std::vector<int>> src;
      uint32_t out_h, out_w;
      std::vector<int> expect;
    };
    const Case cases[] = {
        // 4x4 -> 2x2: each output is the mean of its 2x2 block.
        {{{0, 10, 20, 30}, {40, 50, 60, 70}, {80, 90, 100, 110}, {120, 130, 140, 150}},
         2,
         2,
         {25, 45, 105, 125}},
        // 3x shrink of a row: box means.
        {{{0, 3, 6, 9, 12, 15}}, 1, 2, {3, 12}},
        // 2.5x shrink: footprints [0, 2.5) and [2.5, 5): (10 + 20 + 15) / 2.5, (15 + 40 + 50)
        // / 2.5.
        {{{10, 20, 30, 40, 50}}, 1, 2, {18, 42}},
        // 2x enlarge, half-pixel centres: -0.25 (clamped), 0.25, 0.75, 1.25 (clamped).
        {{{0, 100}}, 1, 4, {0, 25, 75, 100}},
        // 1.5x shrink (bilinear): centres 0.25 and 1.75.
        {{{0, 40, 80}}, 1, 2, {10, 70}},
        // Vertical too: 2x1 -> 4x1.
        {{{0}, {200}}, 4, 1, {0, 50, 150, 200}},
        // Halves round up: (0 + 1) / 2 = 0.5 -> 1.
        {{{0, 1}}, 1, 1, {1}},
        {{{254, 255}, {255, 255}}, 1, 1, {255}},
    };
    for (const Case& c : cases) {
      const Image src = from_rows(c.src);
      CAPTURE(src.h);
      CAPTURE(src.w);
      CHECK(pixels(resize(src, whole(src), c.out_h, c.out_w)) == c.expect);
    }
  }

  TEST_CASE("crop_resize rejects a box outside the image or empty sizes") {
    Image src(4, 4, 1);
    uint8_t out[64];
    CropBox box;
    box.y = 1;
    box.height = 4;
    box.width = 4;
    CHECK_THROWS_AS(crop_resize(src.view(), box, 2, 2, out), Error);
    box.y = 0;
    box.x = 3;
    box.width = 2;
    CHECK_THROWS_AS(crop_resize(src.view(), box, 2, 2, out), Error);
    CHECK_THROWS_AS(crop_resize(src.view(), CropBox{}, 2, 2, out), Error);
    CHECK_THROWS_AS(crop_resize(src.view(), whole(src), 0, 2, out), Error);
  }

}  // TEST_SUITE
