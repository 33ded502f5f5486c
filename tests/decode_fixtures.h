// Fixtures of the image decoding tests (test_decode*.cpp): images encoded with OpenCV, PNG and
// baseline JPEG files built byte by byte (CMYK, lying headers), and pixel comparisons.
#pragma once

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

#include "dscache/error.h"
#include "dscache/ingest/idx.h"
#include "dscache/ingest/image_decode.h"
#include "temp_dir.h"

namespace dscache::test {

// The library's names the test files use unqualified: they take them, with the fixtures,
// by `using namespace dscache::test`.
using dscache::DecodeOptions;
using dscache::DecodeResult;
using dscache::ImageFormat;
using dscache::ResizePolicy;

using Bytes = std::vector<uint8_t>;

inline Bytes encode(const cv::Mat& bgr, const std::string& ext,
                    const std::vector<int>& params = {}) {
  Bytes out;
  REQUIRE(cv::imencode(ext, bgr, out, params));
  return out;
}

inline DecodeOptions options(uint32_t h, uint32_t w, uint32_t c = 3,
                             ResizePolicy policy = ResizePolicy::kCrop) {
  DecodeOptions o;
  o.height = h;
  o.width = w;
  o.channels = c;
  o.resize = policy;
  return o;
}

struct Decoded {
  DecodeResult result;
  Bytes pixels;
  const uint8_t* at(const DecodeOptions& o, int y, int x) const {
    return &pixels[(size_t(y) * o.width + x) * o.channels];
  }
};

inline Decoded decode(const Bytes& bytes, const DecodeOptions& o) {
  Decoded d;
  d.pixels.assign(size_t(o.height) * o.width * o.channels, 0xAB);
  d.result = dscache::decode_image(bytes.data(), bytes.size(), o, d.pixels.data());
  return d;
}

inline double mean_abs_diff(const Bytes& a, const Bytes& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / double(a.size());
}

inline void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
inline void put_be16(Bytes& b, uint32_t v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}

// --- A minimal PNG writer: stored (uncompressed) deflate blocks, so no zlib is needed. --------

inline uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline void png_chunk(Bytes& png, const char* type, const Bytes& data) {
  put_be32(png, uint32_t(data.size()));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  png.insert(png.end(), body.begin(), body.end());
  put_be32(png, crc32(body.data(), body.size()));
}

// rows: height rows of raw scanline bytes (without filter bytes). IDAT omitted when rows empty.
inline Bytes make_png(uint32_t w, uint32_t h, uint8_t depth, uint8_t color_type,
                      const std::vector<Bytes>& rows, const Bytes& plte = {},
                      const Bytes& trns = {}) {
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Bytes ihdr;
  put_be32(ihdr, w);
  put_be32(ihdr, h);
  ihdr.insert(ihdr.end(), {depth, color_type, 0, 0, 0});
  png_chunk(png, "IHDR", ihdr);
  if (!plte.empty()) png_chunk(png, "PLTE", plte);
  if (!trns.empty()) png_chunk(png, "tRNS", trns);
  if (!rows.empty()) {
    Bytes raw;
    for (const Bytes& r : rows) {
      raw.push_back(0);  // filter: none
      raw.insert(raw.end(), r.begin(), r.end());
    }
    Bytes z = {0x78, 0x01};
    size_t pos = 0;
    do {
      size_t n = std::min<size_t>(raw.size() - pos, 65535);
      z.push_back(pos + n == raw.size() ? 1 : 0);
      z.insert(z.end(), {uint8_t(n), uint8_t(n >> 8), uint8_t(~n), uint8_t(~n >> 8)});
      z.insert(z.end(), raw.begin() + pos, raw.begin() + pos + n);
      pos += n;
    } while (pos < raw.size());
    uint32_t a = 1, b = 0;  // adler32
    for (uint8_t c : raw) {
      a = (a + c) % 65521;
      b = (b + a) % 65521;
    }
    put_be32(z, (b << 16) | a);
    png_chunk(png, "IDAT", z);
  }
  png_chunk(png, "IEND", {});
  return png;
}

// --- A minimal baseline JPEG writer for flat colours: every block is DC-only. ---------------
// Used for CMYK (which OpenCV cannot encode) and for headers claiming huge dimensions.

class BitWriter {
 public:
  explicit BitWriter(Bytes* out) : out_(out) {}
  void put(uint32_t bits, int n) {
    for (int i = n - 1; i >= 0; --i) {
      acc_ = (acc_ << 1) | ((bits >> i) & 1);
      if (++count_ == 8) flush_byte();
    }
  }
  void finish() {
    while (count_ != 0) put(1, 1);  // pad with ones
  }

