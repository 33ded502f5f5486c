// dscache/ingest/coco.h: mask images decoded as class ids (decode_mask): grey 8/16-bit, palette
// PNGs as indices, colour refused.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/ingest/coco.h"
#include "test_util.h"

using dscache::CocoInstances;
using dscache::Error;
using dscache::ErrorKind;
using dscache::test::expect_error;
using dscache::test::TempDir;
using dscache::test::write_all;
using json = nlohmann::json;

namespace {

// A PNG chunk: length, type, data, CRC-32 of type + data (big-endian numbers).
std::string png_chunk(const char* type, const std::string& data) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  std::string body = std::string(type, 4) + data;
  const uint32_t crc =
      crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return be32(static_cast<uint32_t>(data.size())) + body + be32(crc);
}

// A palette PNG (colour type 3), or with `grey` a grey one (type 0), of `bits` per pixel, written
// by hand: OpenCV writes neither palettes nor grey below 8 bits.
std::string packed_png(uint32_t w, uint32_t h, int bits, const std::vector<uint8_t>& idx,
                       bool grey = false) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  std::string ihdr =
      be32(w) + be32(h) + std::string{static_cast<char>(bits), grey ? '\0' : '\3', 0, 0, 0};
  std::string plte;
  for (int i = 0; i < (1 << bits); ++i) plte += std::string{char(i * 7), char(255 - i), char(i)};
  std::string raw;
  for (uint32_t y = 0; y < h; ++y) {
    raw += '\0';  // filter: none
    std::vector<uint8_t> row((w * bits + 7) / 8, 0);
    for (uint32_t x = 0; x < w; ++x) {
      const uint32_t bit = x * bits;
      row[bit / 8] |= static_cast<uint8_t>(idx[y * w + x] << (8 - bits - bit % 8));
    }
    raw.append(row.begin(), row.end());
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  REQUIRE(compress(reinterpret_cast<Bytef*>(&z[0]), &zlen,
                   reinterpret_cast<const Bytef*>(raw.data()), raw.size()) == Z_OK);
  z.resize(zlen);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) +
         (grey ? "" : png_chunk("PLTE", plte)) + png_chunk("IDAT", z) + png_chunk("IEND", "");
}

