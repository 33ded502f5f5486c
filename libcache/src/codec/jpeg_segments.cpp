// Restart segments (jpeg_internal.h): the restart interval jpeg_encode writes, the index of a
// stream's segments, and the cut that keeps only the segments around a crop box. Plain byte
// walking; no libjpeg here (jpeg.cpp decodes the cut).
//
// Why: libjpeg must entropy-decode every MCU before the ones it returns (jpeg_skip_scanlines
// and jpeg_crop_scanline save the inverse DCT, not the Huffman decoding). Restart markers reset
// the entropy decoder (DC predictions, bit buffer), so the data between two of them decodes on
// its own. When every MCU row holds a whole number of segments, the segments covering a box are
// themselves a baseline stream: the original header with the cut's size in SOF, the segments in
// raster order, restart markers renumbered 0, 1, ... 7, 0, ..., then EOI.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "codec/jpeg_internal.h"

namespace dscache {
namespace detail {

namespace {

uint32_t be16(const uint8_t* p) { return uint32_t{p[0]} << 8 | p[1]; }

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// Segment widths jpeg_encode aims for, in pixels: narrow enough that a crop skips most of what
// it does not need, wide enough that the markers cost little (2 bytes plus the bits padding the
// segment's last byte, against ~1-2 KiB per 64x16 px of a Q90 photograph).
constexpr uint32_t kSegmentMin = 32, kSegmentMax = 64;

// Below this many pixels a stream gets no markers: too few rows and columns to skip.
constexpr uint64_t kRestartMinPixels = 128 * 128;

}  // namespace

uint32_t jpeg_restart_interval(uint32_t height, uint32_t width, uint32_t mcu_h, uint32_t mcu_w) {
  if (uint64_t{height} * width < kRestartMinPixels || mcu_h == 0 || mcu_w == 0) return 0;
  const uint32_t per_row = ceil_div(width, mcu_w);
  uint32_t best = 0;
  for (uint32_t k = 1; k <= per_row && k * mcu_w <= kSegmentMax; ++k) {
    if (per_row % k == 0) best = k;
  }
  // No divisor gives a segment of kSegmentMin..kSegmentMax px: one segment per MCU row (rows
  // above a box are still skipped).
  return best * mcu_w >= kSegmentMin ? best : per_row;
}

bool jpeg_index_segments(const uint8_t* d, size_t n, JpegSegments* seg) {
  std::vector<size_t> start = std::move(seg->start);  // keeps its capacity: no allocation per call
  start.clear();
  *seg = JpegSegments{};
  seg->start = std::move(start);
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
  uint32_t interval = 0, components = 0, hmax = 0, vmax = 0;
  size_t p = 2;
  // The header: markers up to the first SOS.
  while (true) {
    if (p + 4 > n || d[p] != 0xFF) return false;
    const uint8_t m = d[p + 1];
    if (m == 0xFF) {  // fill byte
      ++p;
      continue;
    }
    const size_t len = be16(d + p + 2);
    if (len < 2 || p + 2 + len > n) return false;
    const uint8_t* body = d + p + 4;  // after the length
    if (m == 0xC0 || m == 0xC1) {     // baseline or extended sequential, Huffman
      if (len < 8 || body[0] != 8) return false;
      seg->height = be16(body + 1);
      seg->width = be16(body + 3);
      components = body[5];
      if (seg->height == 0 || seg->width == 0 || (components != 1 && components != 3) ||
          len != 8 + 3 * size_t{components}) {
        return false;
      }
      for (uint32_t c = 0; c < components; ++c) {
        hmax = std::max<uint32_t>(hmax, body[6 + 3 * c + 1] >> 4);
        vmax = std::max<uint32_t>(vmax, body[6 + 3 * c + 1] & 15);
      }
      seg->sof = p + 5;  // the frame's height field
    } else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) || m == 0xDC) {
      return false;  // progressive, lossless, arithmetic, hierarchical; or DNL
    } else if (m == 0xDD) {
      if (len != 4) return false;
      interval = be16(body);
    } else if (m == 0xDA) {
      if (seg->sof == 0 || body[0] != components) return false;  // one scan, every component
      p += 2 + len;
      break;
    } else if (m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0xD8 || m == 0x01) {
      return false;  // a marker without a segment where the header continues
    }
    p += 2 + len;
  }
  if (interval == 0 || hmax == 0 || vmax == 0) return false;
  seg->mcu_h = components == 1 ? 8 : 8 * vmax;  // one block per MCU in a one-component scan
  seg->mcu_w = components == 1 ? 8 : 8 * hmax;
  seg->mcus_per_row = ceil_div(seg->width, seg->mcu_w);
  seg->mcu_rows = ceil_div(seg->height, seg->mcu_h);
  if (seg->mcus_per_row % interval != 0) return false;
  seg->interval = interval;
  seg->per_row = seg->mcus_per_row / interval;
  seg->scan = p;
  const uint64_t total = uint64_t{seg->per_row} * seg->mcu_rows;
  seg->start.reserve(total + 1);
  seg->start.push_back(p);
  // The entropy-coded data: 0xFF is followed by 0x00 (a stuffed byte), RSTn, or the end.
  while (true) {
    const void* ff = p < n ? std::memchr(d + p, 0xFF, n - p) : nullptr;
    if (ff == nullptr) return false;
    p = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
    if (p + 1 >= n) return false;
    const uint8_t x = d[p + 1];
    if (x == 0x00 || x == 0xFF) {  // stuffing; or a fill byte before a marker
      p += x == 0x00 ? 2 : 1;
      continue;
    }
    if (x >= 0xD0 && x <= 0xD7) {
      if (size_t{x} - 0xD0 != (seg->start.size() - 1) % 8 || seg->start.size() >= total)
        return false;
      seg->start.push_back(p + 2);
      p += 2;
      continue;
    }
    if (x != 0xD9 || p + 2 != n || seg->start.size() != total) return false;
    seg->start.push_back(p + 2);  // the end of the last segment is the EOI's end
    return true;
  }
}

