// Tests of what decoding does with a source's alpha (DecodeOptions::alpha): which sources are
// seen as transparent, and the pixels of drop, composite and keep, each against a reference
// RGBA image the test built the file from (not against another OpenCV decode of it).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "decode_fixtures.h"
#include "dscache/error.h"
#include "dscache/ingest/image_decode.h"

using namespace dscache::test;
using dscache::AlphaMode;

namespace {

constexpr int kW = 6, kH = 4;

// A source file and the straight 8-bit RGBA it holds (alpha 255 where it has none).
struct AlphaSource {
  std::string name;
  Bytes bytes;
  Bytes rgba;  // kH * kW * 4
  bool transparent;
};

uint8_t value(int y, int x, int c) { return uint8_t((37 * y + 53 * x + 91 * c) % 256); }
uint8_t alpha_at(int y, int x) { return uint8_t((y * kW + x) * 11); }  // 0 .. 253, never 255

AlphaSource rgba8(const std::string& name, bool opaque) {
  cv::Mat bgra(kH, kW, CV_8UC4);
  AlphaSource s{name, {}, Bytes(kH * kW * 4), !opaque};
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      const uint8_t a = opaque ? 255 : alpha_at(y, x);
      bgra.at<cv::Vec4b>(y, x) = cv::Vec4b(value(y, x, 2), value(y, x, 1), value(y, x, 0), a);
      uint8_t* p = &s.rgba[(y * kW + x) * 4];
      p[0] = value(y, x, 0), p[1] = value(y, x, 1), p[2] = value(y, x, 2), p[3] = a;
    }
  }
  s.bytes = encode(bgra, ".png");
  return s;
}

// 16-bit RGBA: the reference is what drop keeps of it (v >> 8). `alpha16` for every pixel but
// (0, 0), which holds alpha16_first.
AlphaSource rgba16(const std::string& name, uint16_t alpha16, uint16_t alpha16_first,
                   bool transparent) {
  cv::Mat bgra(kH, kW, CV_16UC4);
  AlphaSource s{name, {}, Bytes(kH * kW * 4), transparent};
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      uint16_t v[3];
      for (int c = 0; c < 3; ++c) v[c] = uint16_t(value(y, x, c) * 257 + (x & 1 ? 0x7F : 0xF0));
      const uint16_t a = (x == 0 && y == 0) ? alpha16_first : alpha16;
      bgra.at<cv::Vec4w>(y, x) = cv::Vec4w(v[2], v[1], v[0], a);
      uint8_t* p = &s.rgba[(y * kW + x) * 4];
      p[0] = uint8_t(v[0] >> 8), p[1] = uint8_t(v[1] >> 8), p[2] = uint8_t(v[2] >> 8);
      p[3] = uint8_t(a >> 8);
    }
  }
  s.bytes = encode(bgra, ".png");
  return s;
}

AlphaSource grey_alpha() {
  std::vector<Bytes> rows;
  AlphaSource s{"grey+alpha png", {}, Bytes(kH * kW * 4), true};
  for (int y = 0; y < kH; ++y) {
    Bytes r;
    for (int x = 0; x < kW; ++x) {
      const uint8_t g = value(y, x, 0), a = alpha_at(y, x);
      r.insert(r.end(), {g, a});
      uint8_t* p = &s.rgba[(y * kW + x) * 4];
      p[0] = p[1] = p[2] = g, p[3] = a;
    }
    rows.push_back(r);
  }
  s.bytes = make_png(kW, kH, 8, 4, rows);
  return s;
}

// Palette with tRNS: index 1 fully transparent, index 2 half, the others opaque.
AlphaSource palette_trns() {
  const Bytes plte = {255, 0, 0, 10, 200, 30, 0, 0, 255, 7, 7, 7};
  const Bytes trns = {255, 0, 128};
  std::vector<Bytes> rows;
  AlphaSource s{"palette png with tRNS", {}, Bytes(kH * kW * 4), true};
  for (int y = 0; y < kH; ++y) {
    Bytes r;
    for (int x = 0; x < kW; ++x) {
      const uint8_t i = uint8_t((x + y) % 4);
      r.push_back(i);
      uint8_t* p = &s.rgba[(y * kW + x) * 4];
      p[0] = plte[i * 3], p[1] = plte[i * 3 + 1], p[2] = plte[i * 3 + 2];
      p[3] = i < trns.size() ? trns[i] : 255;
    }
    rows.push_back(r);
  }
  s.bytes = make_png(kW, kH, 8, 3, rows, plte, trns);
  return s;
}