 private:
  void flush_byte() {
    out_->push_back(uint8_t(acc_));
    if (uint8_t(acc_) == 0xFF) out_->push_back(0x00);  // byte stuffing
    acc_ = 0;
    count_ = 0;
  }
  Bytes* out_;
  uint32_t acc_ = 0;
  int count_ = 0;
};

// `values` holds one sample value per component (1, 3 or 4 components, no subsampling). With
// 4 components an Adobe APP14 marker (transform 0) declares Adobe-style (inverted) CMYK.
// With with_scan false only the headers are written (for huge claimed sizes).
inline Bytes make_flat_jpeg(uint32_t w, uint32_t h, const std::vector<int>& values,
                            bool with_scan = true) {
  const int nc = int(values.size());
  Bytes j = {0xFF, 0xD8};
  if (nc == 4) {
    j.insert(j.end(), {0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0});
  }
  j.insert(j.end(), {0xFF, 0xDB, 0, 67, 0x00});  // DQT: table 0, all ones
  j.insert(j.end(), 64, 1);
  j.insert(j.end(), {0xFF, 0xC0});  // SOF0
  put_be16(j, 8 + 3 * nc);
  j.push_back(8);
  put_be16(j, h);
  put_be16(j, w);
  j.push_back(uint8_t(nc));
  for (int c = 0; c < nc; ++c) j.insert(j.end(), {uint8_t(c + 1), 0x11, 0});
  // DC table 0: categories 0..11, all 4-bit codes. AC table 0: only EOB, code "0".
  j.insert(j.end(), {0xFF, 0xC4, 0, 31, 0x00, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  for (uint8_t s = 0; s < 12; ++s) j.push_back(s);
  j.insert(j.end(), {0xFF, 0xC4, 0, 20, 0x10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  if (with_scan) {
    j.insert(j.end(), {0xFF, 0xDA});
    put_be16(j, 6 + 2 * nc);
    j.push_back(uint8_t(nc));
    for (int c = 0; c < nc; ++c) j.insert(j.end(), {uint8_t(c + 1), 0x00});
    j.insert(j.end(), {0, 63, 0});
    BitWriter bits(&j);
    std::vector<int> pred(nc, 0);
    const uint64_t mcus = uint64_t((w + 7) / 8) * ((h + 7) / 8);
    for (uint64_t m = 0; m < mcus; ++m) {
      for (int c = 0; c < nc; ++c) {
        int dc = 8 * (values[c] - 128);  // DCT of a flat block, quantizer 1
        int diff = dc - pred[c];
        pred[c] = dc;
        int mag = std::abs(diff), cat = 0;
        while (mag >> cat) ++cat;
        bits.put(uint32_t(cat), 4);
        if (cat) bits.put(uint32_t(diff >= 0 ? diff : diff + (1 << cat) - 1), cat);
        bits.put(0, 1);  // EOB
      }
    }
    bits.finish();
  }
  j.insert(j.end(), {0xFF, 0xD9});
  return j;
}

// A smooth synthetic photo-like image (gradients and blurred shapes), BGR.
inline cv::Mat smooth_image(int w, int h) {
  cv::Mat img(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      img.at<cv::Vec3b>(y, x) =
          cv::Vec3b(uint8_t(128 + 100 * std::sin(x / 57.0)),
                    uint8_t(128 + 100 * std::cos(y / 43.0)), uint8_t((x + y) * 255 / (w + h)));
    }
  }
  for (int i = 0; i < 12; ++i) {
    cv::circle(img, cv::Point((i * 397) % w, (i * 211) % h), 20 + (i * 37) % (h / 4),
               cv::Scalar((i * 50) % 256, (i * 90) % 256, (i * 130) % 256), cv::FILLED);
  }
  cv::GaussianBlur(img, img, cv::Size(0, 0), 3.0);
  return img;
}

// Left half one colour, right half another (BGR).
inline cv::Mat halves(int w, int h, cv::Scalar left, cv::Scalar right) {
  cv::Mat img(h, w, CV_8UC3, right);
  img(cv::Rect(0, 0, w / 2, h)).setTo(left);
  return img;
}

inline bool near(const uint8_t* px, int r, int g, int b, int tol = 0) {
  return std::abs(px[0] - r) <= tol && std::abs(px[1] - g) <= tol && std::abs(px[2] - b) <= tol;
}

inline Bytes read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace dscache::test
