// The crop decoder's skipped rows and cropped columns change no pixel: at every DCT scale, on
// every stream layout (4:2:0, 4:2:2, 4:4:0, 4:4:4, grey; baseline and progressive), for boxes
// on edges and corners, 1-px boxes and the whole frame, jpeg_decode_crop equals the decode of
// the whole image at the same scale followed by the same resampling, byte for byte.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "codec/jpeg_internal.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/transform.h"
#include "jpeg_fixtures.h"
#include "test_util.h"

using namespace dscache::test;
using dscache::detail::JpegLayout;

namespace {

// Rows [y, y+h) and columns [x, x+w) of `img`: photographs at odd sizes.
Image cut(const Image& img, uint32_t y, uint32_t x, uint32_t h, uint32_t w) {
  Image out(h, w, img.c);
  const size_t row = size_t{w} * img.c;
  for (uint32_t r = 0; r < h; ++r) {
    std::copy_n(img.px.data() + (size_t{y + r} * img.w + x) * img.c, row,
                out.px.data() + size_t{r} * row);
  }
  return out;
}

Image grey_of(const Image& rgb) {
  Image g(rgb.h, rgb.w, 1);
  for (size_t i = 0; i < g.px.size(); ++i) {
    const uint8_t* p = rgb.px.data() + 3 * i;
    g.px[i] = static_cast<uint8_t>((77 * p[0] + 150 * p[1] + 29 * p[2] + 128) >> 8);
  }
  return g;
}

struct LayoutCase {
  const char* name;
  bool grey;
  JpegLayout layout;  // quality, luma_h, luma_v, progressive
};

// Baseline layouts get jpeg_encode's restart segments (restart -1), so their crops decode from a
// cut of the segments; the explicit intervals cover one MCU per segment, one segment per MCU
// row, an interval that does not divide a row (no cut: the usual path) and none.
const LayoutCase kLayouts[] = {
    {"4:2:0", false, {90, 2, 2, false}},
    {"4:2:0 progressive", false, {90, 2, 2, true}},
    {"4:2:2", false, {90, 2, 1, false}},
    {"4:4:0", false, {85, 1, 2, false}},
    {"4:4:4", false, {90, 1, 1, false}},
    {"4:4:4 progressive", false, {75, 1, 1, true}},
    {"grey", true, {90, 1, 1, false}},
    {"grey progressive", true, {90, 1, 1, true}},
    {"4:2:0 restart every MCU", false, {90, 2, 2, false, 1}},
    {"4:2:2 restart 40 (no cut)", false, {90, 2, 1, false, 40}},  // rows of 20 or 11 MCUs
    {"4:4:4 restart 7 (no cut)", false, {90, 1, 1, false, 7}},
    {"grey restart every MCU", true, {90, 1, 1, false, 1}},
    {"4:2:0 no restart", false, {90, 2, 2, false, 0}},
};

// Boxes on the edges, in the corners, 1 px, iMCU-aligned and one off, and the whole frame.
std::vector<CropBox> boxes_for(uint32_t h, uint32_t w) {
  std::vector<CropBox> b = {
      {0, 0, h, w, false},                    // the whole frame
      {0, 0, 1, 1, false},                    // top-left pixel
      {h - 1, w - 1, 1, 1, false},            // bottom-right pixel
      {0, w - 1, 1, 1, true},                 // top-right pixel, mirrored
      {h / 2, w / 2, 1, 1, false},            // a middle pixel
      {0, 0, 1, w, false},                    // top row
      {h - 1, 0, 1, w, false},                // bottom row
      {0, 0, h, 1, false},                    // left column
      {0, w - 1, h, 1, false},                // right column
      {16, 32, 64, 80, false},                // iMCU-aligned
      {15, 31, 66, 82, false},                // one before
      {17, 33, 62, 78, true},                 // one after, mirrored
      {h - 70, w - 90, 70, 90, false},        // the bottom-right corner
      {0, w / 3, h, w / 3, false},            // a full-height band
      {h / 3, 0, h / 3, w, false},            // a full-width band
      {7, 9, h - 7 - 11, w - 9 - 13, false},  // nearly all, odd margins
  };
  TransformOptions rrc;
  rrc.crop = CropMode::kRandomResized;
  rrc.height = rrc.width = 64;
  for (uint64_t s = 0; s < 8; ++s) b.push_back(dscache::choose_crop(rrc, h, w, 4, 0, s));
  return b;
}

std::vector<uint8_t> run_crop(const std::vector<uint8_t>& bytes, uint32_t h, uint32_t w, uint32_t c,
                              const CropBox& box, uint32_t oh, uint32_t ow, JpegDecodeOptions o,
                              JpegScratch* scratch) {
  std::vector<uint8_t> out(size_t{oh} * ow * c);
  dscache::jpeg_decode_crop(bytes.data(), bytes.size(), h, w, c, box, oh, ow, out.data(), scratch,
                            o);
  return out;
}

std::string error_of(const std::vector<uint8_t>& bytes, uint32_t h, uint32_t w, bool crop) {
  JpegScratch scratch;
  std::vector<uint8_t> out(size_t{h} * w * 3);
  try {
    if (crop) {
      const CropBox box{h / 2, w / 2, h / 4, w / 4, false};
      dscache::jpeg_decode_crop(bytes.data(), bytes.size(), h, w, 3, box, 8, 8, out.data(),
                                &scratch);
    } else {
      dscache::jpeg_decode(bytes.data(), bytes.size(), h, w, 3, out.data(), &scratch);
    }
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCorruption);
    return e.what();
  }
  return "decoded";
}

}  // namespace

