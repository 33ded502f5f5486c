// Tests of the image decoding module: decoding of the inputs a real user meets (good and bad),
// pixel formats, the three resize policies, JPEG reduced decoding and determinism. What is
// read before decoding (format sniffing, image and idx headers) is in test_decode_header.cpp.
// Every fixture is generated here, in memory or in a fresh temp dir.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "decode_fixtures.h"
#include "dscache/error.h"
#include "dscache/ingest/idx.h"
#include "dscache/ingest/image_decode.h"
#include "temp_dir.h"

// The library's names the tests use unqualified come with decode_fixtures.h.
using namespace dscache::test;

TEST_CASE("decoding the inputs a real user meets") {
  TempDir dir;
  const cv::Mat photo = smooth_image(64, 48);
  const Bytes jpeg = encode(photo, ".jpg");
  const Bytes png = encode(photo, ".png");

  // A PNG that someone named .jpg: only the bytes matter.
  {
    std::ofstream(dir.file("actually_png.jpg"), std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  }
  const Bytes png_named_jpg = read_file(dir.file("actually_png.jpg"));
  REQUIRE(png_named_jpg == png);

  Bytes garbage(1000);
  uint32_t seed = 12345;
  for (uint8_t& b : garbage) {
    seed = seed * 1103515245u + 12345u;
    b = uint8_t(seed >> 16);
  }
  garbage[0] = 'G';  // pin the first bytes so the reason is known
  garbage[1] = 'A';
  garbage[2] = 'R';
  garbage[3] = 'B';
  Bytes jpeg_magic_garbage = garbage;
  jpeg_magic_garbage[0] = 0xFF;
  jpeg_magic_garbage[1] = 0xD8;
  jpeg_magic_garbage[2] = 0xFF;
  jpeg_magic_garbage[3] = 0xDB;
  Bytes png_bad_crc_data = png;
  for (size_t i = 60; i < png_bad_crc_data.size() - 20; ++i) png_bad_crc_data[i] ^= 0x5A;

  Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 4, 0, 4, 0, 0, 0, 0, 0x3B};

  struct Case {
    std::string name;
    Bytes bytes;
    bool ok;
    std::string reason;  // substring of the skip reason
  };
  Bytes jpeg_trailing = jpeg;  // cameras and editors often leave bytes after EOI
  for (int i = 0; i < 100; ++i) jpeg_trailing.push_back(static_cast<uint8_t>(i * 7));
  const Case cases[] = {
      {"good jpeg", jpeg, true, ""},
      {"good png", png, true, ""},
      {"png named .jpg", png_named_jpg, true, ""},
      {"zero-byte", {}, false, "zero-byte file"},
      {"garbage", garbage, false, "unrecognized image format (the file holds binary data)"},
      // The kind of content, never its bytes (a path may name /etc/passwd: issue 38).
      {"text", Bytes{'r', 'o', 'o', 't', ':', 'x', '\n'}, false,
       "unrecognized image format (the file holds text)"},
      {"html", Bytes{' ', '<', '!', 'D', 'O', 'C', 'T', 'Y', 'P', 'E', ' ', 'h', 't', 'm', 'l'},
       false, "(the file holds HTML)"},
      {"zeros", Bytes(600, 0), false, "(the file holds zero bytes)"},
      {"jpeg truncated to 100 bytes", Bytes(jpeg.begin(), jpeg.begin() + 100), false,
       "truncated jpeg"},
      {"jpeg cut at 3/4 (mid-scan)", Bytes(jpeg.begin(), jpeg.begin() + long(jpeg.size() * 3 / 4)),
       false, "truncated jpeg: no end-of-image marker"},
      {"jpeg with bytes after its end marker", jpeg_trailing, true, ""},
      {"jpeg magic then garbage", jpeg_magic_garbage, false, "jpeg"},
      {"png truncated to 100 bytes", Bytes(png.begin(), png.begin() + 100), false,
       "corrupt or truncated png"},
      {"png with corrupt data", png_bad_crc_data, false, "png"},
      {"png header only", make_png(4, 4, 8, 2, {}), false, "corrupt or truncated png"},
      {"gif (OpenCV 4.6 has no gif decoder)", gif, false, "gif"},
      {"png claiming 60000x60000", make_png(60000, 60000, 8, 2, {}), false,
       "image is 60000x60000 = 3600000000 pixels, over --max-pixels 100000000"},
      {"jpeg claiming 60000x60000", make_flat_jpeg(60000, 60000, {0, 0, 0}, false), false,
       "image is 60000x60000 = 3600000000 pixels, over --max-pixels 100000000"},
  };
  const auto opt = options(16, 16);
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const auto d = decode(c.bytes, opt);
    CHECK(d.result.ok == c.ok);
    CHECK_MESSAGE(d.result.reason.find(c.reason) != std::string::npos, d.result.reason);
    if (c.ok) CHECK(d.result.reason.empty());
    if (!c.ok) CHECK(!d.result.reason.empty());
  }
}

