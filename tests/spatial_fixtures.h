// A scene whose image, mask and boxes agree by construction (a drawn rectangle, the mask that
// labels it, the box around it), and the check that they still agree after a crop, resize and
// flip: shared by the SpatialTransform tests and the Loader's field tests.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dscache/transform.h"

namespace dscache::test {

// The nearest rule of dscache/transform.h, spelled out per pixel for a one-channel mask of T:
// sy = box.y + floor((oy + 0.5) * box.height / out_h), sx likewise from the mirrored column
// when flipped.
template <typename T>
std::vector<T> nearest_reference(const std::vector<T>& src, uint32_t src_w, const CropBox& b,
                                 uint32_t oh, uint32_t ow) {
  std::vector<T> out(size_t{oh} * ow);
  for (uint32_t oy = 0; oy < oh; ++oy) {
    for (uint32_t ox = 0; ox < ow; ++ox) {
      const uint32_t mx = b.flip ? ow - 1 - ox : ox;
      const uint64_t sy = b.y + static_cast<uint64_t>((oy + 0.5L) * b.height / oh);
      const uint64_t sx = b.x + static_cast<uint64_t>((mx + 0.5L) * b.width / ow);
      out[size_t{oy} * ow + ox] = src[sy * src_w + sx];
    }
  }
  return out;
}

// An h x w x c image, black but for the rectangle [x1, x2) x [y1, y2) (every channel 255); a
// mask of `mask_bytes` (1 or 2) per pixel holding `cls` in that rectangle and 0 elsewhere; one
// box x1 y1 x2 y2 around it.
struct Scene {
  uint32_t h = 0, w = 0, c = 3, mask_bytes = 1;
  uint32_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  uint16_t cls = 7;
  std::vector<uint8_t> image, mask;
  std::vector<float> box;

