// The horizontal-first driver behind resample()'s SIMD paths and the tap layout its kernels
// read (see resample_simd.h). Portable: the instruction sets live in the kernels.
#include "resample_simd.h"

#include <algorithm>
#include <cstring>

namespace dscache {
namespace detail {

namespace {

// Wider horizontal windows (taps far apart) are left to resample_reference.
constexpr uint32_t kMaxWindow = 1024;
// Ring rows beyond this many int32 in all: resample_reference instead.
constexpr size_t kMaxRing = size_t{1} << 26;

// Each output's taps as one dense window of 2 * pairs pixels, clamped to [lo, extent) so that
// no window starts past extent - window (every window fits: it is at most extent - lo wide).
bool make_plan(const AxisTaps& tx, uint32_t out_w, bool flip, size_t channels, uint32_t group,
               HorizontalPlan* plan) {
  HorizontalPlan& p = *plan;
  p.channels = channels;
  p.out_w = out_w;
  p.padded_w = (out_w + group - 1) / group * group;
  p.lo = *std::min_element(tx.index.begin(), tx.index.end());
  p.extent = taps_extent(tx);
  uint32_t window = 1;
  for (uint32_t o = 0; o < out_w; ++o) {
    const auto b = tx.index.begin() + tx.first[o], e = b + tx.count[o];
    if (b == e) return false;
    const auto [mn, mx] = std::minmax_element(b, e);
    window = std::max(window, *mx - *mn + 1);
  }
  if (window > kMaxWindow) return false;
  p.pairs = (window + 1) / 2;
  const size_t lane = channels == 1 ? 2 : 8;
  p.start.assign(p.padded_w, 0);
  p.weight.assign(size_t{p.padded_w} * p.pairs * lane, 0);
  std::vector<int32_t> dense(size_t{2} * p.pairs);
  for (uint32_t ox = 0; ox < out_w; ++ox) {
    const uint32_t sx = flip ? out_w - 1 - ox : ox;  // mirrored output
    const uint32_t first = tx.first[sx], last = first + tx.count[sx];
    const uint32_t s = std::min(
        *std::min_element(tx.index.begin() + first, tx.index.begin() + last), p.extent - window);
    std::fill(dense.begin(), dense.end(), 0);
    for (uint32_t j = first; j < last; ++j) dense[tx.index[j] - s] += tx.weight[j];
    p.start[ox] = static_cast<uint32_t>((s - p.lo) * channels);
    const size_t g = ox / group, i = ox % group;
    for (uint32_t k = 0; k < p.pairs; ++k) {
      int16_t* w = p.weight.data() + ((g * p.pairs + k) * group + i) * lane;
      for (size_t ch = 0; ch < std::min<size_t>(channels, 4); ++ch) {
        w[2 * ch] = static_cast<int16_t>(dense[2 * k]);
        w[2 * ch + 1] = static_cast<int16_t>(dense[2 * k + 1]);
      }
    }
  }
  return true;
}

}  // namespace

bool resample_simd(const ResampleKernels& kernels, const uint8_t* origin, size_t stride,
                   size_t channels, const AxisTaps& ty, const AxisTaps& tx, uint32_t out_h,
                   uint32_t out_w, bool flip, uint8_t* out, std::vector<int32_t>* buffer) {
  const size_t c = channels;
  if (c < 1 || c > 4 || out_h == 0 || out_w == 0) return false;
  HorizontalPlan plan;
  if (!make_plan(tx, out_w, flip, c, c == 1 ? kernels.grey_group : kernels.colour_group, &plan))
    return false;
  // Ring slots: an output row's taps span at most `ring` source rows, so they never share a
  // slot, and rows shared by neighbouring outputs are filtered once.
  uint32_t ring = 1, top = 0, most_taps = 1;
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    const auto b = ty.index.begin() + ty.first[oy], e = b + ty.count[oy];
    if (b == e) return false;
    const auto [mn, mx] = std::minmax_element(b, e);
    ring = std::max(ring, *mx - *mn + 1);
    top = std::max(top, *mx);
    most_taps = std::max(most_taps, ty.count[oy]);
  }
  const size_t n = size_t{out_w} * c;
  const size_t row_len = (size_t{plan.padded_w} * c + 40 + 7) / 8 * 8;
  if (size_t{ring} * row_len > kMaxRing) return false;
  const size_t span = size_t{plan.extent - plan.lo} * c;  // bytes a source row is read at
  const size_t scratch_len = (span + kResampleReadPad + 3) / 4;
  buffer->assign(size_t{ring} * row_len + scratch_len, 0);
  int32_t* rows = buffer->data();
  uint8_t* scratch = reinterpret_cast<uint8_t*>(rows + size_t{ring} * row_len);
  std::vector<uint32_t> held(ring, UINT32_MAX);  // source row in each slot
  std::vector<const int32_t*> tap_rows(most_taps);
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    const uint32_t first = ty.first[oy], count = ty.count[oy];
    for (uint32_t k = 0; k < count; ++k) {
      const uint32_t y = ty.index[first + k];
      int32_t* slot = rows + size_t{y % ring} * row_len;
      if (held[y % ring] != y) {
        const uint8_t* src = origin + size_t{y} * stride + size_t{plan.lo} * c;
        // The kernels read past the span: fine where a later tapped row of the same image lies
        // that far on; else (the last rows) a padded copy.
        if (size_t{top - y} * stride < kResampleReadPad) {
          std::memcpy(scratch, src, span);
          src = scratch;
        }
        kernels.horizontal(plan, src, slot);
        held[y % ring] = y;
      }
      tap_rows[k] = slot;
    }
    kernels.vertical(tap_rows.data(), ty.weight.data() + first, count, n, out + size_t{oy} * n);
  }
  return true;
}

}  // namespace detail
}  // namespace dscache
