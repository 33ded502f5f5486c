// JPEG sources decoded by libcache's libjpeg-turbo decoder (libcache/ingest/jpeg_direct.h) give
// exactly the pixels of OpenCV's imdecode path (DecodeOptions::opencv_jpeg), at every DCT
// reduction, layout and output; and the streams that path leaves to OpenCV (EXIF orientation,
// CMYK, trailing bytes, damage) still decode as OpenCV decodes them.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "decode_fixtures.h"
#include "dscache/jpeg.h"

using namespace dscache::test;

namespace {

// A smooth photo-like BGR image with detail: gradients plus a seeded texture.
cv::Mat photo_like(int h, int w, uint64_t seed) {
  cv::Mat img(h, w, CV_8UC3);
  cv::RNG rng(seed);
  cv::randu(img, cv::Scalar::all(0), cv::Scalar::all(255));
  cv::GaussianBlur(img, img, cv::Size(0, 0), 3.0);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      cv::Vec3b& p = img.at<cv::Vec3b>(y, x);
      p[0] = static_cast<uint8_t>((p[0] + x * 255 / w) / 2);
      p[2] = static_cast<uint8_t>((p[2] + y * 255 / h) / 2);
    }
  }
  return img;
}

// An APP1 Exif segment whose IFD0 holds Orientation = `orientation` (little- or big-endian).
Bytes with_orientation(const Bytes& jpeg, uint16_t orientation, bool big_endian) {
  Bytes tiff = big_endian ? Bytes{'M', 'M', 0, 42, 0, 0, 0, 8} : Bytes{'I', 'I', 42, 0, 8, 0, 0, 0};
  const auto put16 = [&](uint16_t v) {
    tiff.push_back(static_cast<uint8_t>(big_endian ? v >> 8 : v));
    tiff.push_back(static_cast<uint8_t>(big_endian ? v : v >> 8));
  };
  const auto put32 = [&](uint32_t v) {
    put16(static_cast<uint16_t>(big_endian ? v >> 16 : v));
    put16(static_cast<uint16_t>(big_endian ? v : v >> 16));
  };
  put16(1);       // one entry
  put16(0x0112);  // Orientation
  put16(3);       // SHORT
  put32(1);       // one value
  put16(orientation);
  put16(0);
  put32(0);  // no next IFD
  Bytes app1 = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  const size_t len = app1.size() - 2;
  app1[2] = static_cast<uint8_t>(len >> 8);
  app1[3] = static_cast<uint8_t>(len);
  Bytes out(jpeg.begin(), jpeg.begin() + 2);  // SOI
  out.insert(out.end(), app1.begin(), app1.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

// A BGR image as a JPEG cache stores it (dscache::jpeg_encode: RGB in, 4:2:0, restart markers).
Bytes ours(const cv::Mat& bgr) {
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  Bytes out;
  dscache::jpeg_encode(rgb.data, static_cast<uint32_t>(rgb.rows), static_cast<uint32_t>(rgb.cols),
                       3, 90, &out);
  return out;
}

struct Pair {
  Decoded direct, opencv;
};

Pair decode_both(const Bytes& jpeg, DecodeOptions o) {
  o.opencv_jpeg = false;
  Pair p{decode(jpeg, o), {}};
  o.opencv_jpeg = true;
  p.opencv = decode(jpeg, o);
  return p;
}

}  // namespace

TEST_CASE("jpeg sources: libcache's decoder gives imdecode's pixels at every reduction") {
  const cv::Mat a = photo_like(333, 517, 1), b = photo_like(480, 270, 2);
  cv::Mat grey;
  cv::cvtColor(a, grey, cv::COLOR_BGR2GRAY);
  struct Stream {
    const char* name;
    Bytes bytes;
  };
  const std::vector<Stream> streams = {
      {"4:2:0 q90", encode(a, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 90})},
      {"4:2:0 portrait q75", encode(b, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 75})},
      {"progressive", encode(a, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})},
      {"restart markers", encode(b, ".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 3})},
      {"dscache's jpeg_encode (restart segments)", ours(b)},
      {"grey", encode(grey, ".jpg")},
      {"orientation 1 (identity)", with_orientation(encode(a, ".jpg"), 1, false)},
  };
  // Output sizes that take every reduction: 1/8 (<= 1/8 of the source), 1/4, 1/2 and none.
  const uint32_t sizes[] = {32, 64, 128, 300};
  std::set<int> reductions;
  int compared = 0;
  for (const Stream& s : streams) {
    for (uint32_t n : sizes) {
      for (uint32_t c : {3u, 1u}) {
        for (ResizePolicy policy :
             {ResizePolicy::kCrop, ResizePolicy::kPad, ResizePolicy::kStretch}) {
          CAPTURE(s.name);
          CAPTURE(n);
          CAPTURE(c);
          const Pair p = decode_both(s.bytes, options(n, n + 7, c, policy));
          REQUIRE(p.direct.result.ok);
          REQUIRE(p.opencv.result.ok);
          CHECK(p.direct.result.libjpeg_direct);
          CHECK_FALSE(p.opencv.result.libjpeg_direct);
          CHECK(p.direct.result.reduction == p.opencv.result.reduction);
          CHECK(p.direct.result.decoded_width == p.opencv.result.decoded_width);
          CHECK(p.direct.result.decoded_height == p.opencv.result.decoded_height);
          CHECK(p.direct.pixels == p.opencv.pixels);
          reductions.insert(p.direct.result.reduction);
          ++compared;
        }
      }
      // Ragged: the shorter side shrunk to n.
      for (uint32_t c : {3u, 1u}) {
        DecodeOptions o = options(1, 1, c);
        std::vector<uint8_t> px[2];
        uint32_t h[2], w[2];
        DecodeResult r[2];
        for (int k = 0; k < 2; ++k) {
          o.opencv_jpeg = k == 1;
          r[k] = dscache::decode_image_ragged(s.bytes.data(), s.bytes.size(), o, n, &px[k], &h[k],
                                              &w[k]);
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
  MESSAGE(compared << " decodes equal to imdecode's");
  CHECK(reductions == std::set<int>{1, 2, 4, 8});
}

TEST_CASE("jpeg sources libcache's decoder leaves to OpenCV decode as OpenCV decodes them") {
  const cv::Mat a = photo_like(120, 200, 3);
  const Bytes plain = encode(a, ".jpg");
  Bytes trailing = plain;
  trailing.insert(trailing.end(), {0x00, 0x11, 0x22});
  // A stray RST marker in the entropy-coded data: libjpeg warns (corrupt data), OpenCV goes on.
  Bytes damaged = plain;
  size_t at = damaged.size() * 2 / 3;
  while (damaged[at - 1] == 0xFF) ++at;  // not inside a stuffed FF 00
  damaged.insert(damaged.begin() + static_cast<std::ptrdiff_t>(at), {0xFF, 0xD3});
  struct Case {
    const char* name;
    Bytes bytes;
    bool ignore_orientation;
    bool direct;  // expected path
  };
  const std::vector<Case> cases = {
      {"orientation 6, applied", with_orientation(plain, 6, false), false, false},
      {"orientation 3, big-endian, applied", with_orientation(plain, 3, true), false, false},
      {"orientation 6, ignored", with_orientation(plain, 6, false), true, true},
      {"CMYK", make_flat_jpeg(40, 24, {10, 200, 30, 0}), false, false},
      {"bytes after EOI", trailing, false, false},
  };
  for (const Case& k : cases) {
    CAPTURE(k.name);
    DecodeOptions o = options(48, 64);
    o.ignore_orientation = k.ignore_orientation;
    const Pair p = decode_both(k.bytes, o);
    REQUIRE(p.direct.result.ok);
    REQUIRE(p.opencv.result.ok);
    CHECK(p.direct.result.libjpeg_direct == k.direct);
    CHECK(p.direct.pixels == p.opencv.pixels);
  }
  // Damage OpenCV decodes leniently: whatever it gives, both paths give (libjpeg's warning sends
  // it to OpenCV).
  const Pair p = decode_both(damaged, options(48, 64));
  CHECK(p.direct.result.ok == p.opencv.result.ok);
  CHECK(p.direct.pixels == p.opencv.pixels);
  CHECK_FALSE(p.direct.result.libjpeg_direct);
}