// Of whole-image decodes: a PNG streamed into its shrink is not held to it (test_decode_stream).
TEST_CASE("max_pixels is checked on the header before decoding") {
  const Bytes png = encode(smooth_image(37, 23), ".jpg");
  auto opt = options(8, 8);
  opt.max_pixels = 37 * 23 - 1;
  auto d = decode(png, opt);
  CHECK_FALSE(d.result.ok);
  CHECK(d.result.reason == "image is 37x23 = 851 pixels, over --max-pixels 850");
  CHECK(d.result.source_width == 37);
  opt.max_pixels = 37 * 23;
  CHECK(decode(png, opt).result.ok);
  opt.max_pixels = 0;  // no limit
  CHECK(decode(png, opt).result.ok);
}

TEST_CASE("invalid options throw InvalidArgument") {
  const Bytes png = encode(smooth_image(8, 8), ".png");
  uint8_t out[64 * 3];
  auto expect_invalid = [&](const DecodeOptions& o, const char* field) {
    CAPTURE(field);
    try {
      dscache::decode_image(png.data(), png.size(), o, out);
      FAIL("no throw");
    } catch (const dscache::Error& e) {
      CHECK(e.kind() == dscache::ErrorKind::kInvalidArgument);
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
    CHECK_THROWS_AS(dscache::resize_pixels(out, 8, 8, 1, o, out), dscache::Error);
  };
  expect_invalid(options(0, 8), "height");
  expect_invalid(options(8, 0), "width");
  expect_invalid(options(8, 8, 2), "channels");
  expect_invalid(options(8, 8, 4), "channels");
  CHECK_THROWS_AS(dscache::resize_pixels(out, 8, 8, 2, options(8, 8), out), dscache::Error);
  CHECK_THROWS_AS(dscache::resize_pixels(out, 0, 8, 1, options(8, 8), out), dscache::Error);
}

TEST_CASE("pixel formats: RGB order, grey, alpha, palette, 16-bit, CMYK") {
  const auto opt = options(4, 6, 3, ResizePolicy::kStretch);  // same size: no resampling
  SUBCASE("pure red decodes to (255,0,0) from png and jpeg") {
    const cv::Mat red(4, 6, CV_8UC3, cv::Scalar(0, 0, 255));  // BGR
    auto d = decode(encode(red, ".png"), opt);
    REQUIRE(d.result.ok);
    CHECK(near(d.at(opt, 2, 3), 255, 0, 0));
    d = decode(encode(red, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 100}), opt);
    REQUIRE(d.result.ok);
    CHECK(near(d.at(opt, 2, 3), 255, 0, 0, 3));
  }
  SUBCASE("grey png gives three identical channels") {
    cv::Mat g(4, 6, CV_8UC1);
    for (int i = 0; i < 24; ++i) g.data[i] = uint8_t(i * 10);
    const auto d = decode(encode(g, ".png"), opt);
    REQUIRE(d.result.ok);
    for (int i = 0; i < 24; ++i) CHECK(near(&d.pixels[i * 3], i * 10, i * 10, i * 10));
    // And a 1-channel decode of an RGB png is its grey conversion.
    const auto opt1 = options(4, 6, 1, ResizePolicy::kStretch);
    cv::Mat c(4, 6, CV_8UC3, cv::Scalar(0, 0, 255));
    const auto d1 = decode(encode(c, ".png"), opt1);
    REQUIRE(d1.result.ok);
    CHECK(std::abs(d1.pixels[0] - 76) <= 1);  // 0.299 * 255
  }
  SUBCASE("rgba png: alpha dropped, colour kept even where alpha is 0") {
    cv::Mat bgra(4, 6, CV_8UC4, cv::Scalar(30, 20, 10, 0));
    bgra.at<cv::Vec4b>(1, 1) = cv::Vec4b(1, 2, 3, 255);
    const auto d = decode(encode(bgra, ".png"), opt);
    REQUIRE(d.result.ok);
    CHECK(near(d.at(opt, 0, 0), 10, 20, 30));
    CHECK(near(d.at(opt, 1, 1), 3, 2, 1));
  }
  SUBCASE("grey+alpha png") {
    std::vector<Bytes> rows;
    for (int y = 0; y < 4; ++y) {
      Bytes r;
      for (int x = 0; x < 6; ++x) r.insert(r.end(), {uint8_t(40 * y + x), uint8_t(x * 50)});
      rows.push_back(r);
    }
    const auto d = decode(make_png(6, 4, 8, 4, rows), opt);
    REQUIRE_MESSAGE(d.result.ok, d.result.reason);
    CHECK(d.result.format == ImageFormat::kPng);
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 6; ++x) CHECK(near(d.at(opt, y, x), 40 * y + x, 40 * y + x, 40 * y + x));
  }
  SUBCASE("palette png, 8-bit and 2-bit, with tRNS") {
    const Bytes plte = {255, 0, 0, 10, 200, 30, 0, 0, 255, 7, 7, 7};
    std::vector<Bytes> rows8, rows2;
    for (int y = 0; y < 4; ++y) {
      Bytes r8, r2(2, 0);
      for (int x = 0; x < 6; ++x) {
        uint8_t idx = uint8_t((x + y) % 4);
        r8.push_back(idx);
        r2[x / 4] |= uint8_t(idx << (6 - 2 * (x % 4)));
      }
      rows8.push_back(r8);
      rows2.push_back(r2);
    }
    for (const Bytes& png :
         {make_png(6, 4, 8, 3, rows8, plte), make_png(6, 4, 2, 3, rows2, plte, {255, 0})}) {
      const auto d = decode(png, opt);
      REQUIRE_MESSAGE(d.result.ok, d.result.reason);
      for (int y = 0; y < 4; ++y) {
        for (int x = 0; x < 6; ++x) {
          const uint8_t* e = &plte[size_t((x + y) % 4) * 3];
          CHECK(near(d.at(opt, y, x), e[0], e[1], e[2]));
        }
      }
    }
  }
  SUBCASE("16-bit png is reduced to 8 bits by dropping the low byte") {
    cv::Mat img16(4, 6, CV_16UC3, cv::Scalar(0x12FF, 0x8000, 0xFFFF));  // BGR
    img16.at<cv::Vec3w>(3, 5) = cv::Vec3w(0x0180, 0x7F7F, 0x00FF);
    const auto d = decode(encode(img16, ".png"), opt);
    REQUIRE(d.result.ok);
    // v16 >> 8 (libpng strip_16), not round(v16 / 257): 0x12FF gives 0x12, not 0x13.
    CHECK(near(d.at(opt, 0, 0), 0xFF, 0x80, 0x12));
    CHECK(near(d.at(opt, 3, 5), 0x00, 0x7F, 0x01));
  }
  SUBCASE("cmyk jpeg (Adobe, inverted) converts to RGB") {
    // Stored inverted CMYK c'=255 m'=128 y'=0 k'=200: RGB = (c'k', m'k', y'k') / 255.
    const Bytes cmyk = make_flat_jpeg(32, 24, {255, 128, 0, 200});
    const auto info = dscache::read_image_header(cmyk.data(), cmyk.size());
    CHECK(info.dims_known);
    CHECK(info.width == 32);
    const auto o = options(24, 32, 3, ResizePolicy::kStretch);
    const auto d = decode(cmyk, o);
    REQUIRE_MESSAGE(d.result.ok, d.result.reason);
    CHECK(d.result.format == ImageFormat::kJpeg);
    const uint8_t* px = d.at(o, 10, 10);
    MESSAGE("cmyk pixel: " << int(px[0]) << "," << int(px[1]) << "," << int(px[2]));
    CHECK(near(px, 200, 100, 0, 3));
    CHECK(near(d.at(o, 23, 31), 200, 100, 0, 3));
    // Grey from CMYK works too.
    const auto o1 = options(24, 32, 1, ResizePolicy::kStretch);
    const auto g = decode(cmyk, o1);
    REQUIRE_MESSAGE(g.result.ok, g.result.reason);
  }
  SUBCASE("3-component flat jpeg from the hand-built writer is exact") {
    // YCbCr (128,128,128) is mid grey: checks the writer that the CMYK case relies on.
    const auto d = decode(make_flat_jpeg(6, 4, {128, 128, 128}), opt);
    REQUIRE_MESSAGE(d.result.ok, d.result.reason);
    CHECK(near(d.at(opt, 1, 1), 128, 128, 128, 1));
  }
}

