// Checks on a source's bytes before any decode (source_bytes.h).
#include "source_bytes.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace dscache {
namespace detail {

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// True when a PNG decodes to four channels under IMREAD_UNCHANGED: colour type 4 (grey+alpha) or
// 6 (RGBA), or a tRNS chunk before the image data of a palette (3) or RGB (2) image. (A grey
// image's tRNS OpenCV 4.6 does not expand: it decodes to one channel, its transparency unseen.)
bool png_has_alpha(const uint8_t* d, size_t n) {
  if (n < 33) return false;
  const uint8_t color_type = d[25];  // signature 8, length 4, "IHDR" 4, width, height, depth
  if (color_type == 4 || color_type == 6) return true;
  if (color_type != 2 && color_type != 3) return false;
  for (size_t p = 8; p + 8 <= n;) {
    const uint32_t len = be32(d + p);
    if (std::memcmp(d + p + 4, "tRNS", 4) == 0) return true;
    if (std::memcmp(d + p + 4, "IDAT", 4) == 0) return false;
    if (len > n - p - 8) return false;
    p += 12 + size_t{len};
  }
  return false;
}

// True when a WebP says it has alpha: the extended header's alpha flag (VP8X), or a lossless
// bitstream's alpha_is_used bit (VP8L). A simple lossy WebP (VP8) has none.
bool webp_has_alpha(const uint8_t* d, size_t n) {
  if (n < 30) return false;
  if (std::memcmp(d + 12, "VP8X", 4) == 0) return (d[20] & 0x10) != 0;
  if (std::memcmp(d + 12, "VP8L", 4) == 0) return (d[24] & 0x10) != 0;  // bit 28 after 0x2f
  return false;
}

}  // namespace

std::string content_kind(const uint8_t* data, size_t size) {
  const size_t n = std::min<size_t>(size, 512);
  auto starts = [&](const char* magic) {
    const size_t len = std::strlen(magic);
    return n >= len && std::memcmp(data, magic, len) == 0;
  };
  if (std::all_of(data, data + n, [](uint8_t b) { return b == 0; })) return "zero bytes";
  if (starts("%PDF")) return "PDF";
  if (starts("PK\x03\x04")) return "a ZIP archive";
  if (starts("\x1f\x8b")) return "gzip data";
  // Text: no control bytes but tab, CR, LF and form feed (UTF-8 bytes >= 0x80 pass).
  const bool text = std::all_of(data, data + n, [](uint8_t b) {
    return b >= 0x20 || b == '\t' || b == '\n' || b == '\r' || b == '\f';
  });
  if (!text) return "binary data";
  std::string head;
  for (size_t i = 0; i < n && head.size() < 16; ++i) {
    const char c = static_cast<char>(data[i]);
    if (head.empty() && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) continue;
    head += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  if (head.rfind("<!doctype html", 0) == 0 || head.rfind("<html", 0) == 0) return "HTML";
  if (head.rfind("<?xml", 0) == 0 || head.rfind("<svg", 0) == 0) return "XML";
  return "text";
}

std::string pixel_limit_reason(uint64_t w, uint64_t h, uint64_t max_pixels) {
  const uint64_t pixels = w * h;  // both < 2^32: no overflow
  if (max_pixels == 0 || pixels <= max_pixels) return {};
  return "image is " + std::to_string(w) + "x" + std::to_string(h) + " = " +
         std::to_string(pixels) + " pixels, over --max-pixels " + std::to_string(max_pixels);
}

// Entropy coded data cannot contain FF D9 (0xFF is stuffed as FF 00), so its presence means the
// scan ends. Segments before the scan (an EXIF thumbnail holds its own complete JPEG) are skipped
// by their lengths.
bool jpeg_has_eoi(const uint8_t* d, size_t n) {
  size_t p = 2;  // after SOI
  while (p + 4 <= n) {
    if (d[p] != 0xFF) return false;
    uint8_t m = d[p + 1];
    if (m == 0xFF) {  // fill byte
      ++p;
      continue;
    }
    if (m == 0xD9) return true;                   // EOI before any scan
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // markers without a length
      p += 2;
      continue;
    }
    size_t len = (size_t{d[p + 2]} << 8) | d[p + 3];
    if (m == 0xDA) {
      const uint8_t* q = d + p + 2 + len;
      while (q + 1 < d + n) {
        q = static_cast<const uint8_t*>(std::memchr(q, 0xFF, static_cast<size_t>(d + n - q - 1)));
        if (q == nullptr) return false;
        if (q[1] == 0xD9) return true;
        ++q;
      }
      return false;
    }
    p += 2 + len;
  }
  return false;
}

namespace {

// The Orientation tag of the TIFF structure at t (n bytes, an Exif APP1's payload after
// "Exif\0\0"): its value, 1 when IFD0 has none, 0 when it cannot be read.
uint32_t exif_orientation(const uint8_t* t, size_t n) {
  if (n < 8) return 0;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 0;
  const auto u16 = [&](size_t at) -> uint32_t {
    return le ? (uint32_t{t[at + 1]} << 8 | t[at]) : (uint32_t{t[at]} << 8 | t[at + 1]);
  };
  const auto u32 = [&](size_t at) -> uint32_t {
    return le ? (u16(at + 2) << 16 | u16(at)) : (u16(at) << 16 | u16(at + 2));
  };
  if (u16(2) != 42) return 0;
  const size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 0;
  const size_t entries = u16(ifd);
  if ((n - ifd - 2) / 12 < entries) return 0;
  for (size_t k = 0; k < entries; ++k) {
    const size_t e = ifd + 2 + 12 * k;
    if (u16(e) != 0x0112) continue;
    if (u16(e + 2) != 3 || u32(e + 4) != 1) return 0;  // SHORT, one value
    return u16(e + 8);
  }
  return 1;
}

}  // namespace

uint32_t jpeg_orientation(const uint8_t* d, size_t n) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return 0;
  uint32_t found = 0;            // the Exif segments' common value (0 while there are none)
  bool first_app1_exif = false;  // imdecode reads the first APP1 only
  bool seen_app1 = false;
  size_t p = 2;
  while (p + 4 <= n) {
    if (d[p] != 0xFF) return 0;
    const uint8_t m = d[p + 1];
    if (m == 0xFF) {  // fill byte
      ++p;
      continue;
    }
    if (m == 0xDA || m == 0xD9) {  // the scan (or the end): no more APPn
      if (found == 0) return 1;
      return found == 1 || first_app1_exif ? found : 0;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
      p += 2;
      continue;
    }
    const size_t len = (size_t{d[p + 2]} << 8) | d[p + 3];
    if (len < 2 || len > n - p - 2) return 0;
    static const uint8_t kExif[6] = {'E', 'x', 'i', 'f', 0, 0};
    if (m == 0xE1) {
      const bool exif = len >= 8 && std::memcmp(d + p + 4, kExif, 6) == 0;
      if (!seen_app1) first_app1_exif = exif;
      seen_app1 = true;
      if (exif) {
        const uint32_t v = exif_orientation(d + p + 10, len - 8);
        if (v < 1 || v > 8) return 0;  // unreadable, or a value imdecode's table lacks
        if (found == 0) found = v;
        if (v != found) return 0;  // segments that disagree: OpenCV decides
      }
    }
    p += 2 + len;
  }
  return 0;
}

bool may_have_alpha(ImageFormat f, const uint8_t* d, size_t n) {
  return (f == ImageFormat::kPng && png_has_alpha(d, n)) ||
         (f == ImageFormat::kWebp && webp_has_alpha(d, n));
}

}  // namespace detail
}  // namespace dscache
