// JPEG sources with an EXIF orientation take libcache's decoder (libcache/ingest/jpeg_direct.h)
// and are turned after the decode: for each of the 8 orientations, little- and big-endian, at
// every DCT reduction, resize policy, channel count and the ragged layout, the pixels equal
// OpenCV's (imdecode applies the orientation, then the same resize) exactly, and the oriented
// image is the stored one moved as the EXIF standard says. EXIF blocks whose orientation is not
// certain still go to OpenCV.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "decode_fixtures.h"
#include "jpeg_exif_fixtures.h"

using namespace dscache::test;

namespace {

struct Pair {
  Decoded direct, opencv;  // libcache's decoder allowed / DecodeOptions::opencv_jpeg
};

Pair decode_both(const Bytes& jpeg, DecodeOptions o) {
  o.opencv_jpeg = false;
  Pair p{decode(jpeg, o), {}};
  o.opencv_jpeg = true;
  p.opencv = decode(jpeg, o);
  return p;
}

// The stored pixel (row, column) that the displayed pixel (r, c) of an image stored h x w shows
// under EXIF `orientation` (TIFF 6.0 / Exif 2.3's table: 6 is turned 90 degrees clockwise).
std::pair<int, int> stored_at(int orientation, int r, int c, int h, int w) {
  switch (orientation) {
    case 2:
      return {r, w - 1 - c};
    case 3:
      return {h - 1 - r, w - 1 - c};
    case 4:
      return {h - 1 - r, c};
    case 5:
      return {c, r};
    case 6:
      return {h - 1 - c, r};
    case 7:
      return {h - 1 - c, w - 1 - r};
    case 8:
      return {c, w - 1 - r};
    default:
      return {r, c};
  }
}

struct Source {
  std::string name;
  Bytes plain;  // without EXIF
  int h, w, c;  // stored size, channels
};

std::vector<Source> sources() {
  const cv::Mat a = photo_like(333, 517, 11), b = photo_like(270, 480, 12);
  cv::Mat grey;
  cv::cvtColor(a, grey, cv::COLOR_BGR2GRAY);
  return {
      {"4:2:0 q90 landscape", encode(a, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 90}), 333, 517, 3},
      {"progressive, restart markers",
       encode(b, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1, cv::IMWRITE_JPEG_RST_INTERVAL, 2}), 270,
       480, 3},
      {"grey", encode(grey, ".jpg"), 333, 517, 1},
  };
}

}  // namespace

TEST_CASE("every EXIF orientation: libcache's decoder, then imdecode's turn, imdecode's pixels") {
  const uint32_t sizes[] = {32, 64, 128, 300};  // reductions 1/8, 1/4, 1/2 and none
  std::set<int> reductions;
  int compared = 0;
  for (const Source& s : sources()) {
    for (uint16_t orientation = 1; orientation <= 8; ++orientation) {
      const Bytes jpeg = with_orientation(s.plain, orientation, orientation % 2 == 0);
      CAPTURE(s.name);
      CAPTURE(orientation);
      for (uint32_t n : sizes) {
        for (uint32_t c : {3u, 1u}) {
          for (ResizePolicy policy :
               {ResizePolicy::kCrop, ResizePolicy::kPad, ResizePolicy::kStretch}) {
            CAPTURE(n);
            CAPTURE(c);
            const Pair p = decode_both(jpeg, options(n, n + 7, c, policy));
            REQUIRE(p.direct.result.ok);
            REQUIRE(p.opencv.result.ok);
            CHECK(p.direct.result.libjpeg_direct);  // the fast decoder took it
            CHECK_FALSE(p.opencv.result.libjpeg_direct);
            CHECK(p.direct.result.reduction == p.opencv.result.reduction);
            CHECK(p.direct.result.decoded_width == p.opencv.result.decoded_width);
            CHECK(p.direct.result.decoded_height == p.opencv.result.decoded_height);
            CHECK(p.direct.pixels == p.opencv.pixels);
            reductions.insert(p.direct.result.reduction);
            ++compared;
          }
        }
        // Ragged: the shorter side shrunk to n (its reduction is chosen on the stored sides).
        DecodeOptions o = options(1, 1, 3);
        std::vector<uint8_t> px[2];
        uint32_t h[2], w[2];
        dscache::DecodeResult r[2];
        for (int k = 0; k < 2; ++k) {
          o.opencv_jpeg = k == 1;
          r[k] = dscache::decode_image_ragged(jpeg.data(), jpeg.size(), o, n, &px[k], &h[k], &w[k]);
          REQUIRE(r[k].ok);
        }
        CHECK(r[0].libjpeg_direct);
        CHECK(h[0] == h[1]);
        CHECK(w[0] == w[1]);
        CHECK(px[0] == px[1]);
        ++compared;
      }
    }
  }
  MESSAGE(compared << " oriented decodes equal to OpenCV's");
  CHECK(reductions == std::set<int>{1, 2, 4, 8});
}