TEST_CASE("resize policies: geometry of a half red, half blue image") {
  // 200 wide x 100 high: left half red, right half blue (BGR scalars).
  const Bytes png = encode(halves(200, 100, {0, 0, 255}, {255, 0, 0}), ".png");
  SUBCASE("crop (the middle 100x100) and stretch (each half at half width): left red, right blue") {
    for (const ResizePolicy policy : {ResizePolicy::kCrop, ResizePolicy::kStretch}) {
      CAPTURE(static_cast<int>(policy));
      const auto o = options(50, 50, 3, policy);
      const auto d = decode(png, o);
      REQUIRE(d.result.ok);
      for (int y = 0; y < 50; ++y) {
        CHECK(near(d.at(o, y, 0), 255, 0, 0));
        CHECK(near(d.at(o, y, 23), 255, 0, 0));
        CHECK(near(d.at(o, y, 26), 0, 0, 255));
        CHECK(near(d.at(o, y, 49), 0, 0, 255));
      }
    }
  }
  SUBCASE("pad fits 50x25 in the middle rows 12..36, black above and below") {
    const auto o = options(50, 50, 3, ResizePolicy::kPad);
    const auto d = decode(png, o);
    REQUIRE(d.result.ok);
    for (int y = 0; y < 50; ++y) {
      CAPTURE(y);
      const bool inside = y >= 12 && y < 37;
      CHECK(near(d.at(o, y, 2), inside ? 255 : 0, 0, 0));
      CHECK(near(d.at(o, y, 47), 0, 0, inside ? 255 : 0));
    }
  }
  SUBCASE("pad of a tall image puts black left and right") {
    const Bytes tall = encode(cv::Mat(100, 50, CV_8UC3, cv::Scalar(0, 255, 0)), ".png");
    const auto o = options(20, 40, 3, ResizePolicy::kPad);  // image becomes 10x20 at x 15..24
    const auto d = decode(tall, o);
    REQUIRE(d.result.ok);
    for (int x = 0; x < 40; ++x) {
      CAPTURE(x);
      CHECK(near(d.at(o, 10, x), 0, (x >= 15 && x < 25) ? 255 : 0, 0));
    }
  }
  SUBCASE("crop of a tall image: top red, bottom blue") {
    cv::Mat tall(200, 100, CV_8UC3, cv::Scalar(255, 0, 0));
    tall(cv::Rect(0, 0, 100, 100)).setTo(cv::Scalar(0, 0, 255));
    const auto o = options(50, 50, 3, ResizePolicy::kCrop);
    const auto d = decode(encode(tall, ".png"), o);
    REQUIRE(d.result.ok);
    CHECK(near(d.at(o, 0, 25), 255, 0, 0));
    CHECK(near(d.at(o, 23, 25), 255, 0, 0));
    CHECK(near(d.at(o, 26, 25), 0, 0, 255));
    CHECK(near(d.at(o, 49, 25), 0, 0, 255));
  }
  SUBCASE("enlarging works for every policy and 1 channel") {
    for (auto policy : {ResizePolicy::kCrop, ResizePolicy::kPad, ResizePolicy::kStretch}) {
      const auto o = options(300, 500, 1, policy);
      const auto d = decode(png, o);
      CHECK(d.result.ok);
      CHECK(d.result.reduction == 1);
    }
  }
}

