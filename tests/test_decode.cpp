// Tests of the image decoding module: format sniffing, header parsing, decoding of the inputs a
// real user meets (good and bad), the three resize policies, JPEG reduced decoding and
// determinism. Every fixture is generated here, in memory or in a fresh temp dir.
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

namespace {

using dscache::DecodeOptions;
using dscache::DecodeResult;
using dscache::ImageFormat;
using dscache::ResizePolicy;
using Bytes = std::vector<uint8_t>;
using dscache::test::TempDir;

Bytes encode(const cv::Mat& bgr, const std::string& ext, const std::vector<int>& params = {}) {
  Bytes out;
  REQUIRE(cv::imencode(ext, bgr, out, params));
  return out;
}

DecodeOptions options(uint32_t h, uint32_t w, uint32_t c = 3,
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

Decoded decode(const Bytes& bytes, const DecodeOptions& o) {
  Decoded d;
  d.pixels.assign(size_t(o.height) * o.width * o.channels, 0xAB);
  d.result = dscache::decode_image(bytes.data(), bytes.size(), o, d.pixels.data());
  return d;
}

double mean_abs_diff(const Bytes& a, const Bytes& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / double(a.size());
}

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
void put_be16(Bytes& b, uint32_t v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}

// --- A minimal PNG writer: stored (uncompressed) deflate blocks, so no zlib is needed. --------

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void png_chunk(Bytes& png, const char* type, const Bytes& data) {
  put_be32(png, uint32_t(data.size()));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  png.insert(png.end(), body.begin(), body.end());
  put_be32(png, crc32(body.data(), body.size()));
}

// rows: height rows of raw scanline bytes (without filter bytes). IDAT omitted when rows empty.
Bytes make_png(uint32_t w, uint32_t h, uint8_t depth, uint8_t color_type,
               const std::vector<Bytes>& rows, const Bytes& plte = {}, const Bytes& trns = {}) {
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
Bytes make_flat_jpeg(uint32_t w, uint32_t h, const std::vector<int>& values,
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
cv::Mat smooth_image(int w, int h) {
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
cv::Mat halves(int w, int h, cv::Scalar left, cv::Scalar right) {
  cv::Mat img(h, w, CV_8UC3, right);
  img(cv::Rect(0, 0, w / 2, h)).setTo(left);
  return img;
}

bool near(const uint8_t* px, int r, int g, int b, int tol = 0) {
  return std::abs(px[0] - r) <= tol && std::abs(px[1] - g) <= tol && std::abs(px[2] - b) <= tol;
}

Bytes read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

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
      {"garbage", garbage, false, "unrecognized image format (first bytes 47 41 52 42"},
      {"text", Bytes{'h', 'e', 'l', 'l', 'o'}, false, "unrecognized image format"},
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

TEST_CASE("max_pixels is checked on the header before decoding") {
  const Bytes png = encode(smooth_image(37, 23), ".png");
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
  SUBCASE("crop keeps the middle 100x100: left red, right blue, no black") {
    const auto o = options(50, 50, 3, ResizePolicy::kCrop);
    const auto d = decode(png, o);
    REQUIRE(d.result.ok);
    for (int y = 0; y < 50; ++y) {
      CHECK(near(d.at(o, y, 0), 255, 0, 0));
      CHECK(near(d.at(o, y, 23), 255, 0, 0));
      CHECK(near(d.at(o, y, 26), 0, 0, 255));
      CHECK(near(d.at(o, y, 49), 0, 0, 255));
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
  SUBCASE("stretch keeps both halves at half width each") {
    const auto o = options(50, 50, 3, ResizePolicy::kStretch);
    const auto d = decode(png, o);
    REQUIRE(d.result.ok);
    for (int y = 0; y < 50; ++y) {
      CHECK(near(d.at(o, y, 0), 255, 0, 0));
      CHECK(near(d.at(o, y, 23), 255, 0, 0));
      CHECK(near(d.at(o, y, 26), 0, 0, 255));
      CHECK(near(d.at(o, y, 49), 0, 0, 255));
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
