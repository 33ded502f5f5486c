// The JPEG crop decoder's geometry (jpeg_internal.h): which DCT scale, which scaled rows and
// columns to decode for a crop box, and the taps that resample the decoded region. Pure
// arithmetic; jpeg.cpp drives libjpeg with it.
#include <algorithm>
#include <string>

#include "codec/jpeg_internal.h"
#include "codec/resample.h"

namespace dscache {
namespace detail {

uint32_t jpeg_scale_num(const CropBox& box, uint32_t out_h, uint32_t out_w) {
  const uint64_t h = box.height, w = box.width, oh = out_h, ow = out_w;
  if (oh == 0 || ow == 0 || h < 2 * oh || w < 2 * ow) return 8;
  for (uint64_t m = 1; m < 8; ++m) {
    if (h * m >= 8 * oh && w * m >= 8 * ow) return static_cast<uint32_t>(m);
  }
  return 8;
}

void check_jpeg_crop(uint32_t height, uint32_t width, const CropBox& box, uint32_t out_h,
                     uint32_t out_w) {
  if (box.height == 0 || box.width == 0 || out_h == 0 || out_w == 0) {
    throw jpeg_invalid("empty crop box or output");
  }
  if (uint64_t{box.y} + box.height > height || uint64_t{box.x} + box.width > width) {
    throw jpeg_invalid("crop box " + std::to_string(box.height) + "x" + std::to_string(box.width) +
                       "+" + std::to_string(box.y) + "+" + std::to_string(box.x) +
                       " is outside the " + std::to_string(height) + "x" + std::to_string(width) +
                       " image");
  }
}

ScaledWindow jpeg_scaled_window(uint32_t y0, uint32_t y1, uint32_t x0, uint32_t x1, uint32_t m,
                                uint32_t rows, uint32_t cols, uint32_t min_cols) {
  // Scaled pixel j covers full-size [8j/M, 8(j+1)/M). One extra pixel on each side keeps the
  // box's pixels away from the region's edge, where fancy upsampling lacks its neighbours.
  ScaledWindow w;
  w.row0 = floor_scaled(y0, m);
  w.row0 = w.row0 > 0 ? w.row0 - 1 : 0;
  w.row1 = std::min<uint32_t>(rows, ceil_scaled(y1, m) + 1);
  w.col0 = floor_scaled(x0, m);
  w.col0 = w.col0 > 0 ? w.col0 - 1 : 0;
  w.col1 = std::min<uint32_t>(cols, ceil_scaled(x1, m) + 1);
  if (w.col1 - w.col0 < min_cols) {
    w.col1 = std::min<uint32_t>(cols, w.col0 + min_cols);
    w.col0 = w.col1 - std::min<uint32_t>(w.col1, min_cols);
  }
  return w;
}

namespace {

void shift_taps(AxisTaps* taps, uint32_t by) {
  for (uint32_t& i : taps->index) i += by;
}

}  // namespace

void jpeg_crop_taps(const CropBox& box, uint32_t out_h, uint32_t out_w, uint32_t m,
                    uint32_t first_row, uint32_t rows, uint32_t first_col, uint32_t cols,
                    AxisTaps* ty, AxisTaps* tx) {
  if (m == 8) {  // crop_resize's taps, shifted into the decoded region
    *ty = make_taps(box.height, out_h);
    *tx = make_taps(box.width, out_w);
    shift_taps(ty, box.y - first_row);
    shift_taps(tx, box.x - first_col);
  } else {
    *ty = make_scaled_area_taps(box.y, box.height, out_h, m, first_row, rows);
    *tx = make_scaled_area_taps(box.x, box.width, out_w, m, first_col, cols);
  }
}

}  // namespace detail
}  // namespace dscache