TEST_CASE("jpeg reduced decode picks the largest safe factor") {
  struct Case {
    int w, h;         // source
    uint32_t th, tw;  // target rows, columns
    ResizePolicy policy;
    bool reduced;
    int expected;
  };
  const Case cases[] = {
      {1600, 1200, 128, 128, ResizePolicy::kCrop, true, 8},     // 200x150 >= 171x128
      {1600, 1200, 400, 400, ResizePolicy::kCrop, true, 2},     // 1/4: 400x300 < 533x400
      {1600, 1200, 128, 128, ResizePolicy::kPad, true, 8},      // needs 128x96
      {1600, 1200, 150, 200, ResizePolicy::kStretch, true, 4},  // 1/8 fits only unrotated
      {1600, 1200, 600, 800, ResizePolicy::kStretch, true, 1},  // 1/2 fits only unrotated
      {1599, 1599, 100, 200, ResizePolicy::kStretch, true, 8},  // libjpeg rounds up: 200
      {1601, 1201, 100, 200, ResizePolicy::kStretch, true, 4},  // rotated 1/8: 151 < 200
      {200, 200, 128, 128, ResizePolicy::kCrop, true, 1},
      {1600, 1200, 128, 128, ResizePolicy::kCrop, false, 1},
  };
  for (const Case& c : cases) {
    CAPTURE(c.w);
    CAPTURE(c.h);
    CAPTURE(c.tw);
    CAPTURE(c.th);
    CAPTURE(int(c.policy));
    const Bytes jpeg = encode(cv::Mat(c.h, c.w, CV_8UC1, cv::Scalar(90)), ".jpg");
    auto o = options(c.th, c.tw, 3, c.policy);
    o.reduced_decode = c.reduced;
    const auto d = decode(jpeg, o);
    REQUIRE(d.result.ok);
    CHECK(d.result.reduction == c.expected);
    CHECK(near(d.at(o, int(c.th / 2), int(c.tw / 2)), 90, 90, 90, 2));
  }
  // Only JPEG is reduced.
  const auto png = encode(cv::Mat(1200, 1600, CV_8UC1, cv::Scalar(90)), ".png");
  CHECK(decode(png, options(128, 128)).result.reduction == 1);
}

