// Tests of the streamed PNG decode (libcache/ingest/png_stream.h) and its row-streaming
// INTER_AREA resizer (area_stream.h): byte for byte what a whole-image decode + cv::resize gives.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "../libcache/ingest/area_stream.h"
#include "decode_fixtures.h"
#include "dscache/ingest/image_decode.h"

using namespace dscache::test;
using dscache::AlphaMode;
using dscache::AreaResizer;

namespace {

// Smooth gradients plus noise: both exercise the rounding (flat areas would hide it).
cv::Mat pattern(int h, int w, int type, uint32_t seed) {
  cv::Mat m(h, w, type);
  std::mt19937 rng(seed);
  const int cn = m.channels();
  const bool wide = m.depth() == CV_16U;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < cn; ++c) {
        const uint32_t v = (x * 7 + y * 3 + c * 50 + (rng() % 23)) % 256;
        if (wide) {
          m.ptr<uint16_t>(y)[x * cn + c] = uint16_t(v * 257 + rng() % 200);
        } else {
          m.ptr<uint8_t>(y)[x * cn + c] = uint8_t(v);
        }
      }
    }
  }
  return m;
}

cv::Mat stream_resize(const cv::Mat& src, int dw, int dh) {
  cv::Mat out(dh, dw, src.type(), cv::Scalar::all(0xAB));
  AreaResizer r(uint32_t(src.cols), uint32_t(src.rows), uint32_t(dw), uint32_t(dh), src.channels(),
                out.data);
  for (int y = 0; y < src.rows; ++y) r.push_row(src.ptr<uint8_t>(y));
  CHECK(r.done());
  return out;
}

bool same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

}  // namespace

TEST_CASE("AreaResizer: byte-identical to cv::resize INTER_AREA") {
  struct Case {
    int sw, sh, dw, dh;
  };
  const std::vector<Case> cases = {
      {1000, 700, 64, 64},   // non-integer both ways
      {517, 311, 37, 23},    //
      {128, 128, 64, 64},    // 2x2: OpenCV's (sum + 2) >> 2 kernel
      {192, 96, 64, 32},     // 3x3 block average
      {300, 200, 100, 50},   // 3x4
      {640, 480, 64, 48},    // 10x10
      {65, 33, 64, 32},      // barely shrinking
      {100, 100, 100, 50},   // one axis unchanged (integer 1x2)
      {101, 100, 100, 37},   // one axis unchanged, the other fractional
      {7, 5, 3, 2},          //
      {1, 9, 1, 2},          // a single column
      {3000, 20, 64, 7},     // very wide
      {20, 3000, 7, 64},     // very tall
      {448, 320, 64, 64},    // 7 x 5
      {999, 999, 333, 333},  // 3 x 3, computed as 1 / (1/3): not exactly an integer
      {1024, 1024, 3, 5},    // huge cells
  };
  for (int cn : {1, 3, 4}) {
    for (const Case& c : cases) {
      CAPTURE(cn);
      CAPTURE(c.sw);
      CAPTURE(c.sh);
      CAPTURE(c.dw);
      CAPTURE(c.dh);
      REQUIRE(AreaResizer::applies(c.sw, c.sh, c.dw, c.dh));
      const cv::Mat src = pattern(c.sh, c.sw, CV_8UC(cn), uint32_t(c.sw * 31 + c.sh));
      cv::Mat want;
      cv::resize(src, want, cv::Size(c.dw, c.dh), 0, 0, cv::INTER_AREA);
      CHECK(same(stream_resize(src, c.dw, c.dh), want));
    }
  }
}