TEST_CASE("every EXIF orientation at full size: the stored image moved as the standard says") {
  for (const Source& s : sources()) {
    // The stored pixels, orientation not applied (both decoders agree on those: test_decode_jpeg).
    DecodeOptions as_stored = options(uint32_t(s.h), uint32_t(s.w), uint32_t(s.c));
    as_stored.ignore_orientation = true;
    const Decoded stored = decode(with_orientation(s.plain, 6, false), as_stored);
    REQUIRE(stored.result.ok);
    for (uint16_t orientation = 1; orientation <= 8; ++orientation) {
      CAPTURE(s.name);
      CAPTURE(orientation);
      const bool swapped = orientation >= 5;
      const int dh = swapped ? s.w : s.h, dw = swapped ? s.h : s.w;
      const Bytes jpeg = with_orientation(s.plain, orientation, orientation % 2 == 1);
      const Decoded d =
          decode(jpeg, options(uint32_t(dh), uint32_t(dw), uint32_t(s.c), ResizePolicy::kStretch));
      REQUIRE(d.result.ok);
      CHECK(d.result.libjpeg_direct);
      CHECK(d.result.reduction == 1);
      CHECK(int(d.result.decoded_width) == dw);
      CHECK(int(d.result.decoded_height) == dh);
      int wrong = 0;
      for (int r = 0; r < dh; ++r) {
        for (int c = 0; c < dw; ++c) {
          const auto [sr, sc] = stored_at(orientation, r, c, s.h, s.w);
          const uint8_t* want = &stored.pixels[(size_t(sr) * s.w + sc) * s.c];
          const uint8_t* got = &d.pixels[(size_t(r) * dw + c) * s.c];
          wrong += std::memcmp(want, got, size_t(s.c)) != 0;
        }
      }
      CHECK(wrong == 0);
      // OpenCV's own decode (IMREAD_COLOR / IMREAD_GRAYSCALE apply the orientation) is the same.
      cv::Mat cv_img = cv::imdecode(jpeg, s.c == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
      REQUIRE(cv_img.rows == dh);
      REQUIRE(cv_img.cols == dw);
      if (s.c == 3) cv::cvtColor(cv_img, cv_img, cv::COLOR_BGR2RGB);
      CHECK(Bytes(cv_img.data, cv_img.data + cv_img.total() * cv_img.elemSize()) == d.pixels);
    }
  }
}

TEST_CASE("EXIF blocks whose orientation is not certain are decoded by OpenCV, as OpenCV does") {
  const Bytes plain = encode(photo_like(120, 200, 13), ".jpg");
  struct Case {
    std::string name;
    Bytes bytes;
    bool direct;  // expected path
  };
  const std::vector<Case> cases = {
      {"two Exif segments that agree",
       with_segments(plain, {exif_app1(6, false), exif_app1(6, true)}), true},
      {"XMP only", with_segments(plain, {xmp_app1()}), true},
      {"XMP, then Exif orientation 1", with_segments(plain, {xmp_app1(), exif_app1(1, false)}),
       true},
      {"Exif 6, then XMP", with_segments(plain, {exif_app1(6, false), xmp_app1()}), true},
      // OpenCV reads the first APP1 only: which orientation it applies is its business.
      {"XMP, then Exif orientation 6", with_segments(plain, {xmp_app1(), exif_app1(6, false)}),
       false},
      {"two Exif segments that disagree",
       with_segments(plain, {exif_app1(6, false), exif_app1(3, false)}), false},
      {"orientation 0 (not in the table)", with_orientation(plain, 0, false), false},
      {"orientation 9 (not in the table)", with_orientation(plain, 9, true), false},
  };
  for (const Case& k : cases) {
    CAPTURE(k.name);
    for (ResizePolicy policy : {ResizePolicy::kCrop, ResizePolicy::kStretch}) {
      const Pair p = decode_both(k.bytes, options(48, 64, 3, policy));
      REQUIRE(p.direct.result.ok);
      REQUIRE(p.opencv.result.ok);
      CHECK(p.direct.result.libjpeg_direct == k.direct);
      CHECK(p.direct.pixels == p.opencv.pixels);
    }
  }
}
