// The drivers behind resample()'s SIMD paths (rows first, columns first) and the tap layout
// their kernels read (see resample_simd.h). Portable: the instruction sets live in the kernels.
#include "codec/resample_simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dscache {
namespace detail {

namespace {

// Wider horizontal windows (taps far apart) are left to resample_reference.
constexpr uint32_t kMaxWindow = 1024;
// Buffers beyond this many int32 in all: resample_reference instead.
constexpr size_t kMaxBuffer = size_t{1} << 26;

// Rows first, 8 output values a step: each 128-bit lane's 4 values take their pair's bytes
// from the 16 at lane_base with pshufb. False where some lane's bytes do not fit in 16.
bool lay_out_lanes(HorizontalPlan& p, const std::vector<int32_t>& dense) {
  const size_t c = p.channels, n = size_t{p.out_w} * c, taps = size_t{2} * p.pairs;
  p.chunks = static_cast<uint32_t>((n + 7) / 8);
  const size_t lanes = size_t{p.chunks} * 2;
  // A lane's bytes for pair k are those for pair 0 moved by 2 * k * c: one base and one control
  // serve every pair.
  std::vector<uint32_t> base(lanes, UINT32_MAX);
  for (size_t ox = 0, v = 0; ox < p.out_w; ++ox) {
    for (size_t ch = 0; ch < c; ++ch, ++v) {
      base[v / 4] = std::min<uint32_t>(base[v / 4], p.start[ox] + static_cast<uint32_t>(ch));
    }
  }
  p.lane_base.assign(lanes * p.pairs, 0);
  p.lane_control.assign(lanes * p.pairs * 16, 0x80);  // 0x80: a zero byte
  p.weight.assign(lanes * p.pairs * 8, 0);
  for (size_t ox = 0, v = 0; ox < p.out_w; ++ox) {
    for (size_t ch = 0; ch < c; ++ch, ++v) {
      const size_t lane = v / 4, a = p.start[ox] + ch - base[lane];
      if (a + c >= 16) return false;
      for (uint32_t k = 0; k < p.pairs; ++k) {
        const size_t at = (lane / 2 * p.pairs + k) * 2 + lane % 2;  // (chunk, pair, lane)
        p.lane_base[at] = base[lane] + static_cast<uint32_t>(2 * k * c);
        uint8_t* control = p.lane_control.data() + at * 16 + v % 4 * 4;
        control[0] = static_cast<uint8_t>(a);
        control[2] = static_cast<uint8_t>(a + c);
        int16_t* w = p.weight.data() + at * 8 + v % 4 * 2;
        w[0] = static_cast<int16_t>(dense[ox * taps + 2 * k]);
        w[1] = static_cast<int16_t>(dense[ox * taps + 2 * k + 1]);
      }
    }
  }
  return true;
}

// Each output's taps as one dense window of 2 * pairs weights (`dense`, output after output),
// clamped to [lo, extent) so that no window starts past extent - window (every window fits: it
// is at most extent - lo wide). False for taps the kernels do not take.
bool plan_windows(const AxisTaps& tx, uint32_t out_w, bool flip, size_t channels,
                  HorizontalPlan* plan, std::vector<int32_t>* dense) {
  HorizontalPlan& p = *plan;
  p.channels = channels;
  p.out_w = out_w;
  p.lo = *std::min_element(tx.index.begin(), tx.index.end());
  p.extent = taps_extent(tx);
  p.window = 1;
  for (uint32_t o = 0; o < out_w; ++o) {
    const auto b = tx.index.begin() + tx.first[o], e = b + tx.count[o];
    if (b == e) return false;
    const auto [mn, mx] = std::minmax_element(b, e);
    p.window = std::max(p.window, *mx - *mn + 1);
  }
  if (p.window > kMaxWindow) return false;
  p.pairs = (p.window + 1) / 2;
  const size_t taps = size_t{2} * p.pairs;
  dense->assign(size_t{out_w} * taps, 0);
  p.start.assign(out_w, 0);
  for (uint32_t ox = 0; ox < out_w; ++ox) {
    const uint32_t sx = flip ? out_w - 1 - ox : ox;  // mirrored output
    const uint32_t first = tx.first[sx], last = first + tx.count[sx];
    const uint32_t s = std::min(
        *std::min_element(tx.index.begin() + first, tx.index.begin() + last), p.extent - p.window);
    int32_t sum = 0;
    for (uint32_t j = first; j < last; ++j) {
      if (tx.weight[j] < 0 || tx.weight[j] > kResampleOne) return false;
      (*dense)[ox * taps + tx.index[j] - s] += tx.weight[j];
      sum += tx.weight[j];
    }
    if (sum != kResampleOne) return false;  // the kernels' int16 and int32 bounds rest on it
    p.start[ox] = static_cast<uint32_t>((s - p.lo) * channels);
  }
  return true;
}

uint32_t group_of(const ResampleKernels& kernels, size_t channels, PassOrder order) {
  return order == PassOrder::kColumns ? kernels.pixel_group
         : channels == 1              ? kernels.grey_group
                                      : kernels.colour_group;
}

// The windows laid out for the kernels that take `group` outputs a step (pixels, grey).
void lay_out_groups(HorizontalPlan& p, const std::vector<int32_t>& dense,
                    const ResampleKernels& kernels, PassOrder order) {
  const size_t channels = p.channels, taps = size_t{2} * p.pairs;
  const uint32_t group = group_of(kernels, channels, order);
  p.lanes = false;
  p.padded_w = (p.out_w + group - 1) / group * group;
  p.start.resize(p.padded_w, 0);
  const size_t lane = channels == 1 ? 2 : 8;
  if (order == PassOrder::kColumns) {
    p.weight32.assign(size_t{p.padded_w} * p.window * 4, 0);
  } else {
    p.weight.assign(size_t{p.padded_w} * p.pairs * lane, 0);
  }
  for (uint32_t ox = 0; ox < p.out_w; ++ox) {
    const size_t g = ox / group, i = ox % group;
    const int32_t* d = dense.data() + size_t{ox} * taps;
    if (order == PassOrder::kColumns) {
      for (uint32_t j = 0; j < p.window; ++j) {
        std::fill_n(p.weight32.data() + ((g * p.window + j) * group + i) * 4, 4, d[j]);
      }
      continue;
    }
    for (uint32_t k = 0; k < p.pairs; ++k) {
      int16_t* w = p.weight.data() + ((g * p.pairs + k) * group + i) * lane;
      for (size_t ch = 0; ch < channels; ++ch) {
        w[2 * ch] = static_cast<int16_t>(d[2 * k]);
        w[2 * ch + 1] = static_cast<int16_t>(d[2 * k + 1]);
      }
    }
  }
}

// What both orders need of the vertical taps.
struct RowSpan {
  uint32_t ring = 1;         // most source rows one output row's taps span
  uint32_t top = 0;          // last tapped source row
  uint32_t most_taps = 1;    // most taps of one output row
  size_t taps = 0;           // taps of all output rows
  size_t tap_pairs = 0;      // ... in pairs, each output row's rounded up
  size_t distinct = 0;       // distinct tapped rows
  std::vector<bool> tapped;  // per source row up to top
};

// False for vertical taps the kernels do not take: an output row without taps, or weights that
// are negative or do not sum to kResampleOne.
bool row_span(const AxisTaps& ty, uint32_t out_h, RowSpan* span) {
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    const auto b = ty.index.begin() + ty.first[oy], e = b + ty.count[oy];
    if (b == e) return false;
    const auto [mn, mx] = std::minmax_element(b, e);
    span->ring = std::max(span->ring, *mx - *mn + 1);
    span->top = std::max(span->top, *mx);
    span->most_taps = std::max(span->most_taps, ty.count[oy]);
    int32_t sum = 0;
    for (uint32_t k = ty.first[oy]; k < ty.first[oy] + ty.count[oy]; ++k) {
      if (ty.weight[k] < 0 || ty.weight[k] > kResampleOne) return false;
      sum += ty.weight[k];
    }
    if (sum != kResampleOne) return false;
    span->taps += ty.count[oy];
    span->tap_pairs += (ty.count[oy] + 1) / 2;
  }
  std::vector<bool>& seen = span->tapped;
  seen.assign(size_t{span->top} + 1, false);
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    for (uint32_t k = ty.first[oy]; k < ty.first[oy] + ty.count[oy]; ++k) {
      span->distinct += seen[ty.index[k]] ? 0 : 1;
      seen[ty.index[k]] = true;
    }
  }
  return true;
}

