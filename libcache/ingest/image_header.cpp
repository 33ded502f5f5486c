// Format sniffing and header-only dimension parsing. Every read is bounds-checked against the
// buffer size: these functions see untrusted bytes and must never read past them or throw.
#include <cstring>

#include "dscache/ingest/image_decode.h"

namespace dscache {
namespace {

// A bounds-checked view of the input; reads outside [0, size) report failure.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t size() const { return size_; }
  bool has(size_t pos, size_t n) const { return pos <= size_ && n <= size_ - pos; }
  uint8_t u8(size_t pos) const { return data_[pos]; }  // caller checked has(pos, 1)
  bool starts(size_t pos, const char* magic, size_t n) const {
    return has(pos, n) && std::memcmp(data_ + pos, magic, n) == 0;
  }
  bool be16(size_t pos, uint32_t* v) const {
    if (!has(pos, 2)) return false;
    *v = (uint32_t{data_[pos]} << 8) | data_[pos + 1];
    return true;
  }
  bool le16(size_t pos, uint32_t* v) const {
    if (!has(pos, 2)) return false;
    *v = uint32_t{data_[pos]} | (uint32_t{data_[pos + 1]} << 8);
    return true;
  }
  bool be32(size_t pos, uint32_t* v) const {
    if (!has(pos, 4)) return false;
    *v = (uint32_t{data_[pos]} << 24) | (uint32_t{data_[pos + 1]} << 16) |
         (uint32_t{data_[pos + 2]} << 8) | data_[pos + 3];
    return true;
  }
  bool le32(size_t pos, uint32_t* v) const {
    if (!has(pos, 4)) return false;
    *v = uint32_t{data_[pos]} | (uint32_t{data_[pos + 1]} << 8) | (uint32_t{data_[pos + 2]} << 16) |
         (uint32_t{data_[pos + 3]} << 24);
    return true;
  }
  bool le24(size_t pos, uint32_t* v) const {
    if (!has(pos, 3)) return false;
    *v = uint32_t{data_[pos]} | (uint32_t{data_[pos + 1]} << 8) | (uint32_t{data_[pos + 2]} << 16);
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

bool set_dims(ImageHeaderInfo* info, uint32_t w, uint32_t h) {
  if (w == 0 || h == 0) return false;
  info->width = w;
  info->height = h;
  info->dims_known = true;
  return true;
}

// Walks the marker segments up to the first frame header (SOF0..SOF15 except DHT C4, JPG C8
// and DAC CC). Stops at SOS or EOI: a frame header must come before the first scan.
bool jpeg_dims(const Bytes& b, ImageHeaderInfo* info) {
  size_t pos = 2;  // after SOI
  while (b.has(pos, 2)) {
    if (b.u8(pos) != 0xFF) return false;
    uint8_t marker = b.u8(pos + 1);
    if (marker == 0xFF) {  // fill byte before a marker
      ++pos;
      continue;
    }
    pos += 2;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // no length field
    if (marker == 0xD9 || marker == 0xDA) return false;                  // EOI, SOS
    uint32_t len = 0;
    if (!b.be16(pos, &len) || len < 2) return false;
    bool sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      uint32_t h = 0, w = 0;
      if (len < 7 || !b.be16(pos + 3, &h) || !b.be16(pos + 5, &w)) return false;
      return set_dims(info, w, h);  // h == 0 means "defined by DNL": unknown here
    }
    pos += len;
  }
  return false;
}

bool png_dims(const Bytes& b, ImageHeaderInfo* info) {
  uint32_t w = 0, h = 0;
  if (!b.starts(12, "IHDR", 4) || !b.be32(16, &w) || !b.be32(20, &h)) return false;
  return set_dims(info, w, h);
}

bool gif_dims(const Bytes& b, ImageHeaderInfo* info) {
  uint32_t w = 0, h = 0;
  return b.le16(6, &w) && b.le16(8, &h) && set_dims(info, w, h);
}

bool bmp_dims(const Bytes& b, ImageHeaderInfo* info) {
  uint32_t dib = 0;
  if (!b.le32(14, &dib)) return false;
  if (dib == 12) {  // BITMAPCOREHEADER: unsigned 16-bit sizes
    uint32_t w = 0, h = 0;
    return b.le16(18, &w) && b.le16(20, &h) && set_dims(info, w, h);
  }
  if (dib < 40) return false;
  uint32_t uw = 0, uh = 0;
  if (!b.le32(18, &uw) || !b.le32(22, &uh)) return false;
  int64_t w = static_cast<int32_t>(uw);
  int64_t h = static_cast<int32_t>(uh);  // negative: rows stored top-down
  if (w <= 0 || h == 0) return false;
  return set_dims(info, static_cast<uint32_t>(w), static_cast<uint32_t>(h < 0 ? -h : h));
}

bool webp_dims(const Bytes& b, ImageHeaderInfo* info) {
  if (b.starts(12, "VP8 ", 4)) {  // lossy: frame tag (3), start code 9d 01 2a, 14-bit sizes
    uint32_t w = 0, h = 0;
    if (!b.has(23, 3) || b.u8(23) != 0x9D || b.u8(24) != 0x01 || b.u8(25) != 0x2A) return false;
    if (!b.le16(26, &w) || !b.le16(28, &h)) return false;
    return set_dims(info, w & 0x3FFF, h & 0x3FFF);
  }
  if (b.starts(12, "VP8L", 4)) {  // lossless: signature 2f, then 14-bit width-1, height-1
    uint32_t bits = 0;
    if (!b.has(20, 1) || b.u8(20) != 0x2F || !b.le32(21, &bits)) return false;
    return set_dims(info, (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1);
  }
  if (b.starts(12, "VP8X", 4)) {  // extended: flags (4), canvas width-1 and height-1 (24-bit)
    uint32_t w = 0, h = 0;
    if (!b.le24(24, &w) || !b.le24(27, &h)) return false;
    return set_dims(info, w + 1, h + 1);
  }
  return false;
}

// Netpbm text header: "P<n>", whitespace-separated width, height (and maxval), '#' comments.
bool pnm_dims(const Bytes& b, ImageHeaderInfo* info) {
  uint8_t kind = b.u8(1);
  if (kind < '1' || kind > '6') return false;  // P7 (PAM) uses WIDTH/HEIGHT lines: not parsed
  size_t pos = 2;
  uint64_t values[2] = {0, 0};
  for (uint64_t& value : values) {
    for (;;) {  // skip whitespace and comments
      if (!b.has(pos, 1)) return false;
      uint8_t c = b.u8(pos);
      if (c == '#') {
        while (b.has(pos, 1) && b.u8(pos) != '\n' && b.u8(pos) != '\r') ++pos;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
        ++pos;
      } else {
        break;
      }
    }
    size_t digits = 0;
    while (b.has(pos, 1) && b.u8(pos) >= '0' && b.u8(pos) <= '9') {
      value = value * 10 + (b.u8(pos) - '0');
      if (value > UINT32_MAX) return false;
      ++pos;
      ++digits;
    }
    // A number must be terminated: "P6 640 4" cut short may be "P6 640 480".
    if (digits == 0 || !b.has(pos, 1)) return false;
    uint8_t t = b.u8(pos);
    if (t != '#' && t != ' ' && t != '\t' && t != '\n' && t != '\r' && t != '\v' && t != '\f') {
      return false;
    }
  }
  return set_dims(info, static_cast<uint32_t>(values[0]), static_cast<uint32_t>(values[1]));
}

// Classic TIFF: the first IFD's ImageWidth (256) and ImageLength (257). BigTIFF: not parsed.
bool tiff_dims(const Bytes& b, ImageHeaderInfo* info) {
  bool le = b.u8(0) == 'I';
  auto u16 = [&](size_t p, uint32_t* v) { return le ? b.le16(p, v) : b.be16(p, v); };
  auto u32 = [&](size_t p, uint32_t* v) { return le ? b.le32(p, v) : b.be32(p, v); };
  uint32_t magic = 0, ifd = 0, count = 0;
  if (!u16(2, &magic) || magic != 42 || !u32(4, &ifd) || !u16(ifd, &count)) return false;
  uint32_t w = 0, h = 0;
  for (uint32_t i = 0; i < count; ++i) {
    size_t entry = size_t{ifd} + 2 + size_t{i} * 12;
    uint32_t tag = 0, type = 0, value = 0;
    if (!u16(entry, &tag) || !u16(entry + 2, &type)) return false;
    if (tag != 256 && tag != 257) continue;
    if (type == 3) {  // SHORT, left-justified in the value field
      if (!u16(entry + 8, &value)) return false;
    } else if (type == 4) {  // LONG
      if (!u32(entry + 8, &value)) return false;
    } else {
      return false;
    }
    (tag == 256 ? w : h) = value;
  }
  return set_dims(info, w, h);
}

// Raw codestream: SIZ follows SOC. JP2: the ihdr box inside the jp2h super-box.
bool jpeg2000_dims(const Bytes& b, ImageHeaderInfo* info) {
  if (b.u8(0) == 0xFF) {
    uint32_t xsiz = 0, ysiz = 0, xo = 0, yo = 0;
    if (!b.be32(8, &xsiz) || !b.be32(12, &ysiz) || !b.be32(16, &xo) || !b.be32(20, &yo) ||
        xo >= xsiz || yo >= ysiz) {
      return false;
    }
    return set_dims(info, xsiz - xo, ysiz - yo);
  }
  size_t pos = 0, end = b.size();
  while (b.has(pos, 8)) {
    uint32_t len = 0;
    b.be32(pos, &len);
    size_t body = pos + 8, box_end;
    if (len == 0) {
      box_end = end;
    } else if (len < 8) {
      return false;  // 64-bit (len 1) boxes are not expected before the header
    } else {
      box_end = pos + len;
    }
    if (b.starts(pos + 4, "jp2h", 4)) {
      pos = body;
      end = box_end < end ? box_end : end;
      continue;
    }
    if (b.starts(pos + 4, "ihdr", 4)) {
      uint32_t h = 0, w = 0;
      return b.be32(body, &h) && b.be32(body + 4, &w) && set_dims(info, w, h);
    }
    if (box_end <= pos) return false;
    pos = box_end;
  }
  return false;
}

bool sunraster_dims(const Bytes& b, ImageHeaderInfo* info) {
  uint32_t w = 0, h = 0;
  return b.be32(4, &w) && b.be32(8, &h) && set_dims(info, w, h);
}

// The reader of each format's dimensions; a format without one (HDR, OpenEXR) is not ok.
struct DimsReader {
  ImageFormat format;
  bool (*read)(const Bytes& b, ImageHeaderInfo* info);
};
constexpr DimsReader kDimsReaders[] = {
    {ImageFormat::kJpeg, jpeg_dims},
    {ImageFormat::kPng, png_dims},
    {ImageFormat::kGif, gif_dims},
    {ImageFormat::kBmp, bmp_dims},
    {ImageFormat::kTiff, tiff_dims},
    {ImageFormat::kWebp, webp_dims},
    {ImageFormat::kPnm, pnm_dims},
    {ImageFormat::kJpeg2000, jpeg2000_dims},
    {ImageFormat::kSunRaster, sunraster_dims},
};

}  // namespace

const char* to_string(ImageFormat f) {
  switch (f) {
    case ImageFormat::kUnknown:
      return "unknown";
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kGif:
      return "gif";
    case ImageFormat::kBmp:
      return "bmp";
    case ImageFormat::kTiff:
      return "tiff";
    case ImageFormat::kWebp:
      return "webp";
    case ImageFormat::kPnm:
      return "pnm";
    case ImageFormat::kJpeg2000:
      return "jpeg2000";
    case ImageFormat::kHdr:
      return "hdr";
    case ImageFormat::kSunRaster:
      return "sunraster";
    case ImageFormat::kOpenExr:
      return "openexr";
  }
  return "unknown";
}

ImageFormat sniff_format(const uint8_t* data, size_t size) {
  if (data == nullptr || size == 0) return ImageFormat::kUnknown;
  Bytes b(data, size);
  if (b.starts(0, "\xFF\xD8\xFF", 3)) return ImageFormat::kJpeg;
  if (b.starts(0, "\x89PNG\r\n\x1A\n", 8)) return ImageFormat::kPng;
  if (b.starts(0, "GIF87a", 6) || b.starts(0, "GIF89a", 6)) return ImageFormat::kGif;
  if (b.starts(0, "BM", 2)) {  // "BM" alone is common in text: also require a known DIB size
    uint32_t dib = 0;
    if (b.le32(14, &dib) && (dib == 12 || dib == 40 || dib == 52 || dib == 56 || dib == 64 ||
                             dib == 108 || dib == 124)) {
      return ImageFormat::kBmp;
    }
  }
  if (b.starts(0, "II*\0", 4) || b.starts(0, "MM\0*", 4) || b.starts(0, "II+\0", 4) ||
      b.starts(0, "MM\0+", 4)) {
    return ImageFormat::kTiff;
  }
  if (b.starts(0, "RIFF", 4) && b.starts(8, "WEBP", 4)) return ImageFormat::kWebp;
  if (b.has(0, 3) && b.u8(0) == 'P' && b.u8(1) >= '1' && b.u8(1) <= '7') {
    uint8_t c = b.u8(2);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '#') return ImageFormat::kPnm;
  }
  if (b.starts(0, "\xFF\x4F\xFF\x51", 4) || b.starts(0, "\x00\x00\x00\x0CjP  \r\n\x87\n", 12)) {
    return ImageFormat::kJpeg2000;
  }
  if (b.starts(0, "#?RADIANCE", 10) || b.starts(0, "#?RGBE", 6)) return ImageFormat::kHdr;
  if (b.starts(0, "\x59\xA6\x6A\x95", 4)) return ImageFormat::kSunRaster;
  if (b.starts(0, "\x76\x2F\x31\x01", 4)) return ImageFormat::kOpenExr;
  return ImageFormat::kUnknown;
}

ImageHeaderInfo read_image_header(const uint8_t* data, size_t size) {
  ImageHeaderInfo info;
  info.format = sniff_format(data, size);
  if (info.format == ImageFormat::kUnknown) return info;
  Bytes b(data, size);
  bool ok = false;
  for (const DimsReader& r : kDimsReaders) {
    if (r.format == info.format) ok = r.read(b, &info);
  }
  if (!ok) {
    info.width = info.height = 0;
    info.dims_known = false;
  }
  return info;
}

}  // namespace dscache
