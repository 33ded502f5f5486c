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
#include "resample.h"

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

}  // namespace dscache
