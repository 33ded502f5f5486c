// SpatialTransform::mask on masks wide enough for its 16-column shuffles (uint8: each block of
// output columns whose source columns lie within 16 bytes is one shuffle): every pixel equals
// the header's nearest rule, for random-resized crops with flips, crops on the source's right
// edge (where a block would read past the row and is done per element) and shrinking crops.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "dscache/transform.h"
#include "spatial_fixtures.h"

using dscache::choose_crop;
using dscache::CropBox;
using dscache::CropMode;
using dscache::SpatialTransform;
using dscache::TransformOptions;
using dscache::test::nearest_reference;

namespace {

// Pixels of `t`'s mask of `src` (h x w) that differ from the rule.
int wrong(const std::vector<uint8_t>& src, uint32_t h, uint32_t w, const CropBox& b, uint32_t oh,
          uint32_t ow) {
  const SpatialTransform t(b, h, w, oh, ow);
  std::vector<uint8_t> got(size_t{oh} * ow, 0xEE);
  t.mask(src.data(), 1, got.data());
  const std::vector<uint8_t> want = nearest_reference(src, w, b, oh, ow);
  int n = 0;
  for (size_t i = 0; i < want.size(); ++i) n += got[i] != want[i];
  return n;
}

}  // namespace

TEST_SUITE("spatial_transform") {
  TEST_CASE("mask(): uint8 masks through 16-column shuffles equal the nearest rule") {
    const uint32_t h = 100, w = 140;
    std::vector<uint8_t> src(size_t{h} * w);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i * 7 + i / w) % 251);
    const uint32_t outs[][2] = {{128, 128}, {64, 96}, {37, 50}, {16, 16}, {100, 140}};
    for (const auto& o : outs) {
      CAPTURE(o[0]);
      CAPTURE(o[1]);
      TransformOptions t;
      t.crop = CropMode::kRandomResized;
      t.height = o[0];
      t.width = o[1];
      t.flip = true;
      for (uint64_t sample = 0; sample < 60; ++sample) {
        CAPTURE(sample);
        CHECK(wrong(src, h, w, choose_crop(t, h, w, 7, 1, sample), o[0], o[1]) == 0);
      }
      for (bool flip : {false, true}) {  // on the right edge, enlarging and shrinking
        CAPTURE(flip);
        CHECK(wrong(src, h, w, CropBox{10, w - 30, 40, 30, flip}, o[0], o[1]) == 0);
        CHECK(wrong(src, h, w, CropBox{0, w - 17, h, 17, flip}, o[0], o[1]) == 0);
        CHECK(wrong(src, h, w, CropBox{0, 0, h, w, flip}, o[0], o[1]) == 0);
        CHECK(wrong(src, h, w, CropBox{5, 3, 20, 9, flip}, o[0], o[1]) == 0);
      }
    }
  }
}
