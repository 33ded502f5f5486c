// Per-sample crops (center, random-resized), flips and the resize that applies them.
//
// Both the crop choice and the resize are deterministic: the crop is a pure function of
// (options, source size, seed, epoch, sample), and the resize uses integer weights, so a batch's
// bytes never depend on threads, timing or the machine.
#include "dscache/transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/sampler.h"

namespace dscache {

namespace {

// Stream tag for per-sample transforms ("xform"); never change it. The generator for sample s
// of epoch e is Rng(seed, stream_id(kTagTransform, e, s)); its first draw decides the flip (top
// bit), the rest feed kRandomResized, so turning flips on or off never changes the crops.
constexpr uint64_t kTagTransform = 0x78666f726dull;

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

const char* crop_name(CropMode mode) {
  switch (mode) {
    case CropMode::kNone:
      return "none";
    case CropMode::kCenter:
      return "center";
    case CropMode::kRandomResized:
      return "random_resized";
  }
  return "unknown";
}

uint32_t clamp_side(double v, uint32_t hi) {
  if (!(v >= 1.0)) return 1;
  if (v >= static_cast<double>(hi)) return hi;
  return static_cast<uint32_t>(v);
}

// The largest centred rectangle of aspect out_w:out_h inside src_h x src_w (rounded to whole
// pixels): what "resize the shorter side, then cut the centre" reads from the source.
CropBox center_box(uint32_t src_h, uint32_t src_w, uint32_t out_h, uint32_t out_w) {
  CropBox box;
  if (out_h == 0 || out_w == 0) {
    out_h = src_h;
    out_w = src_w;
  }
  const uint64_t wide = uint64_t{src_w} * out_h;  // compare src_w/src_h with out_w/out_h
  const uint64_t tall = uint64_t{src_h} * out_w;
  if (wide >= tall) {  // the source is wider: keep every row
    box.height = src_h;
    box.width = static_cast<uint32_t>((uint64_t{src_h} * out_w + out_h / 2) / out_h);
  } else {  // the source is taller: keep every column
    box.width = src_w;
    box.height = static_cast<uint32_t>((uint64_t{src_w} * out_h + out_w / 2) / out_w);
  }
  box.height = std::clamp<uint32_t>(box.height, 1, src_h);
  box.width = std::clamp<uint32_t>(box.width, 1, src_w);
  box.y = (src_h - box.height) / 2;
  box.x = (src_w - box.width) / 2;
  return box;
}

// torchvision.transforms.RandomResizedCrop.get_params, draw for draw, with std::round (half
// away from zero) in place of Python's round.
CropBox random_resized_box(const TransformOptions& o, uint32_t src_h, uint32_t src_w, Rng& rng) {
  const double area = static_cast<double>(src_h) * src_w;
  const double log_lo = std::log(o.ratio_min);
  const double log_hi = std::log(o.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (o.scale_min + (o.scale_max - o.scale_min) * rng.uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * rng.uniform());
    const double w = std::round(std::sqrt(target * aspect));
    const double h = std::round(std::sqrt(target / aspect));
    if (w > 0 && h > 0 && w <= src_w && h <= src_h) {
      CropBox box;
      box.width = static_cast<uint32_t>(w);
      box.height = static_cast<uint32_t>(h);
      box.y = static_cast<uint32_t>(rng.below(uint64_t{src_h} - box.height + 1));
      box.x = static_cast<uint32_t>(rng.below(uint64_t{src_w} - box.width + 1));
      return box;
    }
  }
  // Fallback: the whole image, cut to the nearest allowed aspect ratio, centred.
  CropBox box;
  const double in_ratio = static_cast<double>(src_w) / src_h;
  if (in_ratio < o.ratio_min) {
    box.width = src_w;
    box.height = clamp_side(std::round(src_w / o.ratio_min), src_h);
  } else if (in_ratio > o.ratio_max) {
    box.height = src_h;
    box.width = clamp_side(std::round(src_h * o.ratio_max), src_w);
  } else {
    box.height = src_h;
    box.width = src_w;
  }
  box.y = (src_h - box.height) / 2;
  box.x = (src_w - box.width) / 2;
  return box;
}

// Fixed-point resampling weights along one axis: output o reads taps [first, first + count)
// of `index`/`weight`, with weights summing to exactly kOne (so flat areas stay flat).
constexpr int kBits = 11;
constexpr int32_t kOne = 1 << kBits;

struct AxisTaps {
  std::vector<uint32_t> first;  // per output: first tap
  std::vector<uint32_t> count;  // per output: number of taps
  std::vector<uint32_t> index;  // source coordinate (box-relative) of each tap
  std::vector<int32_t> weight;  // weight of each tap, /kOne
};

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

// Bilinear with half-pixel centres (cv::INTER_LINEAR geometry) when in < 2*out; box filter over
// each output pixel's exact footprint (cv::INTER_AREA) when shrinking by 2x or more. At exactly
// 2x the two agree. All coordinates are exact rationals in units of 1/(2*out).
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

void validate(const TransformOptions& options, Layout layout) {
  if (options.crop != CropMode::kNone && options.crop != CropMode::kCenter &&
      options.crop != CropMode::kRandomResized) {
    throw invalid("transform.crop has an unknown value");
  }
  if (layout == Layout::kRagged) {
    if (options.crop == CropMode::kNone) {
      throw invalid(
          "transform.crop none cannot batch the ragged layout (samples differ in size); use "
          "center or random_resized with transform.height and transform.width");
    }
    if (options.height == 0) throw invalid("transform.height must be >= 1 for the ragged layout");
    if (options.width == 0) throw invalid("transform.width must be >= 1 for the ragged layout");
  }
  if ((options.height == 0) != (options.width == 0) && options.crop != CropMode::kNone) {
    throw invalid(std::string("transform.height and transform.width must both be set (or both "
                              "0) for crop ") +
                  crop_name(options.crop));
  }
  if (options.crop == CropMode::kRandomResized) {
    if (!(options.scale_min > 0.0)) throw invalid("transform.scale_min must be > 0");
    if (!(options.scale_min <= options.scale_max)) {
      throw invalid("transform.scale_min must be <= transform.scale_max");
    }
    if (!(options.scale_max <= 1.0)) throw invalid("transform.scale_max must be <= 1");
    if (!(options.ratio_min > 0.0)) throw invalid("transform.ratio_min must be > 0");
    if (!(options.ratio_min <= options.ratio_max)) {
      throw invalid("transform.ratio_min must be <= transform.ratio_max");
    }
    if (!std::isfinite(options.ratio_max)) throw invalid("transform.ratio_max must be finite");
  }
}

CropBox choose_crop(const TransformOptions& options, uint32_t src_h, uint32_t src_w, uint64_t seed,
                    uint64_t epoch, uint64_t sample) {
  Rng rng(seed, stream_id(kTagTransform, epoch, sample));
  const bool flip = (rng.next() >> 63) != 0;  // always drawn first; see kTagTransform
  CropBox box;
  if (src_h == 0 || src_w == 0) return box;
  switch (options.crop) {
    case CropMode::kNone:
      box.height = src_h;
      box.width = src_w;
      break;
    case CropMode::kCenter:
      box = center_box(src_h, src_w, options.height, options.width);
      break;
    case CropMode::kRandomResized:
      box = random_resized_box(options, src_h, src_w, rng);
      break;
  }
  box.flip = options.flip && flip;
  return box;
}

void crop_resize(const ImageView& src, const CropBox& box, uint32_t out_h, uint32_t out_w,
                 uint8_t* out) {
  if (box.height == 0 || box.width == 0 || out_h == 0 || out_w == 0 || src.channels == 0) {
    throw invalid("crop_resize: empty crop box, output or channel count");
  }
  if (uint64_t{box.y} + box.height > src.height || uint64_t{box.x} + box.width > src.width) {
    throw invalid("crop_resize: crop box " + std::to_string(box.height) + "x" +
                  std::to_string(box.width) + "+" + std::to_string(box.y) + "+" +
                  std::to_string(box.x) + " is outside the " + std::to_string(src.height) + "x" +
                  std::to_string(src.width) + " image");
  }
  const size_t c = src.channels;
  const size_t src_stride = size_t{src.width} * c;
  const size_t out_stride = size_t{out_w} * c;
  const uint8_t* origin = src.data + size_t{box.y} * src_stride + size_t{box.x} * c;

  if (box.height == out_h && box.width == out_w && !box.flip) {
    for (uint32_t y = 0; y < out_h; ++y) {
      std::memcpy(out + y * out_stride, origin + y * src_stride, out_stride);
    }
    return;
  }

  const AxisTaps ty = make_taps(box.height, out_h);
  const AxisTaps tx = make_taps(box.width, out_w);
  // Vertical pass per output row into `row` (box.width * c values scaled by kOne), then the
  // horizontal pass; the result is scaled by kOne^2 and rounded half up.
  std::vector<int32_t> row(size_t{box.width} * c);
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    std::fill(row.begin(), row.end(), 0);
    for (uint32_t k = ty.first[oy]; k < ty.first[oy] + ty.count[oy]; ++k) {
      const uint8_t* s = origin + size_t{ty.index[k]} * src_stride;
      const int32_t w = ty.weight[k];
      for (size_t i = 0; i < row.size(); ++i) row[i] += w * s[i];
    }
    uint8_t* dst = out + size_t{oy} * out_stride;
    switch (c) {
      case 1:
        horizontal_pass<1>(tx, row.data(), out_w, box.flip, dst);
        break;
      case 3:
        horizontal_pass<3>(tx, row.data(), out_w, box.flip, dst);
        break;
      default:
        horizontal_pass<0>(tx, row.data(), out_w, box.flip, dst, c);
        break;
    }
  }
}

}  // namespace dscache