// Source row y from pixel lo, readable kResampleReadPad bytes past `len`: in place where a
// later tapped row of the same image lies that far on, else (the last rows) a padded copy.
const uint8_t* padded_row(const uint8_t* origin, size_t stride, uint32_t y, uint32_t top,
                          size_t begin, size_t len, uint8_t* scratch) {
  const uint8_t* src = origin + size_t{y} * stride + begin;
  if (size_t{top - y} * stride >= kResampleReadPad) return src;
  std::memcpy(scratch, src, len);
  return scratch;
}

bool rows_first(const ResampleKernels& kernels, const uint8_t* origin, size_t stride,
                const AxisTaps& ty, const HorizontalPlan& plan, const RowSpan& rs, uint32_t out_h,
                uint8_t* out, std::vector<int32_t>* buffer) {
  const size_t c = plan.channels;
  const size_t n = size_t{plan.out_w} * c;
  // Ring slots: an output row's taps span at most rs.ring source rows, so they never share a
  // slot, and rows shared by neighbouring outputs are filtered once. One slot more lets the
  // next tapped row be filtered with the one needed now (one pass over the plan for two rows).
  const size_t written = plan.lanes ? size_t{plan.chunks} * 8 : size_t{plan.padded_w} * c;
  const size_t row_len = (written + 40 + 7) / 8 * 8;
  const size_t span = size_t{plan.extent - plan.lo} * c;  // bytes a source row is read at
  const size_t scratch_len = (span + kResampleReadPad + 3) / 4;
  uint32_t ring = 2;  // a power of two: slot y & (ring - 1), no division per tap
  while (ring < rs.ring + 1) ring *= 2;
  if (size_t{ring} * row_len + 2 * scratch_len > kMaxBuffer) return false;
  buffer->assign(size_t{ring} * row_len + 2 * scratch_len, 0);
  int32_t* rows = buffer->data();
  uint8_t* scratch = reinterpret_cast<uint8_t*>(rows + size_t{ring} * row_len);
  uint8_t* scratch2 = scratch + scratch_len * 4;
  std::vector<uint32_t> held(ring, UINT32_MAX);  // source row in each slot
  std::vector<const int32_t*> tap_rows(rs.most_taps);
  auto slot = [&](uint32_t y) { return rows + size_t{y & (ring - 1)} * row_len; };
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    const uint32_t first = ty.first[oy], count = ty.count[oy];
    const uint32_t low =
        *std::min_element(ty.index.begin() + first, ty.index.begin() + first + count);
    for (uint32_t k = 0; k < count; ++k) {
      const uint32_t y = ty.index[first + k], z = y + 1;
      if (held[y & (ring - 1)] != y) {
        const uint8_t* src = padded_row(origin, stride, y, rs.top, plan.lo * c, span, scratch);
        if (z <= rs.top && rs.tapped[z] && held[z & (ring - 1)] != z && z - low < ring) {
          kernels.horizontal2(plan, src,
                              padded_row(origin, stride, z, rs.top, plan.lo * c, span, scratch2),
                              slot(y), slot(z));
          held[z & (ring - 1)] = z;
        } else {
          kernels.horizontal(plan, src, slot(y));
        }
        held[y & (ring - 1)] = y;
      }
      tap_rows[k] = slot(y);
    }
    kernels.vertical(tap_rows.data(), ty.weight.data() + first, count, n, out + size_t{oy} * n);
  }
  return true;
}

