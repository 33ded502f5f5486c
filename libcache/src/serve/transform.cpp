// Per-sample crops (center, random-resized), flips and the resize that applies them.
//
// Both the crop choice and the resize are deterministic: the crop is a pure function of
// (options, source size, seed, epoch, sample), and the resize uses integer weights, so a batch's
// bytes never depend on threads, timing or the machine.
#include "dscache/transform.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec/resample.h"
#include "dscache/error.h"
#include "dscache/sampler.h"

namespace dscache {

namespace {

// Stream tag for per-sample transforms ("xform"); never change it. The generator for sample s
// of epoch e is Rng(seed, stream_id(kTagTransform, e, s)); its first draw decides the flip (top
// bit), the rest feed kRandomResized, so turning flips on or off never changes the crops.
constexpr uint64_t kTagTransform = 0x78666f726dull;

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

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
                  kCropModeNames.to_string(options.crop));
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

  const detail::AxisTaps ty = detail::make_taps(box.height, out_h);
  const detail::AxisTaps tx = detail::make_taps(box.width, out_w);
  std::vector<int32_t> row;
  detail::resample(origin, src_stride, c, ty, tx, out_h, out_w, box.flip, out, &row);
}

SpatialTransform::SpatialTransform(const CropBox& box, uint32_t src_h, uint32_t src_w,
                                   uint32_t out_h, uint32_t out_w)
    : box_(box), src_h_(src_h), src_w_(src_w), out_h_(out_h), out_w_(out_w) {
  if (box.height == 0 || box.width == 0) {
    throw invalid("SpatialTransform: empty crop box " + std::to_string(box.height) + "x" +
                  std::to_string(box.width));
  }
  if (out_h == 0 || out_w == 0) {
    throw invalid("SpatialTransform: empty output " + std::to_string(out_h) + "x" +
                  std::to_string(out_w));
  }
  if (uint64_t{box.y} + box.height > src_h || uint64_t{box.x} + box.width > src_w) {
    throw invalid("SpatialTransform: crop box " + std::to_string(box.height) + "x" +
                  std::to_string(box.width) + "+" + std::to_string(box.y) + "+" +
                  std::to_string(box.x) + " is outside the " + std::to_string(src_h) + "x" +
                  std::to_string(src_w) + " sample");
  }
}

void SpatialTransform::image(const ImageView& src, uint8_t* out) const {
  if (src.height != src_h_ || src.width != src_w_) {
    throw invalid("SpatialTransform::image: the image is " + std::to_string(src.height) + "x" +
                  std::to_string(src.width) + ", the transform was made for " +
                  std::to_string(src_h_) + "x" + std::to_string(src_w_));
  }
  crop_resize(src, box_, out_h_, out_w_, out);
}

namespace {

// Nearest-neighbour sampling of one channel of E-byte elements: output (oy, ox) reads source
// row box.y + floor((2*oy + 1) * box.height / (2*out_h)) (its footprint's centre), columns
// alike, the column taken from the mirrored output column when flipped. Integer arithmetic
// only; each output column's source column is found once (stepping the quotient instead of
// dividing) for every row, and an output row that reads the same source row as the one above
// (an enlarging crop) is a copy of it. Elements are moved as bytes (their stored byte order is
// kept; the buffers need no alignment).
#if defined(__x86_64__) || defined(__i386__)
// Blocks of 16 output columns of a uint8 mask, each one shuffle of the 16 source bytes from
// base[k] (SSSE3); ok[k] == 0: that block is left to the caller.
__attribute__((target("ssse3"))) void shuffle_blocks(const uint8_t* row, const uint32_t* base,
                                                     const uint8_t* masks, const uint8_t* ok,
                                                     uint32_t blocks, uint8_t* dst) {
  for (uint32_t k = 0; k < blocks; ++k) {
    if (ok[k] == 0) continue;
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + base[k]));
    const __m128i m = _mm_loadu_si128(reinterpret_cast<const __m128i*>(masks + 16 * size_t{k}));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * size_t{k}), _mm_shuffle_epi8(v, m));
  }
}
bool has_ssse3() {
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("ssse3"));
  return has;
}
#else
void shuffle_blocks(const uint8_t*, const uint32_t*, const uint8_t*, const uint8_t*, uint32_t,
                    uint8_t*) {}
bool has_ssse3() { return false; }
#endif

// uint8 masks: the blocks of 16 output columns whose source columns lie within 16 bytes of the
// same source row (an enlarging or mildly shrinking crop) go through shuffle_blocks; returns
// how many blocks there are (0: none, every column per element).
uint32_t plan_blocks(const std::vector<uint32_t>& cols, uint32_t box_x, uint32_t src_w,
                     std::vector<uint32_t>* base, std::vector<uint8_t>* masks,
                     std::vector<uint8_t>* ok) {
  if (!has_ssse3()) return 0;
  const uint32_t blocks = static_cast<uint32_t>(cols.size() / 16);
  base->assign(blocks, 0);
  masks->assign(16 * size_t{blocks}, 0);
  ok->assign(blocks, 0);
  for (uint32_t k = 0; k < blocks; ++k) {
    const auto [lo, hi] = std::minmax_element(cols.begin() + 16 * k, cols.begin() + 16 * k + 16);
    if (*hi - *lo >= 16 || uint64_t{box_x} + *lo + 16 > src_w) continue;  // would read past
    (*base)[k] = *lo;
    for (uint32_t i = 0; i < 16; ++i) (*masks)[16 * k + i] = uint8_t(cols[16 * k + i] - *lo);
    (*ok)[k] = 1;
  }
  return blocks;
}