TEST_CASE("jpeg reduced decode is close to the full decode, and faster") {
  const cv::Mat photo = smooth_image(1600, 1200);
  const Bytes jpeg = encode(photo, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 90});
  for (auto policy : {ResizePolicy::kCrop, ResizePolicy::kPad, ResizePolicy::kStretch}) {
    for (uint32_t c : {3u, 1u}) {
      CAPTURE(int(policy));
      CAPTURE(c);
      auto o = options(128, 128, c, policy);
      const auto reduced = decode(jpeg, o);
      o.reduced_decode = false;
      const auto full = decode(jpeg, o);
      REQUIRE(reduced.result.ok);
      REQUIRE(full.result.ok);
      CHECK(reduced.result.reduction == 8);
      CHECK(full.result.reduction == 1);
      const double mad = mean_abs_diff(reduced.pixels, full.pixels);
      MESSAGE("1600x1200 -> 128x128 policy " << std::string(dscache::to_string(policy))
                                             << " channels " << c
                                             << ": mean |reduced - full| = " << mad);
      CHECK(mad < 3.0);
    }
  }
  // Timing, reported only.
  int reduction = 0;
  auto time_ms = [&](bool reduced) {
    auto o = options(224, 224);
    o.reduced_decode = reduced;
    Bytes out(224 * 224 * 3);
    const int n = 5;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      reduction = dscache::decode_image(jpeg.data(), jpeg.size(), o, out.data()).reduction;
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
               .count() /
           n;
  };
  const double full_ms = time_ms(false), reduced_ms = time_ms(true);
  MESSAGE("1600x1200 jpeg -> 224x224 crop: full " << full_ms << " ms, reduced (1/" << reduction
                                                  << ") " << reduced_ms << " ms");
}