// RGB with a tRNS colour: the pixels of that colour are transparent.
AlphaSource rgb_trns() {
  std::vector<Bytes> rows;
  AlphaSource s{"rgb png with a tRNS colour", {}, Bytes(kH * kW * 4), true};
  for (int y = 0; y < kH; ++y) {
    Bytes r;
    for (int x = 0; x < kW; ++x) {
      const bool key = x == y;
      const uint8_t c[3] = {key ? uint8_t(9) : value(y, x, 0), key ? uint8_t(8) : value(y, x, 1),
                            key ? uint8_t(7) : value(y, x, 2)};
      r.insert(r.end(), c, c + 3);
      uint8_t* p = &s.rgba[(y * kW + x) * 4];
      p[0] = c[0], p[1] = c[1], p[2] = c[2], p[3] = key ? 0 : 255;
    }
    rows.push_back(r);
  }
  s.bytes = make_png(kW, kH, 8, 2, rows, {}, {0, 9, 0, 8, 0, 7});
  return s;
}

// Sources without an alpha channel OpenCV gives: a plain RGB png and a grey png with a tRNS
// grey (OpenCV 4.6 decodes it to one channel, its transparency unseen).
AlphaSource opaque_png(const std::string& name, bool grey_trns) {
  std::vector<Bytes> rows;
  AlphaSource s{name, {}, Bytes(kH * kW * 4), false};
  for (int y = 0; y < kH; ++y) {
    Bytes r;
    for (int x = 0; x < kW; ++x) {
      uint8_t* p = &s.rgba[(y * kW + x) * 4];
      for (int c = 0; c < 3; ++c) {
        p[c] = value(y, x, grey_trns ? 0 : c);
        if (!grey_trns || c == 0) r.push_back(p[c]);
      }
      p[3] = 255;
    }
    rows.push_back(r);
  }
  s.bytes = grey_trns ? make_png(kW, kH, 8, 0, rows, {}, {0, value(0, 0, 0)})
                      : make_png(kW, kH, 8, 2, rows);
  return s;
}

std::vector<AlphaSource> sources() {
  return {rgba8("rgba png", false), rgba8("fully opaque rgba png", true), grey_alpha(),
          palette_trns(), rgb_trns(), rgba16("16-bit rgba png", 0x7FFF, 0x0000, true),
          // Below 65535 but 255 once reduced: counted, and composited to what drop gives.
          rgba16("16-bit rgba png, alpha 65534", 0xFFFF, 0xFFFE, true),
          opaque_png("rgb png", false), opaque_png("grey png with a tRNS grey", true)};
}

// The expected output of `mode` for source `s` with `bg` (R, G, B), 3 or 4 channels, from the
// reference: (c * a + bg * (255 - a) + 127) / 255 for composite.
Bytes expected(const AlphaSource& s, AlphaMode mode, const uint8_t bg[3]) {
  const bool keep = mode == AlphaMode::kKeep;
  Bytes out;
  for (int i = 0; i < kH * kW; ++i) {
    const uint8_t* p = &s.rgba[i * 4];
    const uint32_t a = p[3];
    for (int c = 0; c < 3; ++c) {
      out.push_back(mode == AlphaMode::kComposite && s.transparent
                        ? uint8_t((p[c] * a + bg[c] * (255 - a) + 127) / 255)
                        : p[c]);
    }
    if (keep) out.push_back(s.transparent ? p[3] : 255);
  }
  return out;
}

}  // namespace

TEST_CASE("alpha: which sources are transparent, and drop, composite and keep pixel by pixel") {
  const uint8_t bg[3] = {10, 200, 90};
  for (const AlphaSource& s : sources()) {
    for (const AlphaMode mode : {AlphaMode::kDrop, AlphaMode::kComposite, AlphaMode::kKeep}) {
      CAPTURE(s.name);
      CAPTURE(dscache::to_string(mode));
      auto o = options(kH, kW, mode == AlphaMode::kKeep ? 4 : 3, ResizePolicy::kStretch);
      o.alpha = mode;
      std::copy(bg, bg + 3, o.background);
      const auto d = decode(s.bytes, o);
      REQUIRE_MESSAGE(d.result.ok, d.result.reason);
      CHECK(d.result.transparent == s.transparent);
      CHECK(d.pixels == expected(s, mode, bg));
    }
  }
}

TEST_CASE("alpha: composite happens at the source's size, before the resize; grey after it") {
  const AlphaSource s = rgba8("rgba png", false);
  const uint8_t white[3] = {255, 255, 255};
  const Bytes full = expected(s, AlphaMode::kComposite, white);
  cv::Mat rgb(kH, kW, CV_8UC3, const_cast<uint8_t*>(full.data()));
  cv::Mat half, grey;
  cv::resize(rgb, half, cv::Size(kW / 2, kH / 2), 0, 0, cv::INTER_AREA);
  cv::cvtColor(rgb, grey, cv::COLOR_RGB2GRAY);

  auto o = options(kH / 2, kW / 2, 3, ResizePolicy::kStretch);
  o.alpha = AlphaMode::kComposite;  // background: white by default
  auto d = decode(s.bytes, o);
  REQUIRE_MESSAGE(d.result.ok, d.result.reason);
  CHECK(d.pixels == Bytes(half.data, half.data + half.total() * 3));

  auto o1 = options(kH, kW, 1, ResizePolicy::kStretch);
  o1.alpha = AlphaMode::kComposite;
  d = decode(s.bytes, o1);
  REQUIRE_MESSAGE(d.result.ok, d.result.reason);
  CHECK(d.pixels == Bytes(grey.data, grey.data + grey.total()));
}

