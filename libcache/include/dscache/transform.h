// Per-sample crops, resizes and flips applied by the Loader (deterministic per seed and epoch).
#pragma once

#include <cstdint>

#include "dscache/enum_table.h"
#include "dscache/sample_source.h"

namespace dscache {

enum class CropMode {
  kNone,           // copy the sample as stored (fixed layout only; output = stored shape)
  kCenter,         // the largest centred box with the output's aspect ratio, resized to the
                   // output (= resize the shorter side, cut the centre), for evaluation
  kRandomResized,  // random area/aspect crop resized to the output (torchvision's
                   // RandomResizedCrop), for training
};

// "none", "center", "random_resized".
extern const EnumTable<CropMode> kCropModeNames;

struct TransformOptions {
  CropMode crop = CropMode::kNone;  // see CropMode; default kNone
  uint32_t height = 0;              // output rows; 0 = the stored height (fixed layout, kNone)
  uint32_t width = 0;               // output columns; 0 = the stored width
  double scale_min = 0.08;          // kRandomResized: smallest crop area as a share of the image
  double scale_max = 1.0;           // kRandomResized: largest crop area share
  double ratio_min = 3.0 / 4.0;     // kRandomResized: smallest crop aspect (width / height)
  double ratio_max = 4.0 / 3.0;     // kRandomResized: largest crop aspect
  bool flip = false;                // mirror horizontally with probability 1/2
};

// Throws Error(kInvalidArgument) naming the field: the ragged layout needs kCenter or
// kRandomResized with height and width > 0; kCenter/kRandomResized need both or neither of
// height/width; kRandomResized needs 0 < scale_min <= scale_max <= 1 and
// 0 < ratio_min <= ratio_max (finite). The Loader checks kNone's height/width against the
// stored shape.
void validate(const TransformOptions& options, Layout layout);

// A crop rectangle in source pixels plus the flip decision.
struct CropBox {
  uint32_t y = 0, x = 0, height = 0, width = 0;  // inside the source image
  bool flip = false;
};

// The crop for one sample: a pure function of (options, source size, seed, epoch, sample),
// drawn from Rng(seed, stream_id("xform", epoch, sample)): the first draw's top bit is the flip
// (used only when options.flip), the rest feed kRandomResized (torchvision's 10 attempts, then
// the centred fallback at the nearest allowed ratio).
CropBox choose_crop(const TransformOptions& options, uint32_t src_h, uint32_t src_w, uint64_t seed,
                    uint64_t epoch, uint64_t sample);

// Resizes `box` of `src` (bilinear with half-pixel centres like cv::INTER_LINEAR; along an axis
// shrunk by 2x or more, the mean over each output pixel's footprint like cv::INTER_AREA) into
// out_h x out_w x channels bytes at `out`, mirrored when box.flip. Integer weights, halves
// rounded up: the same bytes on every machine. A box of the output's size without flip is a
// plain copy. Pure C++, no OpenCV. Throws Error(kInvalidArgument) for a box outside `src` or an
// empty box/output.
void crop_resize(const ImageView& src, const CropBox& box, uint32_t out_h, uint32_t out_w,
                 uint8_t* out);

// One sample's geometric draw (crop window, flip, output size), applied to every spatial field
// of the sample by the same object, so that an image, its mask and its boxes cannot disagree:
// the Loader makes one per sample from choose_crop() and calls image(), mask() and boxes() with
// it. Immutable; any thread may use it.
class SpatialTransform {
 public:
  // `box` inside a src_h x src_w sample, resized to out_h x out_w (each > 0), mirrored when
  // box.flip. Throws Error(kInvalidArgument) for a box outside the sample or an empty one.
  SpatialTransform(const CropBox& box, uint32_t src_h, uint32_t src_w, uint32_t out_h,
                   uint32_t out_w);

  const CropBox& box() const { return box_; }
  uint32_t out_height() const { return out_h_; }
  uint32_t out_width() const { return out_w_; }

  // crop_resize(src, box(), out_height(), out_width(), out). src must be src_h x src_w.
  void image(const ImageView& src, uint8_t* out) const;
  // A mask (src_h x src_w elements of `element_bytes` 1 or 2, one channel): output pixel
  // (oy, ox) takes the source pixel whose centre is nearest the centre of its footprint,
  // sy = box.y + floor((oy + 0.5) * box.height / out_h), likewise sx from the mirrored column
  // when box.flip (class ids are never blended). A box of the output's size is a plain copy.
  void mask(const uint8_t* src, uint32_t element_bytes, uint8_t* out) const;
  // Boxes (n rows of x1 y1 x2 y2 float32, source pixel edges, see docs/FORMAT.md "Fields"):
  // each is shifted by the crop, scaled by out/box, mirrored (x -> out_w - x, x1 and x2
  // swapped) and clipped to the output; it is kept when its clipped box has positive area and
  // covers at least `min_visibility` (0..1) of its unclipped mapped area. Writes the kept boxes
  // to out (room for n rows) and, when `kept` is not null, their input row numbers to kept;
  // returns how many were kept. Rows of a `rows_of` field follow with the same `kept`.
  size_t boxes(const float* in, size_t n, double min_visibility, float* out, uint32_t* kept) const;

 private:
  CropBox box_;
  uint32_t src_h_, src_w_, out_h_, out_w_;
};

}  // namespace dscache