  Scene(uint32_t h_, uint32_t w_, uint32_t c_, uint32_t mask_bytes_, uint32_t x1_, uint32_t y1_,
        uint32_t x2_, uint32_t y2_, uint16_t cls_ = 7)
      : h(h_),
        w(w_),
        c(c_),
        mask_bytes(mask_bytes_),
        x1(x1_),
        y1(y1_),
        x2(x2_),
        y2(y2_),
        cls(cls_) {
    image.assign(size_t{h} * w * c, 0);
    mask.assign(size_t{h} * w * mask_bytes, 0);
    for (uint32_t y = y1; y < y2; ++y) {
      for (uint32_t x = x1; x < x2; ++x) {
        std::fill_n(image.begin() + (size_t{y} * w + x) * c, c, uint8_t{255});
        uint8_t* m = mask.data() + (size_t{y} * w + x) * mask_bytes;
        m[0] = static_cast<uint8_t>(cls & 0xFF);
        if (mask_bytes == 2) m[1] = static_cast<uint8_t>(cls >> 8);
      }
    }
    box = {float(x1), float(y1), float(x2), float(y2)};
  }
};

// Bounds on the image's channel 0 at an output pixel, derived from the resize arithmetic. Along
// one axis the mask reads the source pixel nearest the output pixel's footprint centre. Bilinear
// (less than 2x shrink) gives that pixel weight >= 1/2; the area mean over a footprint of at
// most the rectangle's thickness overlaps the rectangle (or its complement) by >= 1/2 of the
// footprint on the side of that pixel. So a labelled output pixel is >= 255/4 (both axes) and
// an unlabelled one <= 255/2 (the axis that left the rectangle), give or take the 11-bit
// weights' rounding: a one-output-pixel band at the edge may blend, nothing more.
constexpr int kLabelledMin = 60;
constexpr int kUnlabelledMax = 132;

// What check_joint saw, so a test can insist it covered the cases it means to.
struct JointSeen {
  int labelled = 0;  // outputs with labelled pixels
  int empty = 0;     // outputs without (the crop missed the rectangle)
};

// Disagreements between one transformed scene's image, mask and box (all 0 when they agree).
struct JointReport {
  int wrong_class = 0;        // labelled pixels holding another class
  int dark_labelled = 0;      // labelled pixels where the image is dark
  int bright_unlabelled = 0;  // unlabelled pixels where the image is bright
  int off_box = 0;            // pixels labelled outside the box or unlabelled inside it
  int loose_box = 0;          // box edges more than one pixel off the labelled region's
  int bad_box = 0;            // a box outside the output or empty, or more than one box
  int labelled = 0;           // labelled pixels
};

// The agreement of one transformed scene: `image` out_h x out_w x c, `mask` out_h x out_w of
// mask_bytes, and `boxes` (n rows, at most one: the scene's box if kept).
// - every labelled mask pixel holds the scene's class, and the image there is bright, every
//   unlabelled one dark (kLabelledMin / kUnlabelledMax);
// - a pixel is labelled exactly when its centre lies inside the box (both use the centre of the
//   pixel's footprint; 1e-3 px is left for the box's float rounding);
// - the box encloses the labelled region to within one pixel on each side.
inline JointReport joint_report(const Scene& s, uint32_t out_h, uint32_t out_w,
                                const uint8_t* image, const uint8_t* mask, const float* boxes,
                                size_t n) {
  JointReport r;
  if (n > 1) {
    ++r.bad_box;
    n = 1;
  }
  uint32_t lx1 = out_w, ly1 = out_h, lx2 = 0, ly2 = 0;  // labelled bounding box
  for (uint32_t y = 0; y < out_h; ++y) {
    for (uint32_t x = 0; x < out_w; ++x) {
      const size_t p = size_t{y} * out_w + x;
      const uint8_t* m = mask + p * s.mask_bytes;
      const uint16_t v = s.mask_bytes == 2 ? uint16_t(m[0] | (m[1] << 8)) : m[0];
      const bool on = v != 0;
      if (on && v != s.cls) ++r.wrong_class;
      const int px = image[p * s.c];
      if (on && px < kLabelledMin) ++r.dark_labelled;
      if (!on && px > kUnlabelledMax) ++r.bright_unlabelled;
      if (on) {
        ++r.labelled;
        lx1 = std::min(lx1, x);
        ly1 = std::min(ly1, y);
        lx2 = std::max(lx2, x + 1);
        ly2 = std::max(ly2, y + 1);
      }
      if (n == 1) {
        const double cx = x + 0.5, cy = y + 0.5, e = 1e-3;
        const bool inside =
            cx > boxes[0] + e && cx < boxes[2] - e && cy > boxes[1] + e && cy < boxes[3] - e;
        const bool outside =
            cx < boxes[0] - e || cx > boxes[2] + e || cy < boxes[1] - e || cy > boxes[3] + e;
        if ((inside && !on) || (outside && on)) ++r.off_box;
      } else if (on) {
        ++r.off_box;  // labelled pixels but no box
      }
    }
  }
  if (r.labelled > 0 && n == 1) {
    const float edges[4] = {float(lx1), float(ly1), float(lx2), float(ly2)};
    for (int k = 0; k < 4; ++k) r.loose_box += std::abs(boxes[k] - edges[k]) > 1.0f;
  }
  if (n == 1 && !(boxes[0] >= 0.0f && boxes[1] >= 0.0f && boxes[2] <= float(out_w) &&
                  boxes[3] <= float(out_h) && boxes[0] < boxes[2] && boxes[1] < boxes[3])) {
    ++r.bad_box;
  }
  return r;
}

// joint_report, every count CHECKed to be 0; counts the outputs with and without the rectangle.
inline void check_joint(const Scene& s, uint32_t out_h, uint32_t out_w, const uint8_t* image,
                        const uint8_t* mask, const float* boxes, size_t n, JointSeen* seen) {
  const JointReport r = joint_report(s, out_h, out_w, image, mask, boxes, n);
  CHECK(r.wrong_class == 0);
  CHECK(r.dark_labelled == 0);
  CHECK(r.bright_unlabelled == 0);
  CHECK(r.off_box == 0);
  CHECK(r.loose_box == 0);
  CHECK(r.bad_box == 0);
  if (r.labelled > 0) {
    ++seen->labelled;
  } else {
    ++seen->empty;
  }
}

}  // namespace dscache::test
