// Masks and boxes moved with their image: the nearest-neighbour mask resample and the box
// mapping of image_decode.h, both driven by the SampleGeometry of the image's own decode.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dscache/ingest/image_decode.h"

namespace dscache {
namespace {

// For each output index along one axis: the source index under its centre, or -1 where the
// centre falls outside what the image covers (a pad border).
std::vector<int64_t> axis_taps(uint32_t out, double scale, double offset, double extent,
                               uint32_t src) {
  std::vector<int64_t> taps(out);
  for (uint32_t o = 0; o < out; ++o) {
    const double c = (double(o) + 0.5 - offset) / scale;
    if (!(c >= 0.0) || c >= extent) {
      taps[o] = -1;
    } else {
      taps[o] = std::min<int64_t>(static_cast<int64_t>(std::floor(c)), int64_t{src} - 1);
    }
  }
  return taps;
}

}  // namespace

void map_mask(const uint8_t* src, uint32_t src_h, uint32_t src_w, uint32_t element_bytes,
              const SampleGeometry& g, uint32_t fill, uint8_t* out) {
  const std::vector<int64_t> ys = axis_taps(g.height, g.scale_y, g.offset_y, g.extent_y, src_h);
  const std::vector<int64_t> xs = axis_taps(g.width, g.scale_x, g.offset_x, g.extent_x, src_w);
  const size_t e = element_bytes;
  uint8_t fill_bytes[2] = {uint8_t(fill & 0xFF), uint8_t(fill >> 8)};  // little-endian
  for (uint32_t oy = 0; oy < g.height; ++oy) {
    uint8_t* row = out + size_t{oy} * g.width * e;
    const uint8_t* from = ys[oy] < 0 ? nullptr : src + size_t(ys[oy]) * src_w * e;
    for (uint32_t ox = 0; ox < g.width; ++ox) {
      const uint8_t* px = (from == nullptr || xs[ox] < 0) ? fill_bytes : from + size_t(xs[ox]) * e;
      std::memcpy(row + size_t{ox} * e, px, e);
    }
  }
}

size_t map_boxes(const float* in, size_t n, const SampleGeometry& g, float* out,
                 std::vector<uint32_t>* kept) {
  kept->clear();
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const float* b = in + 4 * i;
    const double x1 = std::clamp(b[0] * g.scale_x + g.offset_x, 0.0, double(g.width));
    const double y1 = std::clamp(b[1] * g.scale_y + g.offset_y, 0.0, double(g.height));
    const double x2 = std::clamp(b[2] * g.scale_x + g.offset_x, 0.0, double(g.width));
    const double y2 = std::clamp(b[3] * g.scale_y + g.offset_y, 0.0, double(g.height));
    const float m[4] = {float(x1), float(y1), float(x2), float(y2)};
    if (!(m[0] < m[2] && m[1] < m[3])) continue;  // nothing of it left in the sample
    std::memcpy(out + 4 * k, m, sizeof m);
    kept->push_back(static_cast<uint32_t>(i));
    ++k;
  }
  return k;
}

SampleGeometry ragged_geometry(uint32_t decoded_w, uint32_t decoded_h, int reduction,
                               uint32_t out_w, uint32_t out_h) {
  SampleGeometry g;
  g.width = out_w;
  g.height = out_h;
  g.scale_x = double(out_w) / (double(decoded_w) * reduction);
  g.scale_y = double(out_h) / (double(decoded_h) * reduction);
  g.extent_x = double(decoded_w) * reduction;
  g.extent_y = double(decoded_h) * reduction;
  g.source_width = decoded_w;  // the caller sets the source's own size where DCT rounded it
  g.source_height = decoded_h;
  return g;
}

void ragged_size(uint32_t src_h, uint32_t src_w, uint32_t max_side, uint32_t* out_h,
                 uint32_t* out_w) {
  const uint32_t shorter = std::min(src_h, src_w);
  if (max_side == 0 || shorter <= max_side) {
    *out_h = src_h;
    *out_w = src_w;
    return;
  }
  const double s = double(max_side) / double(shorter);
  *out_h =
      src_h == shorter ? max_side : static_cast<uint32_t>(std::max(1.0, std::round(src_h * s)));
  *out_w = src_w == shorter && src_h != shorter
               ? max_side
               : static_cast<uint32_t>(std::max(1.0, std::round(src_w * s)));
}

}  // namespace dscache