std::vector<uint8_t> bytes_of(const std::vector<uchar>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_SUITE("coco") {
  TEST_CASE("decode_mask: grey 8/16-bit as stored, palette PNG as indices, colour refused") {
    const int w = 13, h = 7;
    cv::Mat m8(h, w, CV_8UC1), m16(h, w, CV_16UC1);
    std::vector<uint8_t> idx(w * h);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        m8.at<uint8_t>(y, x) = static_cast<uint8_t>((x * 3 + y) % 21);
        m16.at<uint16_t>(y, x) = static_cast<uint16_t>(x * 997 + y * 13);
        idx[y * w + x] = static_cast<uint8_t>((x + 2 * y) % 16);
      }
    }
    std::vector<uchar> png8, png16, rgb, rgba;
    REQUIRE(cv::imencode(".png", m8, png8));
    REQUIRE(cv::imencode(".png", m16, png16));
    REQUIRE(cv::imencode(".png", cv::Mat(h, w, CV_8UC3, cv::Scalar(1, 2, 3)), rgb));
    REQUIRE(cv::imencode(".png", cv::Mat(h, w, CV_8UC4, cv::Scalar(1, 2, 3, 4)), rgba));
    std::vector<uchar> jpeg;
    REQUIRE(cv::imencode(".jpg", cv::Mat(h, w, CV_8UC3, cv::Scalar(1, 2, 3)), jpeg));
    const std::string pal8 = packed_png(w, h, 8, idx), pal4 = packed_png(w, h, 4, idx);
    std::vector<uint8_t> binary(w * h);
    for (int p = 0; p < w * h; ++p) binary[p] = idx[p] & 1;
    const std::string grey4 = packed_png(w, h, 4, idx, true);
    const std::string grey1 = packed_png(w, h, 1, binary, true);
    std::vector<uint8_t> expect8(m8.data, m8.data + w * h);
    std::vector<uint8_t> expect16(reinterpret_cast<uint8_t*>(m16.data),
                                  reinterpret_cast<uint8_t*>(m16.data) + 2 * w * h);
    struct Case {
      const char* what;
      std::vector<uint8_t> bytes;
      uint32_t element_bytes;  // 0: refused with `reason`
      std::vector<uint8_t> expect;
      const char* reason;
    };
    const Case cases[] = {
        {"8-bit grey", bytes_of(png8), 1, expect8, ""},
        {"16-bit grey", bytes_of(png16), 2, expect16, ""},
#ifdef DSCACHE_TEST_HAVE_LIBPNG
        {"8-bit palette", {pal8.begin(), pal8.end()}, 1, idx, ""},
        {"4-bit palette", {pal4.begin(), pal4.end()}, 1, idx, ""},
        {"4-bit grey, unscaled", {grey4.begin(), grey4.end()}, 1, idx, ""},
        {"1-bit grey: 0 and 1, not 255", {grey1.begin(), grey1.end()}, 1, binary, ""},
        {"truncated palette", {pal8.begin(), pal8.begin() + 60}, 0, {}, "cannot decode"},
#else
        {"palette without libpng", {pal8.begin(), pal8.end()}, 0, {}, "palette PNG"},
        {"1-bit grey without libpng", {grey1.begin(), grey1.end()}, 0, {}, "grey PNG of 1 bits"},
#endif
        {"RGB PNG", bytes_of(rgb), 0, {}, "mask is RGB (3 channels): expected one channel"},
        {"RGBA PNG", bytes_of(rgba), 0, {}, "mask is RGBA (4 channels)"},
        {"colour JPEG", bytes_of(jpeg), 0, {}, "mask is RGB (3 channels)"},
        {"garbage", {1, 2, 3, 4, 5}, 0, {}, "cannot decode"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.what);
      std::vector<uint8_t> out;
      uint32_t hh = 0, ww = 0, eb = 0;
      std::string reason;
      const bool ok =
          dscache::decode_mask(c.bytes.data(), c.bytes.size(), &out, &hh, &ww, &eb, &reason);
      CAPTURE(reason);
      REQUIRE(ok == (c.element_bytes != 0));
      if (!ok) {
        CHECK(reason.find(c.reason) != std::string::npos);
        continue;
      }
      CHECK(hh == h);
      CHECK(ww == w);
      CHECK(eb == c.element_bytes);
      CHECK(out == c.expect);
    }
  }
#ifdef DSCACHE_TEST_HAVE_LIBPNG
  TEST_CASE("decode_mask reads a VOC-style palette PNG written by PIL as its indices") {
    TempDir tmp;
    // PIL's "P" mode: what VOC's SegmentationClass masks are (255 = the border class).
    REQUIRE(dscache::test::run_python(tmp, R"(
import sys
from PIL import Image
im = Image.new("P", (11, 6))
im.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [224, 224, 192] * 253)
im.putdata([255 if x == 0 else (x + y) % 3 for y in range(6) for x in range(11)])
im.save(sys.argv[1])
)",
                                      tmp.file("voc.png")) == 0);
    const std::string png = dscache::test::read_all(tmp.file("voc.png"));
    std::vector<uint8_t> out;
    uint32_t hh = 0, ww = 0, eb = 0;
    std::string reason;
    REQUIRE(dscache::decode_mask(reinterpret_cast<const uint8_t*>(png.data()), png.size(), &out,
                                 &hh, &ww, &eb, &reason));
    CHECK(hh == 6);
    CHECK(ww == 11);
    CHECK(eb == 1);
    REQUIRE(out.size() == 66);
    for (uint32_t y = 0; y < 6; ++y) {
      for (uint32_t x = 0; x < 11; ++x) CHECK(out[y * 11 + x] == (x == 0 ? 255 : (x + y) % 3));
    }
  }
#endif
}
