// JPEG source fixtures with EXIF blocks (test_decode_jpeg.cpp, test_decode_orientation.cpp): a
// photo-like image, and APP1 segments (Exif with an Orientation tag, XMP) put into a real
// encoded JPEG after its SOI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "decode_fixtures.h"

namespace dscache::test {

// A smooth photo-like BGR image with detail: gradients plus a seeded texture.
inline cv::Mat photo_like(int h, int w, uint64_t seed) {
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

// An APP1 segment (marker and length included) holding `payload`.
inline Bytes app1_segment(const Bytes& payload) {
  Bytes seg = {0xFF, 0xE1, 0, 0};
  seg.insert(seg.end(), payload.begin(), payload.end());
  const size_t len = seg.size() - 2;
  seg[2] = static_cast<uint8_t>(len >> 8);
  seg[3] = static_cast<uint8_t>(len);
  return seg;
}

// An APP1 Exif segment whose IFD0 holds Orientation = `orientation` (little- or big-endian).
inline Bytes exif_app1(uint16_t orientation, bool big_endian) {
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
  Bytes payload = {'E', 'x', 'i', 'f', 0, 0};
  payload.insert(payload.end(), tiff.begin(), tiff.end());
  return app1_segment(payload);
}

// An APP1 XMP segment (what photo editors write beside Exif), without an orientation.
inline Bytes xmp_app1() {
  const std::string text = std::string("http://ns.adobe.com/xap/1.0/") + '\0' +
                           "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"></x:xmpmeta>";
  return app1_segment(Bytes(text.begin(), text.end()));
}

// `jpeg` with `segments` inserted, in order, right after its SOI.
inline Bytes with_segments(const Bytes& jpeg, const std::vector<Bytes>& segments) {
  Bytes out(jpeg.begin(), jpeg.begin() + 2);  // SOI
  for (const Bytes& s : segments) out.insert(out.end(), s.begin(), s.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

// `jpeg` with one Exif segment saying `orientation`.
inline Bytes with_orientation(const Bytes& jpeg, uint16_t orientation, bool big_endian) {
  return with_segments(jpeg, {exif_app1(orientation, big_endian)});
}

}  // namespace dscache::test