bool columns_first(const ResampleKernels& kernels, const uint8_t* origin, size_t stride,
                   const AxisTaps& ty, const HorizontalPlan& plan, const RowSpan& rs,
                   uint32_t out_h, uint8_t* out, std::vector<int32_t>* buffer) {
  const size_t c = plan.channels;
  const size_t n = size_t{plan.out_w} * c;
  const size_t span = size_t{plan.extent - plan.lo} * c;
  const size_t column_len = (span + 32 + 8 + 7) / 8 * 8;
  const size_t scratch_row = (span + kResampleReadPad + 3) / 4;  // int32 per copied row
  const size_t pixels_len = (size_t{plan.padded_w} * c + 8 + 3) / 4;
  const size_t total = column_len + scratch_row * rs.most_taps + pixels_len;
  if (total > kMaxBuffer) return false;
  buffer->assign(total, 0);
  int32_t* column = buffer->data();
  int32_t* scratch = column + column_len;
  uint8_t* pixels = reinterpret_cast<uint8_t*>(scratch + scratch_row * rs.most_taps);
  std::vector<const uint8_t*> tap_rows(rs.most_taps);
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    const uint32_t first = ty.first[oy], count = ty.count[oy];
    for (uint32_t k = 0; k < count; ++k) {
      uint8_t* copy = reinterpret_cast<uint8_t*>(scratch + k * scratch_row);
      tap_rows[k] =
          padded_row(origin, stride, ty.index[first + k], rs.top, plan.lo * c, span, copy);
    }
    kernels.columns(tap_rows.data(), ty.weight.data() + first, count, span, column);
    kernels.pixels(plan, column, pixels);
    std::memcpy(out + size_t{oy} * n, pixels, n);
  }
  return true;
}

