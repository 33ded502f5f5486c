// What the decoding module reads before it decodes: format sniffing by magic bytes, image
// headers (every format OpenCV writes, hand-built ones, bottom-up BMP) and idx headers (a
// gzip bomb bounded by its header, FIFOs refused).
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

TEST_CASE("sniff_format recognizes magic bytes, not names") {
  struct Case {
    std::string bytes;
    ImageFormat expected;
  };
  const std::string riff_webp("RIFF\x10\0\0\0WEBPVP8 ", 16);
  const Case cases[] = {
      {"\xFF\xD8\xFF\xE0", ImageFormat::kJpeg},
      {"\x89PNG\r\n\x1A\n", ImageFormat::kPng},
      {"GIF87a", ImageFormat::kGif},
      {"GIF89a", ImageFormat::kGif},
      {std::string("BM\0\0\0\0\0\0\0\0\0\0\0\0\x28\0\0\0", 18), ImageFormat::kBmp},
      {std::string("II*\0", 4), ImageFormat::kTiff},
      {std::string("MM\0*", 4), ImageFormat::kTiff},
      {riff_webp, ImageFormat::kWebp},
      {"P1\n", ImageFormat::kPnm},
      {"P5 ", ImageFormat::kPnm},
      {"P6\n", ImageFormat::kPnm},
      {"P7\n", ImageFormat::kPnm},
      {"\xFF\x4F\xFF\x51", ImageFormat::kJpeg2000},
      {std::string("\0\0\0\x0CjP  \r\n\x87\n", 12), ImageFormat::kJpeg2000},
      {"#?RADIANCE\n", ImageFormat::kHdr},
      {"\x59\xA6\x6A\x95", ImageFormat::kSunRaster},
      {"\x76\x2F\x31\x01", ImageFormat::kOpenExr},
      // Near misses.
      {"", ImageFormat::kUnknown},
      {"\xFF\xD8", ImageFormat::kUnknown},
      {"\x89PNG", ImageFormat::kUnknown},
      {"GIF90a", ImageFormat::kUnknown},
      {"BM is a text file that starts with BM", ImageFormat::kUnknown},
      {"RIFF\x10\0\0\0WAVE", ImageFormat::kUnknown},
      {"P8\n", ImageFormat::kUnknown},
      {"Plain text", ImageFormat::kUnknown},
      {"GARBAGE", ImageFormat::kUnknown},
  };
  for (const Case& c : cases) {
    CAPTURE(c.bytes);
    auto* p = reinterpret_cast<const uint8_t*>(c.bytes.data());
    CHECK(dscache::sniff_format(p, c.bytes.size()) == c.expected);
  }
  CHECK(dscache::sniff_format(nullptr, 0) == ImageFormat::kUnknown);
  CHECK(std::string(dscache::to_string(ImageFormat::kJpeg)) == "jpeg");
  CHECK(std::string(dscache::to_string(ImageFormat::kJpeg2000)) == "jpeg2000");
  CHECK(std::string(dscache::to_string(ImageFormat::kUnknown)) == "unknown");
}

