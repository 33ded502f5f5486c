// JPEG sources decoded by libcache's libjpeg-turbo decoder (libcache/ingest/jpeg_direct.h) give
// exactly the pixels of OpenCV's imdecode path (DecodeOptions::opencv_jpeg), at every DCT
// reduction, layout and output; and the streams that path leaves to OpenCV (CMYK, trailing bytes,
// damage) still decode as OpenCV decodes them. EXIF orientations: test_decode_orientation.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "decode_fixtures.h"
#include "dscache/jpeg.h"
#include "jpeg_exif_fixtures.h"

using namespace dscache::test;

namespace {

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
      {"orientation 6, applied after the decode", with_orientation(plain, 6, false), false, true},
      {"orientation 3, big-endian, applied", with_orientation(plain, 3, true), false, true},
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
