// The JPEG crop decoder against decode + crop_resize: the DCT scale rule, exact with the fast
// path off, within docs/FORMAT.md's tolerance with it on, grey fast paths, real photographs.
#include <doctest/doctest.h>
#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codec/jpeg_internal.h"
#include "dscache/error.h"
#include "dscache/jpeg.h"
#include "dscache/transform.h"
#include "jpeg_fixtures.h"
#include "test_util.h"

// The library's names the tests use unqualified come with jpeg_fixtures.h.
using namespace dscache::test;

TEST_SUITE("jpeg") {
  TEST_CASE("the DCT scale rule") {
    using dscache::detail::jpeg_scale_num;
    struct Case {
      CropBox box;
      uint32_t oh, ow, m;
    };
    const Case cases[] = {
        {{0, 0, 256, 256, false}, 224, 224, 8},  // less than 2x: full scale
        {{0, 0, 256, 256, false}, 64, 64, 2},    // 256 * 2/8 = 64
        {{0, 0, 255, 256, false}, 64, 64, 3},    // 255 * 2/8 < 64
        {{0, 0, 128, 128, false}, 64, 64, 4},    // exactly 2x
        {{0, 0, 127, 400, false}, 64, 64, 8},    // one axis under 2x
        {{0, 0, 2000, 2000, false}, 64, 64, 1},  // 1/8 still holds 250 >= 64
        {{0, 0, 300, 900, false}, 100, 100, 3},  // the tighter axis decides
    };
    for (const Case& k : cases) {
      CAPTURE(k.box.height);
      CAPTURE(k.box.width);
      CHECK(jpeg_scale_num(k.box, k.oh, k.ow) == k.m);
    }
  }

  TEST_CASE("the scaled window: one pixel of context, at least min_cols columns") {
    using dscache::detail::jpeg_scaled_window;
    struct Case {
      uint32_t y0, y1, x0, x1, m, rows, cols, min_cols;
      uint32_t row0, row1, col0, col1;
    };
    const Case cases[] = {
        {10, 20, 40, 60, 8, 100, 200, 0, 9, 21, 39, 61},        // full scale: +-1
        {0, 100, 0, 200, 8, 100, 200, 32, 0, 100, 0, 200},      // the whole image stays whole
        {16, 32, 64, 80, 4, 50, 100, 0, 7, 17, 31, 41},         // 1/2: 8..16, 32..40, +-1
        {0, 100, 0, 1, 8, 100, 200, 32, 0, 100, 0, 32},         // left column: widened right
        {0, 100, 199, 200, 8, 100, 200, 32, 0, 100, 168, 200},  // right column: widened left
        {0, 1, 50, 51, 8, 100, 200, 32, 0, 2, 49, 81},          // a pixel: widened right
        {0, 1, 10, 11, 8, 100, 20, 32, 0, 2, 0, 20},            // narrower image: all of it
    };
    for (const Case& k : cases) {
      CAPTURE(k.x0);
      CAPTURE(k.min_cols);
      const auto w = jpeg_scaled_window(k.y0, k.y1, k.x0, k.x1, k.m, k.rows, k.cols, k.min_cols);
      CHECK(w.row0 == k.row0);
      CHECK(w.row1 == k.row1);
      CHECK(w.col0 == k.col0);
      CHECK(w.col1 == k.col1);
    }
  }

  TEST_CASE("jpeg_decode_crop with {scale=false, crop=false} is decode + crop_resize, exactly") {
    JpegScratch scratch;
    for (uint32_t c : {3u, 1u}) {
      const Image img = synthetic(256, 341, c, 11);
      const std::vector<uint8_t> bytes = encode(img, 90);
      const Image full = decode(bytes, 256, 341, c, &scratch);
      int n = 0;
      for (const Recipe& r : kRecipes) {
        const TransformOptions o = recipe_options(r);
        for (uint64_t s = 0; s < 25; ++s, ++n) {
          const CropBox box = dscache::choose_crop(o, 256, 341, 5, 0, s);
          CHECK(crop_decode(bytes, full, box, r.size, r.size, &scratch, {false, false}) ==
                reference_crop(full, box, r.size, r.size));
          CHECK_FALSE(dscache::detail::last_decode_stats(scratch).fast);
        }
      }
      CHECK(n == 100);
    }
  }

  TEST_CASE("jpeg_decode_crop with crop only (no scaling) is exact too") {
    // Skipped rows and cropped columns decode to the same pixels (the region keeps one pixel of
    // context around the box), and the taps are crop_resize's: the same bytes.
    JpegScratch scratch;
    const Image img = synthetic(256, 341, 3, 12);
    const std::vector<uint8_t> bytes = encode(img, 90);
    const Image full = decode(bytes, 256, 341, 3, &scratch);
    size_t cropped = 0;
    for (const Recipe& r : kRecipes) {
      const TransformOptions o = recipe_options(r);
      for (uint64_t s = 0; s < 25; ++s) {
        const CropBox box = dscache::choose_crop(o, 256, 341, 6, 0, s);
        CHECK(crop_decode(bytes, full, box, r.size, r.size, &scratch, {false, true}) ==
              reference_crop(full, box, r.size, r.size));
        const auto st = dscache::detail::last_decode_stats(scratch);
        CHECK(st.fast);
        CHECK(st.scale_num == 8);
        if (st.rows < st.image_rows && st.cols < st.image_cols) ++cropped;
      }
    }
    CHECK(cropped > 40);
  }

  TEST_CASE("jpeg_decode_crop (defaults) is within the documented tolerance") {
    JpegScratch scratch;
    // Synthetic pictures of four shapes always, and four real photographs (mate-backgrounds,
    // which setup-deps installs). The counts below hold on the synthetic set alone, so a
    // machine without the photographs still checks every assertion (the photograph test below
    // fails there instead).
    std::vector<Image> images;
    images.push_back(synthetic(256, 341, 3, 21));
    images.push_back(synthetic(300, 240, 3, 22));
    images.push_back(synthetic(256, 256, 3, 23));
    images.push_back(synthetic(180, 420, 3, 24));
    const std::vector<std::string> photos = photo_paths();
    if (photos.empty()) {
      MESSAGE("mate-backgrounds is not installed: tolerance checked on synthetic images only");
    }
    for (size_t i = 0; i < photos.size() && i < 4; ++i) {
      images.push_back(load_photo(photos[i * photos.size() / 4], 256, &scratch));
    }
    DiffStats scaled_diff;
    double worst_box = 0;
    uint64_t scaled = 0, exact = 0, cropped = 0, boxes = 0;
    for (size_t k = 0; k < images.size(); ++k) {
      const Image& img = images[k];
      const std::vector<uint8_t> bytes = encode(img, 90);
      const Image full = decode(bytes, img.h, img.w, 3, &scratch);
      for (const Recipe& r : kRecipes) {
        const TransformOptions o = recipe_options(r);
        const uint64_t per = r.mode == CropMode::kCenter ? 4 : 60;
        for (uint64_t s = 0; s < per; ++s, ++boxes) {
          const CropBox box = dscache::choose_crop(o, img.h, img.w, 9, k, s);
          const std::vector<uint8_t> fast = crop_decode(bytes, full, box, r.size, r.size, &scratch);
          const std::vector<uint8_t> ref = reference_crop(full, box, r.size, r.size);
          const auto st = dscache::detail::last_decode_stats(scratch);
          CHECK(st.fast);
          cropped += st.rows < st.image_rows || st.cols < st.image_cols;
          if (st.scale_num == 8) {  // crop only: exact
            exact += fast == ref;
            continue;
          }
          ++scaled;
          DiffStats one;
          one.add(fast, ref);
          worst_box = std::max(worst_box, one.mean());
          scaled_diff.add(fast, ref);
        }
      }
    }
    MESSAGE("crop decode vs decode + crop_resize: "
            << boxes << " boxes on " << images.size() << " images; " << exact
            << " at full scale, all exact; " << scaled << " DCT-scaled: mean |diff| "
            << scaled_diff.mean() << ", p99.9 " << scaled_diff.quantile(0.999) << ", max "
            << scaled_diff.max() << ", worst box mean " << worst_box << "; cropped " << cropped);
    CHECK(boxes >= 200);
    CHECK(exact + scaled == boxes);
    CHECK(scaled > boxes / 5);  // RandomResizedCrop/center crop to 64 mostly scale
    CHECK(cropped > boxes / 2);
    CHECK(scaled_diff.mean() <= kMaxMeanAbsDiff);
    CHECK(scaled_diff.quantile(0.999) <= kMaxP999AbsDiff);
    CHECK(worst_box <= kMaxBoxMeanAbsDiff);
  }

  TEST_CASE("jpeg_decode_crop: grey output and grey streams take the fast path too") {
    JpegScratch scratch;
    const Image grey = synthetic(256, 300, 1, 31);
    const std::vector<uint8_t> mono = encode(grey, 90);
    const Image rgb = synthetic(256, 300, 3, 32);
    const std::vector<uint8_t> colour = encode(rgb, 90);
    struct Case {
      const std::vector<uint8_t>* bytes;
      uint32_t c;
    };
    for (const Case& k : {Case{&mono, 1}, Case{&mono, 3}, Case{&colour, 1}}) {
      CAPTURE(k.c);
      const Image full = decode(*k.bytes, 256, 300, k.c, &scratch);
      DiffStats d;
      for (uint64_t s = 0; s < 30; ++s) {
        const CropBox box = dscache::choose_crop(recipe_options(kRecipes[1]), 256, 300, 3, 0, s);
        d.add(crop_decode(*k.bytes, full, box, 64, 64, &scratch),
              reference_crop(full, box, 64, 64));
        CHECK(dscache::detail::last_decode_stats(scratch).fast);
      }
      MESSAGE("channels " << k.c << ": mean |diff| " << d.mean() << ", p99.9 "
                          << d.quantile(0.999));
      CHECK(d.mean() <= kMaxMeanAbsDiff);
      CHECK(d.quantile(0.999) <= kMaxP999AbsDiff);
    }
  }

  TEST_CASE("real photographs decode like the synthetic image") {
    const std::vector<std::string> photos = photo_paths();
    // setup-deps installs mate-backgrounds: its absence is a broken setup, not a pass.
    INFO("no photographs in /usr/share/backgrounds/mate/nature: run scripts/setup-deps");
    REQUIRE_FALSE(photos.empty());
    JpegScratch scratch;
    for (size_t i = 0; i < 2 && i < photos.size(); ++i) {
      CAPTURE(photos[i]);
      const std::string s = dscache::test::read_all(photos[i]);
      const auto* data = reinterpret_cast<const uint8_t*>(s.data());
      const dscache::JpegInfo info = dscache::jpeg_info(data, s.size());
      CHECK(info.channels == 3);
      CHECK(info.width >= 1280);
      Image full(info.height, info.width, 3);
      dscache::jpeg_decode(data, s.size(), info.height, info.width, 3, full.px.data(), &scratch);
      // The whole frame at 1/8 of its size through the crop decoder vs the full decode reduced.
      const CropBox box{0, 0, info.height, info.width, false};
      const uint32_t oh = info.height / 8, ow = info.width / 8;
      std::vector<uint8_t> small(size_t{oh} * ow * 3);
      dscache::jpeg_decode_crop(data, s.size(), info.height, info.width, 3, box, oh, ow,
                                small.data(), &scratch);
      CHECK(dscache::detail::last_decode_stats(scratch).scale_num == 1);
      DiffStats d;
      d.add(small, reference_crop(full, box, oh, ow));
      CHECK(d.mean() <= kMaxMeanAbsDiff);
      // Re-encoded at Q90 it round-trips with a high PSNR.
      const Image reduced = load_photo(photos[i], 256, &scratch);
      const std::vector<uint8_t> bytes = encode(reduced, 90);
      CHECK(psnr(reduced, decode(bytes, reduced.h, reduced.w, 3, &scratch)) > 30.0);
    }
  }

}  // TEST_SUITE