TEST_CASE("AreaResizer: byte-identical on 300 random sizes") {
  std::mt19937 rng(23);
  int mismatches = 0;
  for (int i = 0; i < 300; ++i) {
    const int sw = 1 + int(rng() % 400), sh = 1 + int(rng() % 400);
    const int dw = 1 + int(rng() % sw), dh = 1 + int(rng() % sh);
    const int cn = std::vector<int>{1, 3, 4}[rng() % 3];
    if (!AreaResizer::applies(sw, sh, dw, dh)) continue;  // same size
    const cv::Mat src = pattern(sh, sw, CV_8UC(cn), uint32_t(i));
    cv::Mat want;
    cv::resize(src, want, cv::Size(dw, dh), 0, 0, cv::INTER_AREA);
    if (!same(stream_resize(src, dw, dh), want)) {
      ++mismatches;
      MESSAGE("mismatch at " << sw << "x" << sh << " -> " << dw << "x" << dh << " cn " << cn);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("AreaResizer: what it does not do") {
  CHECK_FALSE(AreaResizer::applies(64, 64, 64, 64));  // same size: a copy
  CHECK_FALSE(AreaResizer::applies(64, 64, 65, 32));  // enlarging one axis: bilinear in OpenCV
  CHECK_FALSE(AreaResizer::applies(64, 64, 0, 32));   // empty
  CHECK(AreaResizer::applies(64, 64, 64, 32));
}

namespace {

// A PNG and what today's whole-image path makes of it, computed here with OpenCV: `ref` is the
// decoded image in RGB (or grey) order before the resize.
struct Source {
  std::string name;
  Bytes png;
  int w, h;
};

Bytes rows_png(int w, int h, uint8_t depth, uint8_t color_type, int samples, const Bytes& plte,
               const Bytes& trns, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Bytes> rows(static_cast<size_t>(h));
  const int bytes = (w * samples * depth + 7) / 8;
  for (int y = 0; y < h; ++y) {
    rows[y].resize(size_t(bytes));
    for (int i = 0; i < bytes; ++i) rows[y][i] = uint8_t((i * 5 + y * 3 + rng() % 17) % 256);
  }
  return make_png(uint32_t(w), uint32_t(h), depth, color_type, rows, plte, trns);
}

std::vector<Source> sources(int w, int h) {
  std::vector<Source> s;
  auto add = [&](const std::string& n, Bytes b) { s.push_back({n, std::move(b), w, h}); };
  add("rgb8", encode(pattern(h, w, CV_8UC3, 1), ".png"));
  add("rgba8", encode(pattern(h, w, CV_8UC4, 2), ".png"));
  add("grey8", encode(pattern(h, w, CV_8UC1, 3), ".png"));
  add("rgb16", encode(pattern(h, w, CV_16UC3, 4), ".png"));
  add("rgba16", encode(pattern(h, w, CV_16UC4, 5), ".png"));
  add("grey16", encode(pattern(h, w, CV_16UC1, 6), ".png"));
  Bytes plte;
  for (int i = 0; i < 256; ++i)
    plte.insert(plte.end(), {uint8_t(i), uint8_t(255 - i), uint8_t(i * 7)});
  Bytes trns;
  for (int i = 0; i < 200; ++i) trns.push_back(uint8_t(i % 3 == 0 ? 255 : i));
  add("grey+alpha8", rows_png(w, h, 8, 4, 2, {}, {}, 7));
  add("grey+alpha16", rows_png(w, h, 16, 4, 2, {}, {}, 8));
  add("palette", rows_png(w, h, 8, 3, 1, plte, {}, 9));
  add("palette+tRNS", rows_png(w, h, 8, 3, 1, plte, trns, 10));
  add("palette 4-bit", rows_png(w, h, 4, 3, 1, Bytes(plte.begin(), plte.begin() + 48), {}, 11));
  add("grey 1-bit", rows_png(w, h, 1, 0, 1, {}, {}, 12));
  add("rgb+tRNS", rows_png(w, h, 8, 2, 3, {}, {0, 10, 0, 20, 0, 30}, 13));
  return s;
}

// Today's path, spelled out with OpenCV: decode as decode_image does (imdecode; for alpha:
// IMREAD_UNCHANGED, 16-bit reduced by the high byte), then resize_pixels, which is the same
// policy code (plan + cv::resize INTER_AREA + crop/pad) run on decoded pixels.
Bytes reference(const Bytes& png, const DecodeOptions& o, bool* transparent,
                bool* has_alpha = nullptr) {
  const cv::Mat buf(1, int(png.size()), CV_8U, const_cast<uint8_t*>(png.data()));
  const cv::Mat u = cv::imdecode(buf, cv::IMREAD_UNCHANGED);
  REQUIRE(!u.empty());
  *transparent = false;
  if (has_alpha != nullptr) *has_alpha = u.channels() == 4;
  cv::Mat bgra;
  if (u.channels() == 4) {
    u.convertTo(bgra, CV_8U, u.depth() == CV_16U ? 1.0 / 256 : 1.0);
    if (u.depth() == CV_16U) {  // the high byte, not a rounded division
      for (int y = 0; y < u.rows; ++y) {
        for (int x = 0; x < u.cols * 4; ++x)
          bgra.ptr<uint8_t>(y)[x] = uint8_t(u.ptr<uint16_t>(y)[x] >> 8);
      }
    }
    cv::Mat a;
    cv::extractChannel(u, a, 3);
    double lo = 0;
    cv::minMaxLoc(a, &lo);
    *transparent = lo < (u.depth() == CV_16U ? 65535 : 255);
  }
  Bytes out(size_t(o.height) * o.width * o.channels);
  if (o.channels == 4) {  // keep (stretch only here): resize BGRA, then RGBA
    cv::Mat src = bgra;
    if (!*transparent) cv::cvtColor(cv::imdecode(buf, cv::IMREAD_COLOR), src, cv::COLOR_BGR2BGRA);
    cv::Mat r;
    cv::resize(src, r, cv::Size(int(o.width), int(o.height)), 0, 0, cv::INTER_AREA);
    cv::Mat dst(int(o.height), int(o.width), CV_8UC4, out.data());
    cv::cvtColor(r, dst, cv::COLOR_BGRA2RGBA);
    return out;
  }
  cv::Mat img;
  if (o.alpha == AlphaMode::kComposite && *transparent) {
    img.create(bgra.rows, bgra.cols, CV_8UC3);
    const uint32_t bg[3] = {o.background[2], o.background[1], o.background[0]};
    for (int y = 0; y < bgra.rows; ++y) {
      for (int x = 0; x < bgra.cols; ++x) {
        const uint8_t* p = bgra.ptr<uint8_t>(y) + x * 4;
        for (int c = 0; c < 3; ++c) {
          img.ptr<uint8_t>(y)[x * 3 + c] =
              uint8_t((p[c] * p[3] + bg[c] * (255 - p[3]) + 127) / 255);
        }
      }
    }
  } else {
    img = cv::imdecode(buf, o.channels == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  }
  if (img.channels() == 3) cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
  dscache::resize_pixels(img.data, uint32_t(img.rows), uint32_t(img.cols), uint32_t(img.channels()),
                         o, out.data());
  return out;
}

}  // namespace

TEST_CASE("decode_image streams PNGs: the same pixels as decode + cv::resize") {
  struct Target {
    int w, h;
    uint32_t ow, oh;
  };
  const std::vector<Target> targets = {{1000, 700, 64, 64}, {517, 311, 37, 23}, {256, 128, 64, 32}};
  struct Mode {
    const char* name;
    uint32_t channels;
    ResizePolicy policy;
    AlphaMode alpha;
  };
  const std::vector<Mode> modes = {
      {"rgb stretch", 3, ResizePolicy::kStretch, AlphaMode::kDrop},
      {"rgb crop", 3, ResizePolicy::kCrop, AlphaMode::kDrop},
      {"rgb pad", 3, ResizePolicy::kPad, AlphaMode::kDrop},
      {"grey stretch", 1, ResizePolicy::kStretch, AlphaMode::kDrop},
      {"composite stretch", 3, ResizePolicy::kStretch, AlphaMode::kComposite},
      {"keep stretch", 4, ResizePolicy::kStretch, AlphaMode::kKeep},
  };
  for (const Target& t : targets) {
    for (const Source& s : sources(t.w, t.h)) {
      for (const Mode& m : modes) {
        CAPTURE(s.name);
        CAPTURE(m.name);
        CAPTURE(t.w);
        CAPTURE(t.ow);
        DecodeOptions o = options(t.oh, t.ow, m.channels, m.policy);
        o.alpha = m.alpha;
        o.background[0] = 10, o.background[1] = 200, o.background[2] = 90;
        bool transparent = false, has_alpha = false;
        const Bytes want = reference(s.png, o, &transparent, &has_alpha);
        // A limit only the whole-image path applies: ok proves the decode was streamed. (A file
        // without alpha under keep is decoded whole: not streamed.)
        if (m.channels != 4 || has_alpha) o.max_pixels = 1;
        const Decoded got = decode(s.png, o);
        REQUIRE_MESSAGE(got.result.ok, got.result.reason);
        CHECK(got.result.transparent == transparent);
        CHECK(got.result.source_width == uint32_t(t.w));
        CHECK(got.result.decoded_height == uint32_t(t.h));
        CHECK(got.pixels == want);
      }
    }
  }
}

TEST_CASE("a streamed PNG is not held to max_pixels; other paths still are") {
  const Bytes png = encode(pattern(700, 1000, CV_8UC3, 1), ".png");
  DecodeOptions o = options(64, 64, 3, ResizePolicy::kStretch);
  o.max_pixels = 1000;  // far below 700 000: only a streamed decode can succeed
  const Decoded got = decode(png, o);
  REQUIRE_MESSAGE(got.result.ok, got.result.reason);
  bool transparent = false;
  o.max_pixels = 0;
  CHECK(got.pixels == reference(png, o, &transparent));

  // Enlarging is not an area shrink: the whole-image path, and its limit, apply.
  DecodeOptions big = options(800, 1200, 3, ResizePolicy::kStretch);
  big.max_pixels = 1000;
  const Decoded whole = decode(png, big);
  CHECK_FALSE(whole.result.ok);
  CHECK(whole.result.reason.find("over --max-pixels 1000") != std::string::npos);
}

TEST_CASE("a broken PNG gives today's reason, whatever the path") {
  const Bytes png = encode(pattern(700, 1000, CV_8UC3, 1), ".png");
  struct Case {
    const char* name;
    Bytes bytes;
  };
  Bytes flipped = png;
  flipped[png.size() / 2] ^= 0x55;  // inside the image data: a zlib or CRC error
  const std::vector<Case> cases = {
      {"truncated mid-image", Bytes(png.begin(), png.begin() + png.size() / 2)},
      {"truncated before IEND", Bytes(png.begin(), png.end() - 12)},
      {"corrupt image data", flipped},
  };
  // A header claiming 900000 x 900000 (libpng's limit is 1e6 per side) over no image data:
  // refused by libpng when streamed, then by the pixel limit on the whole-image path.
  Bytes huge = make_png(900000, 900000, 8, 2, {});
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const DecodeOptions o = options(64, 64, 3, ResizePolicy::kStretch);
    const Decoded got = decode(c.bytes, o);
    CHECK_FALSE(got.result.ok);
    CHECK(got.result.reason.rfind("corrupt or", 0) == 0);
    CHECK(got.result.reason.find("png") != std::string::npos);
  }
  const Decoded got = decode(huge, options(64, 64, 3, ResizePolicy::kStretch));
  CHECK_FALSE(got.result.ok);
  CHECK(got.result.reason.find("over --max-pixels") != std::string::npos);
  huge = make_png(2000000, 3, 8, 2, {});  // over libpng's limit: not streamed, not allocated
  DecodeOptions unlimited = options(2, 64, 3, ResizePolicy::kStretch);
  unlimited.max_pixels = 0;
  const Decoded wide = decode(huge, unlimited);
  CHECK_FALSE(wide.result.ok);
  CHECK(wide.result.reason.rfind("corrupt or", 0) == 0);
}
