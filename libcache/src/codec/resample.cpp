// Fixed-point separable resampling: the taps of crop_resize's bilinear/area rules and the
// two-pass kernel that applies them (see resample.h).
#include "codec/resample.h"

#include "codec/resample_simd.h"

#include <algorithm>
#include <cstdint>
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

// The horizontal taps laid out for the pass: per output pixel (in output order, flip applied)
// exactly `k` taps, padded with zero weights, source offsets premultiplied by the channel count.
struct PackedTaps {
  uint32_t k = 0;
  std::vector<uint32_t> offset;
  std::vector<int32_t> weight;
};

PackedTaps pack(const AxisTaps& tx, uint32_t out_w, bool flip, size_t channels) {
  PackedTaps p;
  for (const uint32_t n : tx.count) p.k = std::max(p.k, n);
  p.offset.assign(size_t{out_w} * p.k, 0);
  p.weight.assign(size_t{out_w} * p.k, 0);
  for (uint32_t ox = 0; ox < out_w; ++ox) {
    const uint32_t sx = flip ? out_w - 1 - ox : ox;  // mirrored output
    const uint32_t first = tx.first[sx];
    for (uint32_t j = 0; j < tx.count[sx]; ++j) {
      p.offset[size_t{ox} * p.k + j] = static_cast<uint32_t>(tx.index[first + j] * channels);
      p.weight[size_t{ox} * p.k + j] = tx.weight[first + j];
    }
    for (uint32_t j = tx.count[sx]; j < p.k; ++j) {  // zero weight on a tap that is read anyway
      p.offset[size_t{ox} * p.k + j] = p.offset[size_t{ox} * p.k];
    }
  }
  return p;
}

// One output row from the vertically filtered row (values scaled by kOne): result scaled by
// kOne^2, rounded half up. C = channels and K = taps per output when known at compile time,
// else 0 (then `channels` and p.k).
template <size_t C, uint32_t K>
void horizontal_pass(const PackedTaps& p, const int32_t* row, uint32_t out_w, uint8_t* dst,
                     size_t channels = C) {
  const size_t c = C != 0 ? C : channels;
  const uint32_t k = K != 0 ? K : p.k;
  // Fits int32: at most 255 * kOne^2 + kHalf < 2^31 (weights are non-negative, sum kOne).
  constexpr int32_t kHalf = int32_t{1} << (2 * kBits - 1);
  const uint32_t* off = p.offset.data();
  const int32_t* wt = p.weight.data();
  for (uint32_t ox = 0; ox < out_w; ++ox, off += k, wt += k, dst += c) {
    if constexpr (C != 0) {
      int32_t acc[C];
      for (size_t ch = 0; ch < C; ++ch) acc[ch] = kHalf;
      for (uint32_t j = 0; j < k; ++j) {
        const int32_t* r = row + off[j];
        for (size_t ch = 0; ch < C; ++ch) acc[ch] += wt[j] * r[ch];
      }
      // No clamp needed: non-negative weights summing to kOne keep acc in [0, 255 * kOne^2].
      for (size_t ch = 0; ch < C; ++ch) dst[ch] = static_cast<uint8_t>(acc[ch] >> (2 * kBits));
    } else {
      for (size_t ch = 0; ch < c; ++ch) {
        int32_t a = kHalf;
        for (uint32_t j = 0; j < k; ++j) a += wt[j] * row[off[j] + ch];
        dst[ch] = static_cast<uint8_t>(a >> (2 * kBits));
      }
    }
  }
}

