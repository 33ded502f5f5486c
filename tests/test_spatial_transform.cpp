// SpatialTransform: one sample's crop, resize and flip applied to its image, mask and boxes alike.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/transform.h"
#include "spatial_fixtures.h"
#include "test_util.h"

namespace {

using dscache::choose_crop;
using dscache::crop_resize;
using dscache::CropBox;
using dscache::CropMode;
using dscache::ErrorKind;
using dscache::ImageView;
using dscache::SpatialTransform;
using dscache::TransformOptions;
using dscache::test::JointSeen;
using dscache::test::nearest_reference;
using dscache::test::Scene;

CropBox crop(uint32_t y, uint32_t x, uint32_t h, uint32_t w, bool flip = false) {
  CropBox b;
  b.y = y;
  b.x = x;
  b.height = h;
  b.width = w;
  b.flip = flip;
  return b;
}

// One scene through one transform: image, mask and boxes outputs.
struct Applied {
  std::vector<uint8_t> image, mask;
  std::vector<float> boxes;
  std::vector<uint32_t> kept;
  size_t n = 0;
};

Applied apply(const SpatialTransform& t, const Scene& s, const CropBox* mask_box = nullptr) {
  Applied a;
  const uint32_t oh = t.out_height(), ow = t.out_width();
  a.image.assign(size_t{oh} * ow * s.c, 0xAB);
  a.mask.assign(size_t{oh} * ow * s.mask_bytes, 0xAB);
  a.boxes.assign(4, -1.0f);
  a.kept.assign(1, 99);
  t.image(ImageView{s.image.data(), s.h, s.w, s.c, 0}, a.image.data());
  const SpatialTransform m = mask_box ? SpatialTransform(*mask_box, s.h, s.w, oh, ow) : t;
  m.mask(s.mask.data(), s.mask_bytes, a.mask.data());
  a.n = t.boxes(s.box.data(), 1, 0.0, a.boxes.data(), a.kept.data());
  return a;
}

}  // namespace

