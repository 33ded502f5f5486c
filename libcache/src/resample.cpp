// Fixed-point separable resampling: the taps of crop_resize's bilinear/area rules and the
// two-pass kernel that applies them (see resample.h).
#include "resample.h"

#include <algorithm>
#include <utility>

namespace dscache {
namespace detail {

namespace {

constexpr int kBits = kResampleBits;
constexpr int32_t kOne = kResampleOne;

void add_normalized(AxisTaps& t, const std::vector<std::pair<uint32_t, int64_t>>& raw,
                    int64_t total) {
  t.first.push_back(static_cast<uint32_t>(t.index.size()));
  int32_t sum = 0;
  size_t heaviest = t.index.size();
  int32_t heaviest_w = -1;
  for (const auto& [i, w] : raw) {
    const int32_t q = static_cast<int32_t>((w * kOne + total / 2) / total);
    if (q == 0) continue;
    if (q > heaviest_w) {
      heaviest_w = q;
      heaviest = t.index.size();
    }
    t.index.push_back(i);
    t.weight.push_back(q);
    sum += q;
  }
  if (heaviest == t.index.size()) {  // every weight rounded to 0: cannot happen, be safe
    t.index.push_back(raw.front().first);
    t.weight.push_back(kOne);
  } else {
    t.weight[heaviest] += kOne - sum;  // rounding remainder goes to the heaviest tap
  }
  t.count.push_back(static_cast<uint32_t>(t.index.size()) - t.first.back());
}

// One output row from the vertically filtered row (values scaled by kOne): result scaled by
// kOne^2, rounded half up. C = channels when known at compile time, else 0 and `channels`.
template <size_t C>
void horizontal_pass(const AxisTaps& tx, const int32_t* row, uint32_t out_w, bool flip,
                     uint8_t* dst, size_t channels = C) {
  const size_t c = C != 0 ? C : channels;
  // Fits int32: at most 255 * kOne^2 + kHalf < 2^31 (weights are non-negative, sum kOne).
  constexpr int32_t kHalf = int32_t{1} << (2 * kBits - 1);
  int32_t acc[C != 0 ? C : 1];
  for (uint32_t ox = 0; ox < out_w; ++ox) {
    const uint32_t sx = flip ? out_w - 1 - ox : ox;  // mirrored output
    const uint32_t first = tx.first[sx], last = first + tx.count[sx];
    uint8_t* d = dst + size_t{ox} * c;
    if constexpr (C != 0) {
      for (size_t ch = 0; ch < C; ++ch) acc[ch] = kHalf;
      for (uint32_t k = first; k < last; ++k) {
        const int32_t w = tx.weight[k];
        const int32_t* r = row + size_t{tx.index[k]} * C;
        for (size_t ch = 0; ch < C; ++ch) acc[ch] += w * r[ch];
      }
      for (size_t ch = 0; ch < C; ++ch) {
        d[ch] = static_cast<uint8_t>(std::clamp<int32_t>(acc[ch] >> (2 * kBits), 0, 255));
      }
    } else {
      for (size_t ch = 0; ch < c; ++ch) {
        int32_t a = kHalf;
        for (uint32_t k = first; k < last; ++k)
          a += tx.weight[k] * row[size_t{tx.index[k]} * c + ch];
        d[ch] = static_cast<uint8_t>(std::clamp<int32_t>(a >> (2 * kBits), 0, 255));
      }
    }
  }
}

}  // namespace

// All coordinates are exact rationals in units of 1/(2*out).
AxisTaps make_taps(uint32_t in, uint32_t out) {
  AxisTaps t;
  std::vector<std::pair<uint32_t, int64_t>> raw;
  const int64_t n_in = in, n_out = out;
  for (int64_t o = 0; o < n_out; ++o) {
    raw.clear();
    if (n_in >= 2 * n_out) {
      // Footprint [o*in, (o+1)*in) against source pixel i's [i*out, (i+1)*out).
      const int64_t lo = o * n_in, hi = (o + 1) * n_in;
      for (int64_t i = lo / n_out; i < n_in && i * n_out < hi; ++i) {
        const int64_t overlap = std::min(hi, (i + 1) * n_out) - std::max(lo, i * n_out);
        if (overlap > 0) raw.emplace_back(static_cast<uint32_t>(i), overlap);
      }
      add_normalized(t, raw, n_in);
    } else {
      // Source centre of output o: (o + 0.5) * in/out - 0.5 = ((2o + 1)*in - out) / (2*out).
      const int64_t den = 2 * n_out;
      int64_t num = (2 * o + 1) * n_in - n_out;
      if (num < 0) num = 0;
      int64_t i0 = num / den;
      int64_t frac = num % den;
      if (i0 >= n_in - 1) {
        i0 = n_in - 1;
        frac = 0;
      }
      raw.emplace_back(static_cast<uint32_t>(i0), den - frac);
      if (frac > 0) raw.emplace_back(static_cast<uint32_t>(i0 + 1), frac);
      add_normalized(t, raw, den);
    }
  }
  return t;
}

// Coordinates in units of 1/(8*out) scaled pixels: full-resolution u sits at u*scale_num*out.
AxisTaps make_scaled_area_taps(uint32_t start, uint32_t in, uint32_t out, uint32_t scale_num,
                               uint32_t region_start, uint32_t region_len) {
  AxisTaps t;
  std::vector<std::pair<uint32_t, int64_t>> raw;
  const int64_t n_in = in, n_out = out, m = scale_num;
  const int64_t unit = 8 * n_out;  // one scaled pixel
  const int64_t origin = int64_t{region_start} * unit;
  const int64_t limit = int64_t{region_len} * unit;
  for (int64_t o = 0; o < n_out; ++o) {
    raw.clear();
    const int64_t lo = std::max<int64_t>(0, (int64_t{start} * n_out + o * n_in) * m - origin);
    const int64_t hi = std::min(limit, (int64_t{start} * n_out + (o + 1) * n_in) * m - origin);
    int64_t total = 0;
    for (int64_t i = lo / unit; i * unit < hi; ++i) {
      const int64_t overlap = std::min(hi, (i + 1) * unit) - std::max(lo, i * unit);
      if (overlap > 0) {
        raw.emplace_back(static_cast<uint32_t>(i), overlap);
        total += overlap;
      }
    }
    if (raw.empty()) {  // a footprint clipped away entirely: the nearest pixel (defensive)
      raw.emplace_back(static_cast<uint32_t>(std::min<int64_t>(lo / unit, region_len - 1)), 1);
      total = 1;
    }
    add_normalized(t, raw, total);
  }
  return t;
}

uint32_t taps_extent(const AxisTaps& taps) {
  uint32_t extent = 0;
  for (const uint32_t i : taps.index) extent = std::max(extent, i + 1);
  return extent;
}

void resample(const uint8_t* origin, size_t stride, size_t channels, const AxisTaps& ty,
              const AxisTaps& tx, uint32_t out_h, uint32_t out_w, bool flip, uint8_t* out,
              std::vector<int32_t>* row_buffer) {
  const size_t c = channels;
  const size_t out_stride = size_t{out_w} * c;
  std::vector<int32_t>& row = *row_buffer;
  row.resize(size_t{taps_extent(tx)} * c);
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    std::fill(row.begin(), row.end(), 0);
    const size_t n = row.size();
    int32_t* r = row.data();
    for (uint32_t k = ty.first[oy]; k < ty.first[oy] + ty.count[oy]; ++k) {
      const uint8_t* s = origin + size_t{ty.index[k]} * stride;
      const int32_t w = ty.weight[k];
      for (size_t i = 0; i < n; ++i) r[i] += w * s[i];
    }
    uint8_t* dst = out + size_t{oy} * out_stride;
    switch (c) {
      case 1:
        horizontal_pass<1>(tx, r, out_w, flip, dst);
        break;
      case 3:
        horizontal_pass<3>(tx, r, out_w, flip, dst);
        break;
      default:
        horizontal_pass<0>(tx, r, out_w, flip, dst, c);
        break;
    }
  }
}

}  // namespace detail
}  // namespace dscache