template <size_t C>
void horizontal_any_k(const PackedTaps& p, const int32_t* row, uint32_t out_w, uint8_t* dst,
                      size_t channels) {
  switch (p.k) {
    case 1:
      return horizontal_pass<C, 1>(p, row, out_w, dst, channels);
    case 2:
      return horizontal_pass<C, 2>(p, row, out_w, dst, channels);
    case 3:
      return horizontal_pass<C, 3>(p, row, out_w, dst, channels);
    case 4:
      return horizontal_pass<C, 4>(p, row, out_w, dst, channels);
    default:
      return horizontal_pass<C, 0>(p, row, out_w, dst, channels);
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

void resample_reference(const uint8_t* origin, size_t stride, size_t channels, const AxisTaps& ty,
                        const AxisTaps& tx, uint32_t out_h, uint32_t out_w, bool flip, uint8_t* out,
                        std::vector<int32_t>* row_buffer) {
  const size_t c = channels;
  const size_t out_stride = size_t{out_w} * c;
  const PackedTaps packed = pack(tx, out_w, flip, c);
  // The vertical pass covers only the columns the horizontal taps read.
  uint32_t lo = UINT32_MAX;
  for (const uint32_t i : tx.index) lo = std::min(lo, i);
  const size_t begin = size_t{lo} * c, end = size_t{taps_extent(tx)} * c;
  std::vector<int32_t>& row = *row_buffer;
  row.resize(end);
  int32_t* r = row.data() + begin;
  const size_t n = end - begin;
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    const uint32_t first = ty.first[oy], last = first + ty.count[oy];
    {
      const uint8_t* s = origin + size_t{ty.index[first]} * stride + begin;
      const int32_t w = ty.weight[first];
      for (size_t i = 0; i < n; ++i) r[i] = w * s[i];
    }
    for (uint32_t k = first + 1; k < last; ++k) {
      const uint8_t* s = origin + size_t{ty.index[k]} * stride + begin;
      const int32_t w = ty.weight[k];
      for (size_t i = 0; i < n; ++i) r[i] += w * s[i];
    }
    uint8_t* dst = out + size_t{oy} * out_stride;
    switch (c) {
      case 1:
        horizontal_any_k<1>(packed, row.data(), out_w, dst, c);
        break;
      case 3:
        horizontal_any_k<3>(packed, row.data(), out_w, dst, c);
        break;
      default:
        horizontal_any_k<0>(packed, row.data(), out_w, dst, c);
        break;
    }
  }
}

std::vector<ResamplePath> resample_paths() {
  std::vector<ResamplePath> paths{ResamplePath::kScalar};
  if (resample_sse41_kernels() != nullptr) {
    paths.insert(paths.end(),
                 {ResamplePath::kSse41Rows, ResamplePath::kSse41Columns, ResamplePath::kSse41});
  }
  if (resample_avx2_kernels() != nullptr) {
    paths.insert(paths.end(),
                 {ResamplePath::kAvx2Rows, ResamplePath::kAvx2Columns, ResamplePath::kAvx2});
  }
  return paths;
}

void resample_with(ResamplePath path, const uint8_t* origin, size_t stride, size_t channels,
                   const AxisTaps& ty, const AxisTaps& tx, uint32_t out_h, uint32_t out_w,
                   bool flip, uint8_t* out, std::vector<int32_t>* row) {
  const ResampleKernels* kernels = nullptr;
  PassOrder order = PassOrder::kCheaper;
  switch (path) {
    case ResamplePath::kScalar:
      break;
    case ResamplePath::kSse41Rows:
    case ResamplePath::kSse41Columns:
    case ResamplePath::kSse41:
      kernels = resample_sse41_kernels();
      order = path == ResamplePath::kSse41Rows      ? PassOrder::kRows
              : path == ResamplePath::kSse41Columns ? PassOrder::kColumns
                                                    : PassOrder::kCheaper;
      break;
    case ResamplePath::kAvx2Rows:
    case ResamplePath::kAvx2Columns:
    case ResamplePath::kAvx2:
      kernels = resample_avx2_kernels();
      order = path == ResamplePath::kAvx2Rows      ? PassOrder::kRows
              : path == ResamplePath::kAvx2Columns ? PassOrder::kColumns
                                                   : PassOrder::kCheaper;
      break;
  }
  if (kernels != nullptr && resample_simd(*kernels, order, origin, stride, channels, ty, tx, out_h,
                                          out_w, flip, out, row)) {
    return;
  }
  resample_reference(origin, stride, channels, ty, tx, out_h, out_w, flip, out, row);
}

void resample(const uint8_t* origin, size_t stride, size_t channels, const AxisTaps& ty,
              const AxisTaps& tx, uint32_t out_h, uint32_t out_w, bool flip, uint8_t* out,
              std::vector<int32_t>* row) {
  static const ResamplePath fastest = resample_paths().back();
  resample_with(fastest, origin, stride, channels, ty, tx, out_h, out_w, flip, out, row);
}

}  // namespace detail
}  // namespace dscache