TEST_SUITE("spatial_transform") {
  TEST_CASE("random crops and flips keep image, mask and boxes in agreement") {
    // An off-centre rectangle, so a flip or crop applied to one of the three alone shows. The
    // rectangle (>= 30 px) is thicker than any footprint (<= 96/7 < 14 px): see kLabelledMin.
    struct Case {
      uint32_t h, w, c, mask_bytes, x1, y1, x2, y2, out_h, out_w;
    };
    const Case cases[] = {
        {80, 96, 3, 1, 20, 15, 70, 55, 24, 20},  // shrinks up to 4x (area mean)
        {80, 96, 1, 2, 50, 10, 90, 60, 56, 40},  // enlarges (bilinear); uint16 mask
        {80, 96, 3, 1, 5, 40, 45, 78, 9, 7},     // small outputs, big footprints
        {45, 60, 3, 2, 30, 0, 60, 30, 45, 60},   // rectangle on two image edges
    };
    for (const Case& c : cases) {
      CAPTURE(c.out_h);
      CAPTURE(c.out_w);
      Scene s(c.h, c.w, c.c, c.mask_bytes, c.x1, c.y1, c.x2, c.y2, 300 % (c.mask_bytes * 256));
      TransformOptions o;
      o.crop = CropMode::kRandomResized;
      o.height = c.out_h;
      o.width = c.out_w;
      o.flip = true;
      JointSeen seen;
      int flipped = 0;
      for (uint64_t sample = 0; sample < 300; ++sample) {
        const CropBox b = choose_crop(o, s.h, s.w, 11, 2, sample);
        flipped += b.flip;
        const SpatialTransform t(b, s.h, s.w, c.out_h, c.out_w);
        const Applied a = apply(t, s);
        CAPTURE(sample);
        dscache::test::check_joint(s, c.out_h, c.out_w, a.image.data(), a.mask.data(),
                                   a.boxes.data(), a.n, &seen);
        if (a.n == 1) CHECK(a.kept[0] == 0);
      }
      CHECK(flipped > 100);
      CHECK(flipped < 200);
      CHECK(seen.labelled > 100);  // most crops hold part of the rectangle
    }
  }

  TEST_CASE("the joint check catches a mask transformed apart from its image") {
    // The check above must be able to fail: the same scene with the mask flipped (or cropped
    // elsewhere) while image and boxes are not disagrees in most draws.
    Scene s(80, 96, 3, 1, 20, 15, 70, 55);
    TransformOptions o;
    o.crop = CropMode::kRandomResized;
    o.height = 24;
    o.width = 20;
    int flip_caught = 0, shift_caught = 0, draws = 0;
    for (uint64_t sample = 0; sample < 100; ++sample) {
      const CropBox b = choose_crop(o, s.h, s.w, 5, 0, sample);
      const SpatialTransform t(b, s.h, s.w, o.height, o.width);
      CropBox flipped = b;
      flipped.flip = true;
      CropBox shifted = b;
      shifted.x = b.x >= 8 ? b.x - 8 : b.x + 8;
      if (shifted.x + shifted.width > s.w) continue;
      ++draws;
      const Applied f = apply(t, s, &flipped);
      const Applied m = apply(t, s, &shifted);
      const auto rf = dscache::test::joint_report(s, 24, 20, f.image.data(), f.mask.data(),
                                                  f.boxes.data(), f.n);
      const auto rm = dscache::test::joint_report(s, 24, 20, m.image.data(), m.mask.data(),
                                                  m.boxes.data(), m.n);
      flip_caught += rf.off_box + rf.dark_labelled + rf.bright_unlabelled > 0;
      shift_caught += rm.off_box + rm.dark_labelled + rm.bright_unlabelled > 0;
    }
    CHECK(draws > 50);
    CHECK(flip_caught > draws / 2);
    CHECK(shift_caught > draws / 2);
  }

  TEST_CASE("image() is crop_resize with the transform's box") {
    Scene s(30, 40, 3, 1, 3, 4, 20, 25);
    for (const CropBox& b :
         {crop(2, 5, 20, 30), crop(0, 0, 30, 40, true), crop(7, 1, 9, 33, true)}) {
      const SpatialTransform t(b, 30, 40, 12, 17);
      std::vector<uint8_t> got(12 * 17 * 3), want(12 * 17 * 3);
      t.image(ImageView{s.image.data(), 30, 40, 3, 0}, got.data());
      crop_resize(ImageView{s.image.data(), 30, 40, 3, 0}, b, 12, 17, want.data());
      CHECK(got == want);
    }
    const SpatialTransform t(crop(0, 0, 30, 40), 30, 40, 12, 17);
    std::vector<uint8_t> out(12 * 17 * 3);
    dscache::test::expect_error(
        [&] {
          t.image(ImageView{s.image.data(), 31, 40, 3, 0}, out.data());
        },
        ErrorKind::kInvalidArgument, "31x40");
  }

  TEST_CASE("mask(): nearest source pixel by the header's rule, uint8 and uint16") {
    // Every pixel a distinct uint16 value (> 255, so both bytes matter).
    const uint32_t h = 13, w = 17;
    std::vector<uint16_t> src(size_t{h} * w);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(1000 + 7 * i);
    std::vector<uint8_t> src16(src.size() * 2), src8(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      src16[2 * i] = static_cast<uint8_t>(src[i] & 0xFF);
      src16[2 * i + 1] = static_cast<uint8_t>(src[i] >> 8);
      src8[i] = static_cast<uint8_t>(src[i] & 0xFF);
    }
    struct Case {
      CropBox box;
      uint32_t oh, ow;
    };
    const Case cases[] = {
        {crop(0, 0, 13, 17), 13, 17}, {crop(0, 0, 13, 17, true), 13, 17},
        {crop(2, 3, 7, 11), 21, 30},  {crop(2, 3, 7, 11, true), 21, 30},
        {crop(1, 0, 12, 17), 5, 4},   {crop(1, 0, 12, 17, true), 5, 4},
        {crop(4, 9, 1, 1), 3, 3},     {crop(0, 16, 13, 1, true), 2, 5},
        {crop(3, 2, 9, 13), 9, 13},   {crop(3, 2, 9, 13, true), 9, 13},
    };
    for (const Case& c : cases) {
      CAPTURE(c.box.y);
      CAPTURE(c.box.x);
      CAPTURE(c.box.flip);
      const SpatialTransform t(c.box, h, w, c.oh, c.ow);
      const std::vector<uint16_t> want = nearest_reference(src, w, c.box, c.oh, c.ow);
      std::vector<uint8_t> got16(want.size() * 2, 0xEE), got8(want.size(), 0xEE);
      t.mask(src16.data(), 2, got16.data());
      t.mask(src8.data(), 1, got8.data());
      int wrong16 = 0, wrong8 = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        wrong16 += (got16[2 * i] | (got16[2 * i + 1] << 8)) != want[i];
        wrong8 += got8[i] != (want[i] & 0xFF);
      }
      CHECK(wrong16 == 0);
      CHECK(wrong8 == 0);
    }
    // A box of the output's size is the stored pixels; with flip, each row reversed exactly.
    const SpatialTransform copy(crop(3, 2, 9, 13), h, w, 9, 13);
    const SpatialTransform mirror(crop(3, 2, 9, 13, true), h, w, 9, 13);
    std::vector<uint8_t> a(9 * 13 * 2), b(9 * 13 * 2);
    copy.mask(src16.data(), 2, a.data());
    mirror.mask(src16.data(), 2, b.data());
    for (uint32_t y = 0; y < 9; ++y) {
      CHECK(std::memcmp(a.data() + y * 26, src16.data() + ((3 + y) * w + 2) * 2, 26) == 0);
      for (uint32_t x = 0; x < 13; ++x) {
        CHECK(std::memcmp(b.data() + (y * 13 + x) * 2, a.data() + (y * 13 + 12 - x) * 2, 2) == 0);
      }
    }
    dscache::test::expect_error([&] { copy.mask(src16.data(), 4, a.data()); },
                                ErrorKind::kInvalidArgument, "uint8 or uint16");
  }

  TEST_CASE("boxes(): mapped by the crop's scale, mirrored, clipped, filtered by visibility") {
    // Source 20x20; crop x 4..12, y 2..10, resized to 16x16: x' = (x - 4) * 2, y' = (y - 2) * 2.
    const float in[] = {
        5,   3, 7,  6,   // 0: inside: (2, 2, 6, 8); flipped (10, 2, 14, 8)
        10,  2, 14, 6,   // 1: half outside on the right: (12, 0, 20, 8) -> (12, 0, 16, 8), 1/2
        0,   0, 3,  20,  // 2: entirely left of the crop
        12,  2, 15, 6,   // 3: touches the right edge from outside: no area left
        0,   0, 20, 20,  // 4: the whole source: (-8, -4, 32, 36) clipped to the output: 0.16
        4,   2, 12, 10,  // 5: exactly the crop: (0, 0, 16, 16), visibility 1
        6,   6, 6,  9,   // 6: no width
        NAN, 3, 7,  6,   // 7: not finite
        3,   3, 5,  4,   // 8: 1/2 inside on the left: (-2, 2, 2, 4) -> (0, 2, 2, 4)
    };
    const size_t n = sizeof in / sizeof(float) / 4;
    struct Case {
      bool flip;
      double min_visibility;
      std::vector<uint32_t> kept;
      std::vector<float> boxes;
    };
    const Case cases[] = {
        {false, 0.0, {0, 1, 4, 5, 8}, {2,  2,  6, 8, 12, 0,  16, 8, 0, 0,
                                       16, 16, 0, 0, 16, 16, 0,  2, 2, 4}},
        {false, 0.5, {0, 1, 5, 8}, {2, 2, 6, 8, 12, 0, 16, 8, 0, 0, 16, 16, 0, 2, 2, 4}},
        {false, 0.51, {0, 5}, {2, 2, 6, 8, 0, 0, 16, 16}},
        {false, 1.0, {0, 5}, {2, 2, 6, 8, 0, 0, 16, 16}},
        {true, 0.0, {0, 1, 4, 5, 8}, {10, 2,  14, 8, 0,  0,  4,  8, 0,  0,
                                      16, 16, 0,  0, 16, 16, 14, 2, 16, 4}},
        {true, 0.15, {0, 1, 4, 5, 8}, {10, 2,  14, 8, 0,  0,  4,  8, 0,  0,
                                       16, 16, 0,  0, 16, 16, 14, 2, 16, 4}},
        {true, 0.17, {0, 1, 5, 8}, {10, 2, 14, 8, 0, 0, 4, 8, 0, 0, 16, 16, 14, 2, 16, 4}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.flip);
      CAPTURE(c.min_visibility);
      const SpatialTransform t(crop(2, 4, 8, 8, c.flip), 20, 20, 16, 16);
      std::vector<float> out(n * 4, -1.0f);
      std::vector<uint32_t> kept(n, 99);
      const size_t m = t.boxes(in, n, c.min_visibility, out.data(), kept.data());
      REQUIRE(m == c.kept.size());
      CHECK(std::vector<uint32_t>(kept.begin(), kept.begin() + m) == c.kept);
      CHECK(std::vector<float>(out.begin(), out.begin() + 4 * m) == c.boxes);
      CHECK(t.boxes(in, n, c.min_visibility, out.data(), nullptr) == m);  // kept is optional
    }
    // Non-square scales: x by 3/2, y by 1/4.
    const SpatialTransform t(crop(0, 2, 20, 4), 20, 20, 5, 6);
    const float b[] = {2, 4, 6, 8};
    float out[4];
    REQUIRE(t.boxes(b, 1, 0.0, out, nullptr) == 1);
    CHECK(std::vector<float>(out, out + 4) == std::vector<float>{0, 1, 6, 2});
    CHECK(t.boxes(b, 0, 0.0, out, nullptr) == 0);
    for (double bad : {-0.1, 1.5, double(NAN)}) {
      dscache::test::expect_error([&] { t.boxes(b, 1, bad, out, nullptr); },
                                  ErrorKind::kInvalidArgument, "min_visibility");
    }
  }

  TEST_CASE("degenerate crop boxes and outputs are refused") {
    struct Case {
      CropBox box;
      uint32_t src_h, src_w, out_h, out_w;
      const char* part;
    };
    const Case cases[] = {
        {crop(0, 0, 0, 5), 10, 10, 4, 4, "empty crop box"},
        {crop(0, 0, 5, 0), 10, 10, 4, 4, "empty crop box"},
        {crop(0, 0, 5, 5), 10, 10, 0, 4, "empty output"},
        {crop(0, 0, 5, 5), 10, 10, 4, 0, "empty output"},
        {crop(6, 0, 5, 5), 10, 10, 4, 4, "outside the 10x10 sample"},
        {crop(0, 6, 5, 5), 10, 10, 4, 4, "outside"},
        {crop(0, 0, 11, 10), 10, 10, 4, 4, "outside"},
        {crop(0, 4294967295u, 5, 2), 10, 10, 4, 4, "outside"},  // x + width wraps 32 bits
        {crop(0, 0, 1, 1), 0, 0, 4, 4, "outside"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.part);
      dscache::test::expect_error(
          [&] { SpatialTransform t(c.box, c.src_h, c.src_w, c.out_h, c.out_w); },
          ErrorKind::kInvalidArgument, c.part);
    }
    const SpatialTransform ok(crop(5, 5, 5, 5), 10, 10, 1, 1);
    CHECK(ok.out_height() == 1);
    CHECK(ok.box().x == 5);
  }
}