TEST_CASE("decoding is deterministic, also from two threads") {
  const Bytes jpeg = encode(smooth_image(640, 480), ".jpg");
  const auto o = options(100, 120);
  const auto first = decode(jpeg, o);
  REQUIRE(first.result.ok);
  CHECK(decode(jpeg, o).pixels == first.pixels);
  bool same[2] = {true, true};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Bytes out(first.pixels.size());
        auto r = dscache::decode_image(jpeg.data(), jpeg.size(), o, out.data());
        if (!r.ok || out != first.pixels) same[t] = false;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(same[0]);
  CHECK(same[1]);
}

TEST_CASE("resize_pixels applies the same policies to decoded pixels") {
  // An MNIST-like 28x28 grey digit.
  cv::Mat grey(28, 28, CV_8UC1, cv::Scalar(0));
  cv::circle(grey, cv::Point(14, 14), 8, cv::Scalar(255), 3);
  SUBCASE("grey to RGB replicates the resized grey plane") {
    const auto o3 = options(56, 56, 3, ResizePolicy::kStretch);
    const auto o1 = options(56, 56, 1, ResizePolicy::kStretch);
    Bytes rgb(56 * 56 * 3), g(56 * 56);
    dscache::resize_pixels(grey.data, 28, 28, 1, o3, rgb.data());
    dscache::resize_pixels(grey.data, 28, 28, 1, o1, g.data());
    size_t lit = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      CHECK(rgb[3 * i] == g[i]);
      CHECK(rgb[3 * i + 1] == g[i]);
      CHECK(rgb[3 * i + 2] == g[i]);
      lit += g[i] > 128;
    }
    CHECK(lit > 100);
  }
  SUBCASE("same size, same channels is a copy") {
    Bytes out(28 * 28);
    dscache::resize_pixels(grey.data, 28, 28, 1, options(28, 28, 1), out.data());
    CHECK(std::memcmp(out.data(), grey.data, out.size()) == 0);
  }
  SUBCASE("RGB to grey uses RGB weights") {
    const Bytes red = {255, 0, 0, 255, 0, 0, 255, 0, 0, 255, 0, 0};  // 2x2 RGB
    uint8_t out[4];
    dscache::resize_pixels(red.data(), 2, 2, 3, options(2, 2, 1), out);
    CHECK(int(out[0]) == 76);  // 0.299 * 255, so red was read as R
  }
  SUBCASE("pad and crop on a wide source") {
    Bytes wide(10 * 40, 200);  // 10 rows, 40 columns
    Bytes out(20 * 20);
    dscache::resize_pixels(wide.data(), 10, 40, 1, options(20, 20, 1, ResizePolicy::kPad),
                           out.data());
    // 40x10 fits as 20x5, rows 7..11.
    for (int y = 0; y < 20; ++y) CHECK(int(out[y * 20 + 10]) == ((y >= 7 && y < 12) ? 200 : 0));
    dscache::resize_pixels(wide.data(), 10, 40, 1, options(20, 20, 1, ResizePolicy::kCrop),
                           out.data());
    for (uint8_t v : out) CHECK(int(v) == 200);
  }
}