TEST_CASE("alpha keep: ragged and already-decoded pixels give RGBA too; pad borders are clear") {
  const AlphaSource s = rgba8("rgba png", false);
  dscache::DecodeOptions o = options(1, 1, 4);
  o.alpha = AlphaMode::kKeep;
  std::vector<uint8_t> out;
  uint32_t h = 0, w = 0;
  const auto r = dscache::decode_image_ragged(s.bytes.data(), s.bytes.size(), o, 100, &out, &h, &w);
  REQUIRE_MESSAGE(r.ok, r.reason);
  CHECK(r.transparent);
  CHECK(out == s.rgba);

  const uint8_t grey[4] = {5, 6, 7, 8};  // 2x2 one channel
  dscache::DecodeOptions o4 = options(2, 4, 4, ResizePolicy::kPad);
  o4.alpha = AlphaMode::kKeep;
  Bytes px(2 * 4 * 4, 0xAB);
  dscache::resize_pixels(grey, 2, 2, 1, o4, px.data());
  const Bytes want = {0, 0, 0, 0, 5, 5, 5, 255, 6, 6, 6, 255, 0, 0, 0, 0,
                      0, 0, 0, 0, 7, 7, 7, 255, 8, 8, 8, 255, 0, 0, 0, 0};
  CHECK(px == want);
}

TEST_CASE("alpha: 4 channels go with keep, and keep with 4 channels") {
  struct Case {
    uint32_t channels;
    AlphaMode mode;
  };
  for (const Case c : {Case{4, AlphaMode::kDrop}, Case{4, AlphaMode::kComposite},
                       Case{3, AlphaMode::kKeep}, Case{1, AlphaMode::kKeep}}) {
    auto o = options(4, 4, c.channels);
    o.alpha = c.mode;
    Bytes out(64);
    const Bytes png = rgba8("rgba png", false).bytes;
    CHECK_THROWS_AS(dscache::decode_image(png.data(), png.size(), o, out.data()), dscache::Error);
  }
}

TEST_CASE("alpha: WebP transparency is seen, lossless (VP8L) and lossy (VP8X)") {
  cv::Mat bgra(kH, kW, CV_8UC4, cv::Scalar(10, 20, 30, 255));
  const Bytes opaque_lossless = encode(bgra, ".webp", {cv::IMWRITE_WEBP_QUALITY, 101});
  bgra.at<cv::Vec4b>(1, 2)[3] = 0;
  for (const int quality : {101, 80}) {  // above 100: lossless
    CAPTURE(quality);
    const Bytes webp = encode(bgra, ".webp", {cv::IMWRITE_WEBP_QUALITY, quality});
    auto o = options(kH, kW, 4, ResizePolicy::kStretch);
    o.alpha = AlphaMode::kKeep;
    const auto d = decode(webp, o);
    REQUIRE_MESSAGE(d.result.ok, d.result.reason);
    CHECK(d.result.transparent);
    CHECK(d.at(o, 1, 2)[3] == 0);
    CHECK(d.at(o, 0, 0)[3] == 255);
  }
  const auto d = decode(opaque_lossless, options(kH, kW));
  REQUIRE_MESSAGE(d.result.ok, d.result.reason);
  CHECK_FALSE(d.result.transparent);
}

TEST_CASE("alpha composite: the rounding of every alpha, the halfway cases included") {
  // 16x16 pixels: alpha y*16+x (all 256 values), colours varied, onto (10, 200, 90).
  cv::Mat bgra(16, 16, CV_8UC4);
  const uint8_t bg[3] = {10, 200, 90};
  Bytes want;
  int halfway = 0;  // sums at exactly .5 after the division: +127 rounds them down, +128 up
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      const uint32_t a = uint32_t(y * 16 + x);
      const uint8_t rgb[3] = {uint8_t(a * 7 + 3), uint8_t(255 - a), uint8_t(a * 13)};
      bgra.at<cv::Vec4b>(y, x) = cv::Vec4b(rgb[2], rgb[1], rgb[0], uint8_t(a));
      for (int c = 0; c < 3; ++c) {
        const uint32_t sum = rgb[c] * a + bg[c] * (255 - a);
        halfway += sum % 255 == 127;
        want.push_back(uint8_t((sum + 127) / 255));
      }
    }
  }
  REQUIRE(halfway > 0);
  auto o = options(16, 16, 3, ResizePolicy::kStretch);
  o.alpha = AlphaMode::kComposite;
  std::copy(bg, bg + 3, o.background);
  const auto d = decode(encode(bgra, ".png"), o);
  REQUIRE_MESSAGE(d.result.ok, d.result.reason);
  CHECK(d.result.transparent);
  CHECK(d.pixels == want);
}