TEST_SUITE("jpeg") {
  TEST_CASE("cropped decode is byte-identical to the whole image at the same scale") {
    const std::vector<std::string> photos = photo_paths();
    INFO("no photographs in /usr/share/backgrounds/mate/nature: run scripts/setup-deps");
    REQUIRE(photos.size() >= 2);
    JpegScratch scratch;
    // Two photographs cut to odd sizes, landscape and portrait.
    const Image a = load_photo(photos[0], 240, &scratch);
    const Image b = load_photo(photos[photos.size() / 2], 240, &scratch);
    REQUIRE(a.h >= 206);  // room for the cuts below
    REQUIRE(a.w >= 312);
    REQUIRE(b.h >= 238);
    REQUIRE(b.w >= 173);
    const Image sources[] = {cut(a, 3, 5, 203, 307), cut(b, 1, 2, 237, 171)};
    std::set<uint32_t> scales_cropped;
    uint64_t compared = 0, cropped = 0, cut = 0;
    for (const LayoutCase& L : kLayouts) {
      for (const Image& rgb : sources) {
        const Image src = L.grey ? grey_of(rgb) : rgb;
        std::vector<uint8_t> bytes;
        dscache::detail::jpeg_encode_layout(src.px.data(), src.h, src.w, src.c, L.layout, &bytes);
        const Image full = decode(bytes, src.h, src.w, 3, &scratch);
        for (const CropBox& box : boxes_for(src.h, src.w)) {
          for (uint32_t k : {8u, 4u, 3u, 2u, 1u}) {  // out = box * k/8: scale k/8 or finer
            const uint32_t oh = std::max<uint32_t>(1, box.height * k / 8);
            const uint32_t ow = std::max<uint32_t>(1, box.width * k / 8);
            for (uint32_t c : {3u, 1u}) {
              const std::string layout = L.name;
              CAPTURE(layout);
              CAPTURE(src.h);
              CAPTURE(box.y);
              CAPTURE(box.x);
              CAPTURE(box.height);
              CAPTURE(box.width);
              CAPTURE(oh);
              CAPTURE(ow);
              CAPTURE(c);
              const std::vector<uint8_t> ref =
                  run_crop(bytes, src.h, src.w, c, box, oh, ow, {true, false}, &scratch);
              const auto whole = dscache::detail::last_decode_stats(scratch);
              const std::vector<uint8_t> got =
                  run_crop(bytes, src.h, src.w, c, box, oh, ow, {true, true}, &scratch);
              const auto st = dscache::detail::last_decode_stats(scratch);
              CHECK(got == ref);
              ++compared;
              cut += st.segments;
              if (st.segments) CHECK(st.stream_bytes < bytes.size());
              const bool can_cut = !L.layout.progressive && L.layout.restart != 0 &&
                                   L.layout.restart != 7 && L.layout.restart != 40;
              if (!can_cut) CHECK_FALSE(st.segments);
              CHECK(st.fast);
              CHECK(whole.fast == (st.scale_num < 8));  // m = 8 and no crop: jpeg_decode
              CHECK(st.scale_num == whole.scale_num);
              CHECK(whole.rows == whole.image_rows);
              if (st.rows < st.image_rows || st.cols < st.image_cols) {
                ++cropped;
                scales_cropped.insert(st.scale_num);
              }
              if (st.scale_num == 8 && c == 3) {  // at full scale: the reference itself
                CHECK(got == reference_crop(full, box, oh, ow));
              }
            }
          }
        }
      }
    }
    MESSAGE(compared << " crop decodes equal to whole-image decodes at their scale; " << cropped
                     << " decoded a part of the image");
    MESSAGE(cut << " decoded from a cut of the restart segments");
    constexpr size_t kLayoutCount = sizeof(kLayouts) / sizeof(kLayouts[0]);
    CHECK(compared == kLayoutCount * 2 * 24 * 5 * 2);
    CHECK(cut > compared / 4);
    CHECK(cropped > compared / 2);
    CHECK(scales_cropped == std::set<uint32_t>{1, 2, 3, 4, 8});
  }

  TEST_CASE("jpeg_encode's restart interval: whole segments per MCU row, 32..64 px wide") {
    using dscache::detail::jpeg_restart_interval;
    struct Case {
      uint32_t h, w, mcu_h, mcu_w, want;
    };
    const Case cases[] = {
        {127, 128, 16, 16, 0},   // below 128x128 pixels: none
        {128, 128, 16, 16, 4},   // 8 MCUs per row: 4 (64 px)
        {375, 500, 16, 16, 4},   // 32 MCUs
        {400, 600, 16, 16, 2},   // 38 MCUs: 2 (32 px); 19 is prime
        {400, 584, 16, 16, 37},  // 37 MCUs (prime): one segment per MCU row
        {300, 307, 8, 8, 39},    // grey, 39 MCUs: 3 (24 px) is under 32 -> the row
        {300, 320, 8, 8, 8},     // grey, 40 MCUs: 8 (64 px)
        {1000, 40, 16, 16, 3},   // a narrow image: its whole row
        {300, 300, 16, 8, 38},   // 4:4:0 (8 px wide MCUs), 38 MCUs: 2 (16 px) -> the row
    };
    for (const Case& c : cases) {
      CAPTURE(c.h);
      CAPTURE(c.w);
      CAPTURE(c.mcu_w);
      const uint32_t got = jpeg_restart_interval(c.h, c.w, c.mcu_h, c.mcu_w);
      CHECK(got == c.want);
      if (got == 0) continue;
      const uint32_t per_row = (c.w + c.mcu_w - 1) / c.mcu_w;
      CHECK(per_row % got == 0);
      CHECK((got == per_row || (got * c.mcu_w >= 32 && got * c.mcu_w <= 64)));
    }
  }

  TEST_CASE("a stream whose restart markers are not as its header says takes the usual path") {
    const Image img = synthetic(160, 192, 3, 7);
    std::vector<uint8_t> bytes;
    dscache::jpeg_encode(img.px.data(), img.h, img.w, 3, 90, &bytes);
    dscache::detail::JpegSegments seg;
    REQUIRE(dscache::detail::jpeg_index_segments(bytes.data(), bytes.size(), &seg));
    CHECK(seg.interval == 4);
    CHECK(seg.per_row == 3);
    CHECK(seg.mcu_rows == 10);
    CHECK(seg.start.size() == 31);
    // Every RSTn renumbered, removed or duplicated: the index refuses, the decoder falls back
    // (and libjpeg reports the damage).
    std::vector<size_t> marks;
    for (size_t k = 1; k + 1 < seg.start.size(); ++k) marks.push_back(seg.start[k] - 1);
    std::vector<uint8_t> renumbered = bytes;
    renumbered[marks[5]] = static_cast<uint8_t>(0xD0 + (5 + 3) % 8);
    std::vector<uint8_t> dropped = bytes;
    dropped.erase(dropped.begin() + marks[7] - 1, dropped.begin() + marks[7] + 1);
    for (const std::vector<uint8_t>* bad : {&renumbered, &dropped}) {
      CHECK_FALSE(dscache::detail::jpeg_index_segments(bad->data(), bad->size(), &seg));
      JpegScratch scratch;
      std::vector<uint8_t> out(32 * 32 * 3);
      const CropBox box{100, 120, 40, 50, false};
      CHECK_THROWS_AS(dscache::jpeg_decode_crop(bad->data(), bad->size(), img.h, img.w, 3, box, 32,
                                                32, out.data(), &scratch),
                      Error);
    }
  }

  TEST_CASE("a truncated stream gives the same error to the crop decoder as to a full decode") {
    const Image img = synthetic(203, 307, 3, 41);
    for (const LayoutCase& L : kLayouts) {
      if (L.grey) continue;
      const std::string layout = L.name;
      CAPTURE(layout);
      std::vector<uint8_t> bytes;
      dscache::detail::jpeg_encode_layout(img.px.data(), img.h, img.w, 3, L.layout, &bytes);
      for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{300}}) {
        CAPTURE(keep);
        const std::vector<uint8_t> cut_bytes(bytes.begin(), bytes.begin() + keep);
        const std::string full = error_of(cut_bytes, img.h, img.w, false);
        CHECK(full.find("does not end with an EOI marker") != std::string::npos);
        CHECK(error_of(cut_bytes, img.h, img.w, true) == full);
      }
    }
  }

}  // TEST_SUITE
