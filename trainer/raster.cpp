// RGB rasters and their PNG encoding.
#include "raster.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>

#include "dscache/atomic_file.h"
#include "dscache/error.h"
#include "safety.h"

namespace dscache {
namespace train {

Raster::Raster(int width, int height, Rgb fill)
    : width_(std::max(0, width)), height_(std::max(0, height)) {
  pixels_.resize(static_cast<size_t>(width_) * height_ * 3);
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = fill.r;
    pixels_[i + 1] = fill.g;
    pixels_[i + 2] = fill.b;
  }
}

Rgb Raster::at(int x, int y) const {
  const uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Raster::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

void Raster::blend(int x, int y, Rgb c, double alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || !(alpha > 0)) return;
  if (alpha >= 1) return set(x, y, c);
  uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  const uint8_t src[3] = {c.r, c.g, c.b};
  for (int i = 0; i < 3; ++i) {
    p[i] = static_cast<uint8_t>(std::lround(p[i] * (1 - alpha) + src[i] * alpha));
  }
}

void Raster::fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
  for (int y = std::max(0, y0); y < std::min(height_, y1); ++y) {
    for (int x = std::max(0, x0); x < std::min(width_, x1); ++x) set(x, y, c);
  }
}

namespace {

void put_u32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

// length, type, data, CRC32 of type + data.
void put_chunk(std::string* out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out->size();
  out->append(type, 4);
  out->append(data);
  const auto* crc_from = reinterpret_cast<const Bytef*>(out->data() + start);
  put_u32(out, static_cast<uint32_t>(
                   ::crc32(::crc32(0L, Z_NULL, 0), crc_from, static_cast<uInt>(4 + data.size()))));
}

}  // namespace

std::string encode_png(const Raster& picture) {
  const int w = picture.width();
  const int h = picture.height();
  if (w <= 0 || h <= 0) {
    throw Error(ErrorKind::kInvalidArgument, "", "a PNG needs at least one pixel");
  }
  // Each row: filter type 0 (none), then the row's RGB bytes.
  const size_t row = static_cast<size_t>(w) * 3;
  std::string raw;
  raw.reserve((row + 1) * h);
  const auto* px = reinterpret_cast<const char*>(picture.bytes().data());
  for (int y = 0; y < h; ++y) {
    raw.push_back('\0');
    raw.append(px + row * y, row);
  }
  uLongf packed_size = ::compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  if (::compress2(reinterpret_cast<Bytef*>(&packed[0]), &packed_size,
                  reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()),
                  Z_BEST_COMPRESSION) != Z_OK) {
    throw Error(ErrorKind::kIOError, "", "zlib could not compress the picture");
  }
  packed.resize(packed_size);

  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_u32(&ihdr, static_cast<uint32_t>(w));
  put_u32(&ihdr, static_cast<uint32_t>(h));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, filter 0, no interlace
  put_chunk(&out, "IHDR", ihdr);
  put_chunk(&out, "IDAT", packed);
  put_chunk(&out, "IEND", "");
  return out;
}

void write_png(const std::string& path, const Raster& picture) {
  std::string bytes;
  try {
    bytes = encode_png(picture);
  } catch (const Error& e) {
    throw Error(e.kind(), path, e.reason());
  }
  check_regular_if_exists(path, "chart");
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace train
}  // namespace dscache
