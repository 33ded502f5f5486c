// Internals of the JPEG codec shared by its files and checked by tests: the byte-level stream
// checks (jpeg_stream.cpp), the crop geometry (jpeg_crop.cpp: the DCT-scale rule, the scaled
// window and the resampling taps), and what the last jpeg_decode_crop on a scratch actually
// decoded (to prove the fast path ran). Only jpeg.cpp and jpeg_encode.cpp include libjpeg;
// nothing here needs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/resample.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"

namespace dscache {
namespace detail {

// ---------------------------------------------------------------------------------------------
// Stream checks (jpeg_stream.cpp)

// libjpeg's JPEG_MAX_DIMENSION (jpeg.cpp asserts that they agree): the largest side we accept.
constexpr uint32_t kJpegMaxSide = 65500;

// The library boundary's errors, reasons prefixed with "jpeg: ".
Error jpeg_corrupt(const std::string& reason);  // Corruption
Error jpeg_invalid(const std::string& reason);  // InvalidArgument

// Where the first image of `d` ends: the offset just past its EOI, walking the marker segments
// (lengths skipped, so bytes inside an APPn/COM segment are never taken for markers) and the
// entropy-coded data after each SOS (up to the next marker that is not a stuffed 0xFF00 or an
// RSTn). 0 when the walk finds no EOI (not a marker where one must be, or a length past the end).
size_t jpeg_first_image_end(const uint8_t* d, size_t n);

// Cheap checks before libjpeg sees the bytes (throws Corruption). A stream must be exactly one
// image: its first EOI (FF D9) is its last two bytes. The crop decoder stops reading after the
// rows it needs, so this is what makes a truncated stream an error there too; and libjpeg itself
// stops at the first EOI, so a second image or other bytes after it would otherwise be served
// silently (docs/FORMAT.md: bytes after EOI are corruption).
void check_jpeg_stream(const uint8_t* data, size_t size);

// The caller's image size and channels: sides 1..kJpegMaxSide, 1 or 3 channels (throws
// InvalidArgument).
void check_jpeg_shape(uint32_t height, uint32_t width, uint32_t channels);

// ---------------------------------------------------------------------------------------------
// Crop geometry (jpeg_crop.cpp)

// jpeg_decode_crop's DCT scale for `box` resized to out_h x out_w, as scale_num/8 (1..8):
// 8 unless both box.height >= 2*out_h and box.width >= 2*out_w; then the smallest M in 1..7
// with box.height*M/8 >= out_h and box.width*M/8 >= out_w (the scaled box still holds at least
// one decoded pixel per output pixel on both axes), or 8 if none.
uint32_t jpeg_scale_num(const CropBox& box, uint32_t out_h, uint32_t out_w);

// A full-size coordinate at scale m/8, rounded down or up.
inline uint32_t floor_scaled(uint32_t v, uint32_t m) {
  return static_cast<uint32_t>(uint64_t{v} * m / 8);
}
inline uint32_t ceil_scaled(uint32_t v, uint32_t m) {
  return static_cast<uint32_t>((uint64_t{v} * m + 7) / 8);
}

// jpeg_decode_crop's arguments against the image: a non-empty box inside it, a non-empty
// output (throws InvalidArgument naming the box).
void check_jpeg_crop(uint32_t height, uint32_t width, const CropBox& box, uint32_t out_h,
                     uint32_t out_w);

// The scaled rows [row0, row1) and columns [col0, col1) to decode for the full-size rows
// [y0, y1) and columns [x0, x1) at scale m/8, in an image of rows x cols scaled pixels: one
// pixel of context around them, and at least min_cols columns (or all), widened to the right,
// or to the left at the right edge. min_cols exists because libjpeg-turbo's jpeg_crop_scanline
// switches a component to box upsampling when its cropped width is 2 samples or fewer (fancy
// upsampling needs 3), which changes the pixels; jpeg.cpp passes two iMCU widths.
struct ScaledWindow {
  uint32_t row0 = 0, row1 = 0, col0 = 0, col1 = 0;
};
ScaledWindow jpeg_scaled_window(uint32_t y0, uint32_t y1, uint32_t x0, uint32_t x1, uint32_t m,
                                uint32_t rows, uint32_t cols, uint32_t min_cols);

// The taps that resample `box` to out_h x out_w from a region decoded at scale m/8 whose first
// scaled row and column are first_row and first_col (rows x cols scaled pixels): crop_resize's
// own taps shifted into the region at m == 8, the scaled footprint rule below it.
void jpeg_crop_taps(const CropBox& box, uint32_t out_h, uint32_t out_w, uint32_t m,
                    uint32_t first_row, uint32_t rows, uint32_t first_col, uint32_t cols,
                    AxisTaps* ty, AxisTaps* tx);

// ---------------------------------------------------------------------------------------------
// Restart segments (jpeg_segments.cpp)

// The restart interval (MCUs between restart markers, DRI) jpeg_encode writes for a
// height x width image whose MCUs are mcu_h x mcu_w pixels: 0 (none) below 128x128 pixels; else
// the largest divisor k of the MCUs per row with k * mcu_w <= 64 px, if k * mcu_w >= 32 px;
// else one segment per MCU row. Every MCU row then holds a whole number of segments, which is
// what lets the crop decoder skip the segments outside a box (jpeg_segment_cut).
uint32_t jpeg_restart_interval(uint32_t height, uint32_t width, uint32_t mcu_h, uint32_t mcu_w);

// Where a stream's restart segments are: a one-scan baseline/extended Huffman stream (1 or 3
// components) with a restart interval that divides its MCUs per row, and exactly the restart
// markers that implies, numbered in sequence, the scan ending at the stream's final EOI.
struct JpegSegments {
  uint32_t height = 0, width = 0;  // the frame, pixels
  uint32_t mcu_h = 0, mcu_w = 0;   // one MCU, pixels
  uint32_t mcus_per_row = 0, mcu_rows = 0;
  uint32_t interval = 0;      // MCUs per segment (DRI)
  uint32_t per_row = 0;       // segments per MCU row
  size_t sof = 0;             // offset of SOF's height field (width follows)
  size_t scan = 0;            // first entropy-coded byte: the header is [0, scan)
  std::vector<size_t> start;  // per segment its first byte; last: the stream's end
};

// Indexes `d`; false (and nothing usable) when the stream is not as above -- then the decoder
// takes its usual path, which reports any damage.
bool jpeg_index_segments(const uint8_t* d, size_t n, JpegSegments* seg);

// The MCU rows [row0, row1) and segments [seg0, seg1) (of each row) holding full-size rows
// [y0, y1) and columns [x0, x1) with one MCU of context on every side; as an image, rows
// [y, y + height) and columns [x, x + width) of the frame. `useful`: it leaves out rows above
// or segments beside the box (rows below are never decoded anyway).
struct SegmentCut {
  uint32_t row0 = 0, row1 = 0, seg0 = 0, seg1 = 0;
  uint32_t y = 0, x = 0, height = 0, width = 0;
  bool useful = false;
};
SegmentCut jpeg_segment_cut(const JpegSegments& seg, uint32_t y0, uint32_t y1, uint32_t x0,
                            uint32_t x1);

// The cut as a stream of its own into `out`: the header with the cut's size, its segments in
// raster order with restart markers renumbered from RST0, EOI. Decoded, its pixels at least one
// MCU inside the cut's edges (those that are not the frame's) equal the frame's.
void jpeg_write_cut(const uint8_t* d, const JpegSegments& seg, const SegmentCut& cut,
                    std::vector<uint8_t>* out);

// ---------------------------------------------------------------------------------------------
// Encoding layouts (jpeg.cpp): the streams a cache may hold beyond jpeg_encode's, for the tests
// and benches of the decoder.

// How jpeg_encode_layout lays a stream out; the defaults are jpeg_encode's (4:2:0 baseline).
struct JpegLayout {
  int quality = 90;          // 1..100; default 90
  uint32_t luma_h = 2;       // 3 channels: luma's horizontal sampling over 1x1 chroma (1, 2); 2
  uint32_t luma_v = 2;       // 3 channels: luma's vertical sampling (1, 2); 2 (2x2 = 4:2:0)
  bool progressive = false;  // jpeg_simple_progression's scans instead of one; default off
  int restart = -1;          // MCUs between restart markers: -1 jpeg_restart_interval's rule
                             // (default; none when progressive), 0 none
};

// jpeg_encode with a layout (4:4:4 is luma 1x1, 4:2:2 2x1, 4:4:0 1x2). Same errors.
void jpeg_encode_layout(const uint8_t* pixels, uint32_t height, uint32_t width, uint32_t channels,
                        const JpegLayout& layout, std::vector<uint8_t>* out);

// ---------------------------------------------------------------------------------------------
// Decode statistics (jpeg.cpp; jpeg_stub.cpp without JPEG support)

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
  bool segments = false;    // decoded from a cut of the stream's restart segments
  size_t stream_bytes = 0;  // bytes of the stream libjpeg read from (the cut's, or all)
};

// The stats of the last decode on `scratch` (zeros before any; all-default without JPEG
// support). Valid until the next decode on it.
JpegDecodeStats last_decode_stats(const JpegScratch& scratch);

}  // namespace detail
}  // namespace dscache