// The order with the smaller estimate (in ns, fitted to AVX2 runs of test_resample's speed
// case and wider downscales) for windows `p`, `lanes` if the rows-first lane layout fits: rows
// first costs per distinct source row and step of the horizontal kernel (8 values, or 2 pixels)
// and tap pair, plus per 8 values and tap of the vertical pass; columns first per tap pair and
// 16 bytes of the vertical pass, plus per output pixel and per pixel and tap of the horizontal.
PassOrder cheaper_order(const HorizontalPlan& p, bool lanes, const ResampleKernels& kernels,
                        const RowSpan& rs, uint32_t out_h) {
  const uint32_t group = group_of(kernels, p.channels, PassOrder::kRows);
  const double steps = lanes ? double(p.chunks) : double((p.out_w + group - 1) / group * group) / 2;
  const double values = double(p.out_w) * p.channels;
  const double span = double(p.extent - p.lo) * p.channels;
  const double rows = (lanes ? 1.0 : 0.9) * double(rs.distinct) * steps * p.pairs +
                      0.3 * double(rs.taps) * std::ceil(values / 8);
  const double columns = 0.71 * double(rs.tap_pairs) * std::ceil(span / 16) +
                         double(out_h) * p.out_w * (0.66 + 0.34 * p.window);
  return columns < rows ? PassOrder::kColumns : PassOrder::kRows;
}

}  // namespace

bool resample_simd(const ResampleKernels& kernels, PassOrder order, const uint8_t* origin,
                   size_t stride, size_t channels, const AxisTaps& ty, const AxisTaps& tx,
                   uint32_t out_h, uint32_t out_w, bool flip, uint8_t* out,
                   std::vector<int32_t>* buffer) {
  const size_t c = channels;
  if (c < 1 || c > 4 || out_h == 0 || out_w == 0) return false;
  RowSpan rs;
  if (!row_span(ty, out_h, &rs)) return false;
  HorizontalPlan plan;
  std::vector<int32_t> dense;
  if (!plan_windows(tx, out_w, flip, c, &plan, &dense)) return false;
  const bool lanes = order != PassOrder::kColumns && lay_out_lanes(plan, dense);
  if (order == PassOrder::kCheaper) order = cheaper_order(plan, lanes, kernels, rs, out_h);
  if (order == PassOrder::kRows && lanes) {
    plan.lanes = true;
  } else {
    lay_out_groups(plan, dense, kernels, order);
  }
  return order == PassOrder::kColumns
             ? columns_first(kernels, origin, stride, ty, plan, rs, out_h, out, buffer)
             : rows_first(kernels, origin, stride, ty, plan, rs, out_h, out, buffer);
}

}  // namespace detail
}  // namespace dscache
