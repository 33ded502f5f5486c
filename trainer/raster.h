// An RGB picture in memory and the PNG file it is written as (zlib; no torch, no OpenCV).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dscache {
namespace train {

struct Rgb {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
  bool operator!=(const Rgb& o) const { return !(*this == o); }
};

// 8-bit RGB pixels, row-major, no padding. Owns its pixels; not thread-safe. Drawing outside the
// picture does nothing.
class Raster {
 public:
  Raster(int width, int height, Rgb fill);
  int width() const { return width_; }
  int height() const { return height_; }
  Rgb at(int x, int y) const;  // x < width(), y < height()
  void set(int x, int y, Rgb c);
  // Mixes `c` over the pixel with opacity `alpha` (0..1); 1 sets it exactly.
  void blend(int x, int y, Rgb c, double alpha);
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // [x0, x1) x [y0, y1)
  const std::vector<uint8_t>& bytes() const { return pixels_; }

 private:
  int width_;
  int height_;
  std::vector<uint8_t> pixels_;
};

// The picture as PNG bytes: 8-bit RGB, no interlace, one zlib stream in one IDAT chunk.
std::string encode_png(const Raster& picture);

// Writes encode_png(picture) to `path` atomically (a temp name, fsync, rename). Throws
// dscache::Error naming `path`: kInvalidArgument when it exists and is not a regular file,
// kIOError when the write or the rename fails.
void write_png(const std::string& path, const Raster& picture);

}  // namespace train
}  // namespace dscache