TEST_CASE("read_image_header gives the real dimensions of every format OpenCV writes") {
  const cv::Mat img = smooth_image(137, 123);  // OpenJPEG refuses sides under 32
  struct Case {
    std::string ext;
    std::vector<int> params;
    ImageFormat format;
  };
  const Case cases[] = {
      {".jpg", {}, ImageFormat::kJpeg},
      {".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}, ImageFormat::kJpeg},
      {".png", {}, ImageFormat::kPng},
      {".bmp", {}, ImageFormat::kBmp},
      {".ppm", {}, ImageFormat::kPnm},
      {".pgm", {}, ImageFormat::kPnm},
      {".pbm", {}, ImageFormat::kPnm},
      {".webp", {cv::IMWRITE_WEBP_QUALITY, 90}, ImageFormat::kWebp},   // VP8
      {".webp", {cv::IMWRITE_WEBP_QUALITY, 101}, ImageFormat::kWebp},  // VP8L
      {".tiff", {}, ImageFormat::kTiff},
      {".jp2", {}, ImageFormat::kJpeg2000},
      {".ras", {}, ImageFormat::kSunRaster},
  };
  for (const Case& c : cases) {
    CAPTURE(c.ext);
    CAPTURE(c.params.size());
    if (!cv::haveImageWriter(c.ext)) {
      MESSAGE("OpenCV cannot write " << c.ext << "; skipped");
      continue;
    }
    cv::Mat src = img;
    if (c.ext == ".pgm" || c.ext == ".pbm") cv::cvtColor(img, src, cv::COLOR_BGR2GRAY);
    const Bytes bytes = encode(src, c.ext, c.params);
    const auto info = dscache::read_image_header(bytes.data(), bytes.size());
    CHECK(info.format == c.format);
    CHECK(info.dims_known);
    CHECK(info.width == 137);
    CHECK(info.height == 123);
    // Every prefix is safe to parse and never claims different dimensions.
    for (size_t n = 0; n < std::min<size_t>(bytes.size(), 400); ++n) {
      const Bytes prefix(bytes.begin(), bytes.begin() + n);
      const auto p = dscache::read_image_header(prefix.data(), prefix.size());
      if (p.dims_known) {
        CHECK(p.width == 137);
        CHECK(p.height == 123);
      }
    }
    // And it decodes, with the dims reported.
    const auto opt = options(8, 8);
    const auto d = decode(bytes, opt);
    CHECK_MESSAGE(d.result.ok, d.result.reason);
    CHECK(d.result.format == c.format);
    CHECK(d.result.source_width == 137);
    CHECK(d.result.source_height == 123);
  }
}

TEST_CASE("read_image_header on hand-built headers") {
  struct Case {
    std::string name;
    Bytes bytes;
    ImageFormat format;
    bool known;
    uint32_t w, h;
  };
  auto s = [](const std::string& t) { return Bytes(t.begin(), t.end()); };
  auto prefix = [](const Bytes& b, size_t n) { return Bytes(b.begin(), b.begin() + long(n)); };
  Bytes gif = s("GIF89a");
  gif.insert(gif.end(), {0x2C, 0x01, 0x90, 0x00, 0xF7, 0, 0});  // 300 x 144
  Bytes vp8x = s("RIFF");
  vp8x.insert(vp8x.end(), {22, 0, 0, 0});
  for (char c : std::string("WEBPVP8X")) vp8x.push_back(uint8_t(c));
  vp8x.insert(vp8x.end(), {10, 0, 0, 0, 0x10, 0, 0, 0, 0x1F, 0x03, 0x00, 0x3F, 0x42, 0x0F});
  // 0x00031F + 1 = 800 wide, 0x0F423F + 1 = 1000000 high
  Bytes j2k = {0xFF, 0x4F, 0xFF, 0x51, 0, 41, 0, 0};
  put_be32(j2k, 1000);  // Xsiz
  put_be32(j2k, 700);   // Ysiz
  put_be32(j2k, 10);    // XOsiz
  put_be32(j2k, 20);    // YOsiz
  const Case cases[] = {
      {"gif", gif, ImageFormat::kGif, true, 300, 144},
      {"gif short", Bytes(gif.begin(), gif.begin() + 9), ImageFormat::kGif, false, 0, 0},
      {"webp vp8x", vp8x, ImageFormat::kWebp, true, 800, 1000000},
      {"pnm comments", s("P6\n# made by hand\n  640 # width\n# height next\n480\n255\n"),
       ImageFormat::kPnm, true, 640, 480},
      {"pnm no height", s("P5 640"), ImageFormat::kPnm, false, 0, 0},
      {"pam", s("P7\nWIDTH 4\nHEIGHT 4\n"), ImageFormat::kPnm, false, 0, 0},
      {"j2k", j2k, ImageFormat::kJpeg2000, true, 990, 680},
      {"jpeg sof0 after dqt", make_flat_jpeg(60000, 40000, {0}, false), ImageFormat::kJpeg, true,
       60000, 40000},
      {"jpeg dnl height 0", make_flat_jpeg(640, 0, {0}, false), ImageFormat::kJpeg, false, 0, 0},
      {"png ihdr truncated", prefix(make_png(5, 6, 8, 0, {}), 20), ImageFormat::kPng, false, 0, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const auto info = dscache::read_image_header(c.bytes.data(), c.bytes.size());
    CHECK(info.format == c.format);
    CHECK(info.dims_known == c.known);
    CHECK(info.width == c.w);
    CHECK(info.height == c.h);
  }
}

TEST_CASE("bmp with negative height is top-down") {
  // Top rows red, bottom rows blue; a BMP stores rows bottom-up, so negating the height field
  // flips the picture and must still give the same dimensions.
  cv::Mat img(8, 12, CV_8UC3, cv::Scalar(255, 0, 0));
  img(cv::Rect(0, 0, 12, 4)).setTo(cv::Scalar(0, 0, 255));
  Bytes bmp = encode(img, ".bmp");
  int32_t h;
  std::memcpy(&h, &bmp[22], 4);
  REQUIRE(h == 8);
  h = -h;
  std::memcpy(&bmp[22], &h, 4);
  const auto info = dscache::read_image_header(bmp.data(), bmp.size());
  CHECK(info.dims_known);
  CHECK(info.width == 12);
  CHECK(info.height == 8);
  const auto opt = options(8, 12, 3, ResizePolicy::kStretch);
  const auto d = decode(bmp, opt);
  REQUIRE_MESSAGE(d.result.ok, d.result.reason);
  CHECK(near(d.at(opt, 0, 0), 0, 0, 255));  // blue on top now
  CHECK(near(d.at(opt, 7, 0), 255, 0, 0));
}

// idx files (issue 11): inflated only as far as the header declares; never a FIFO.
TEST_CASE("read_idx_images bounds a gzip bomb by its header and refuses FIFOs at once") {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  // Header: 2 images of 28x28; then 2*784 pixels and 64 MiB of zeros more, gzip'ed (~64 KiB).
  const std::string raw = dir + "/bomb-images-idx3-ubyte";
  {
    std::ofstream out(raw, std::ios::binary);
    const unsigned char head[16] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28};
    out.write(reinterpret_cast<const char*>(head), sizeof head);
    const std::string zeros(1 << 20, '\0');
    for (int i = 0; i < 65; ++i)
      out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  REQUIRE(std::system(("gzip -1 '" + raw + "'").c_str()) == 0);
  bool refused = false;
  try {
    dscache::read_idx_images(raw + ".gz");
  } catch (const dscache::Error& e) {
    refused = e.kind() == dscache::ErrorKind::kCorruption &&
              std::string(e.what()).find("file holds more") != std::string::npos;
    CHECK_MESSAGE(refused, e.what());
  }
  CHECK(refused);
  // A header that promises more than the stream holds.
  {
    std::ofstream out(raw, std::ios::binary);
    const unsigned char head[16] = {0, 0, 8, 3, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 2};
    out.write(reinterpret_cast<const char*>(head), sizeof head);
    out.write("abcd", 4);
  }
  CHECK_THROWS_WITH_AS(dscache::read_idx_images(raw),
                       doctest::Contains("header says 9 images of 2x2 (36 bytes), file holds 4"),
                       dscache::Error);
  // A prefix (bench's decode row) reads only its records' bytes.
  const dscache::IdxImages first = dscache::read_idx_images(raw, 1);
  CHECK(first.count == 1);
  CHECK(std::string(first.pixels.begin(), first.pixels.end()) == "abcd");
  CHECK_THROWS_WITH_AS(dscache::read_idx_images(raw, 2), doctest::Contains("file ends after 4"),
                       dscache::Error);
  const std::string fifo = dir + "/fifo-images-idx3-ubyte";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(dscache::read_idx_images(fifo),
                       doctest::Contains("not a regular file (a FIFO)"), dscache::Error);
  CHECK_FALSE(dscache::is_idx_images_file(fifo));
}
