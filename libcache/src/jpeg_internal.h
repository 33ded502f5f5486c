// Internals of the JPEG codec that tests check: the DCT-scale rule and what the last
// jpeg_decode_crop on a scratch actually decoded (to prove the fast path ran).
#pragma once

#include <cstdint>

#include "dscache/jpeg.h"

namespace dscache {
namespace detail {

// jpeg_decode_crop's DCT scale for `box` resized to out_h x out_w, as scale_num/8 (1..8):
// 8 unless both box.height >= 2*out_h and box.width >= 2*out_w; then the smallest M in 1..7
// with box.height*M/8 >= out_h and box.width*M/8 >= out_w (the scaled box still holds at least
// one decoded pixel per output pixel on both axes), or 8 if none.
uint32_t jpeg_scale_num(const CropBox& box, uint32_t out_h, uint32_t out_w);

// What the last jpeg_decode_crop on a scratch did (jpeg_decode resets it to a full decode).
struct JpegDecodeStats {
  bool fast = false;        // the scale/crop path ran (false: full decode + crop_resize)
  uint32_t scale_num = 8;   // DCT scale used, /8
  uint32_t first_row = 0;   // first decoded row, in scaled pixels
  uint32_t rows = 0;        // rows decoded (scaled pixels)
  uint32_t first_col = 0;   // first decoded column, in scaled pixels (jpeg_crop_scanline's)
  uint32_t cols = 0;        // columns decoded per row (scaled pixels)
  uint32_t image_rows = 0;  // rows of the whole image at that scale
  uint32_t image_cols = 0;  // columns of the whole image at that scale
};

// The stats of the last decode on `scratch` (zeros before any; all-default without JPEG
// support). Valid until the next decode on it.
JpegDecodeStats last_decode_stats(const JpegScratch& scratch);

}  // namespace detail
}  // namespace dscache