SegmentCut jpeg_segment_cut(const JpegSegments& seg, uint32_t y0, uint32_t y1, uint32_t x0,
                            uint32_t x1) {
  // One MCU of context on every side: fancy upsampling reads chroma one sample beyond a pixel,
  // and the cut's own edges are edges to libjpeg.
  const uint32_t seg_w = seg.interval * seg.mcu_w;
  const uint32_t ya = y0 >= seg.mcu_h ? y0 - seg.mcu_h : 0;
  const uint32_t yb = std::min(seg.height, y1 + seg.mcu_h);
  const uint32_t xa = x0 >= seg.mcu_w ? x0 - seg.mcu_w : 0;
  const uint32_t xb = std::min(seg.width, x1 + seg.mcu_w);
  SegmentCut cut;
  cut.row0 = ya / seg.mcu_h;
  cut.row1 = std::min(seg.mcu_rows, ceil_div(yb, seg.mcu_h));
  cut.seg0 = xa / seg_w;
  cut.seg1 = std::min(seg.per_row, ceil_div(xb, seg_w));
  cut.y = cut.row0 * seg.mcu_h;
  cut.x = cut.seg0 * seg_w;
  cut.height = std::min(seg.height, cut.row1 * seg.mcu_h) - cut.y;
  cut.width = std::min(seg.width, cut.seg1 * seg_w) - cut.x;
  cut.useful = cut.row0 > 0 || cut.seg0 > 0 || cut.seg1 < seg.per_row;
  return cut;
}

void jpeg_write_cut(const uint8_t* d, const JpegSegments& seg, const SegmentCut& cut,
                    std::vector<uint8_t>* out) {
  out->clear();
  out->insert(out->end(), d, d + seg.scan);
  uint8_t* sof = out->data() + seg.sof;
  sof[0] = static_cast<uint8_t>(cut.height >> 8);
  sof[1] = static_cast<uint8_t>(cut.height);
  sof[2] = static_cast<uint8_t>(cut.width >> 8);
  sof[3] = static_cast<uint8_t>(cut.width);
  uint32_t written = 0;
  for (uint32_t r = cut.row0; r < cut.row1; ++r) {
    for (uint32_t s = cut.seg0; s < cut.seg1; ++s) {
      if (written > 0) {
        out->push_back(0xFF);
        out->push_back(static_cast<uint8_t>(0xD0 + (written - 1) % 8));
      }
      const size_t k = size_t{r} * seg.per_row + s;
      // A segment runs to its successor's start, less that marker's two bytes.
      out->insert(out->end(), d + seg.start[k], d + seg.start[k + 1] - 2);
      ++written;
    }
  }
  out->push_back(0xFF);
  out->push_back(0xD9);
}

}  // namespace detail
}  // namespace dscache