template <size_t E>
void sample_nearest(const uint8_t* src, uint32_t src_w, const CropBox& box, uint32_t out_h,
                    uint32_t out_w, uint8_t* out) {
  const uint64_t den_y = 2 * uint64_t{out_h}, den_x = 2 * uint64_t{out_w};
  const uint64_t step_q = 2 * uint64_t{box.width} / den_x, step_r = 2 * uint64_t{box.width} % den_x;
  std::vector<uint32_t> cols(out_w);  // output column -> source column within the box
  uint64_t q = box.width / den_x, r = box.width % den_x;  // ox = 0: width / den_x
  for (uint32_t ox = 0; ox < out_w; ++ox) {
    cols[box.flip ? out_w - 1 - ox : ox] = static_cast<uint32_t>(q);
    q += step_q;
    r += step_r;
    if (r >= den_x) {
      r -= den_x;
      ++q;
    }
  }
  std::vector<uint32_t> base;
  std::vector<uint8_t> masks, ok;
  const uint32_t blocks = E == 1 ? plan_blocks(cols, box.x, src_w, &base, &masks, &ok) : 0;
  const size_t row_bytes = size_t{out_w} * E;
  uint64_t last_sy = UINT64_MAX;
  for (uint32_t oy = 0; oy < out_h; ++oy) {
    const uint64_t sy = box.y + (2 * uint64_t{oy} + 1) * box.height / den_y;
    uint8_t* dst = out + uint64_t{oy} * row_bytes;
    if (sy == last_sy) {
      std::memcpy(dst, dst - row_bytes, row_bytes);
      continue;
    }
    last_sy = sy;
    const uint8_t* row = src + (sy * src_w + box.x) * E;
    if (blocks > 0) shuffle_blocks(row, base.data(), masks.data(), ok.data(), blocks, dst);
    for (uint32_t ox = 0; ox < out_w; ++ox) {
      if (ox / 16 < blocks && ok[ox / 16] != 0) {
        ox += 15;  // that block's 16 columns are written
        continue;
      }
      std::memcpy(dst + size_t{ox} * E, row + size_t{cols[ox]} * E, E);
    }
  }
}

}  // namespace

void SpatialTransform::mask(const uint8_t* src, uint32_t element_bytes, uint8_t* out) const {
  if (element_bytes != 1 && element_bytes != 2) {
    throw invalid("SpatialTransform::mask: elements of " + std::to_string(element_bytes) +
                  " bytes (masks hold uint8 or uint16 class ids)");
  }
  if (box_.height == out_h_ && box_.width == out_w_ && !box_.flip) {
    const size_t src_stride = size_t{src_w_} * element_bytes;
    const size_t row = size_t{out_w_} * element_bytes;
    const uint8_t* origin = src + size_t{box_.y} * src_stride + size_t{box_.x} * element_bytes;
    for (uint32_t y = 0; y < out_h_; ++y) {
      std::memcpy(out + y * row, origin + y * src_stride, row);
    }
    return;
  }
  if (element_bytes == 1) {
    sample_nearest<1>(src, src_w_, box_, out_h_, out_w_, out);
  } else {
    sample_nearest<2>(src, src_w_, box_, out_h_, out_w_, out);
  }
}

size_t SpatialTransform::boxes(const float* in, size_t n, double min_visibility, float* out,
                               uint32_t* kept) const {
  if (!(min_visibility >= 0.0 && min_visibility <= 1.0)) {
    throw invalid("SpatialTransform::boxes: min_visibility " + std::to_string(min_visibility) +
                  " is outside [0, 1]");
  }
  const double bx = box_.x, by = box_.y, bw = box_.width, bh = box_.height;
  const double ow = out_w_, oh = out_h_;
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const float* b = in + 4 * i;
    double x1 = (double{b[0]} - bx) * ow / bw;
    double y1 = (double{b[1]} - by) * oh / bh;
    double x2 = (double{b[2]} - bx) * ow / bw;
    double y2 = (double{b[3]} - by) * oh / bh;
    if (box_.flip) {
      const double f1 = ow - x2, f2 = ow - x1;
      x1 = f1;
      x2 = f2;
    }
    const double area = (x2 - x1) * (y2 - y1);
    const double cx1 = std::clamp(x1, 0.0, ow), cx2 = std::clamp(x2, 0.0, ow);
    const double cy1 = std::clamp(y1, 0.0, oh), cy2 = std::clamp(y2, 0.0, oh);
    const double clipped = (cx2 - cx1) * (cy2 - cy1);
    const float f[4] = {static_cast<float>(cx1), static_cast<float>(cy1), static_cast<float>(cx2),
                        static_cast<float>(cy2)};
    // Written so that NaN (a non-finite box) compares false and is dropped; a box left with no
    // area once stored as float is dropped too.
    if (!(f[2] > f[0] && f[3] > f[1] && x2 > x1 && y2 > y1 && clipped >= min_visibility * area)) {
      continue;
    }
    std::memcpy(out + 4 * m, f, sizeof f);
    if (kept != nullptr) kept[m] = static_cast<uint32_t>(i);
    ++m;
  }
  return m;
}

}  // namespace dscache
