// JPEG codec: encode/decode round trips, quality, grey<->RGB, bad arguments and streams, what
// ends a stream, and a mutation fuzz of real encoded streams. The crop decoder is in
// test_jpeg_crop.cpp.
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

namespace {

// Damages `b` with 1 to 3 random mutations: bit flips, byte sets, inserted/deleted bytes, bogus
// markers, header bytes, truncation.
void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  static const uint8_t markers[] = {0xD8, 0xD9, 0xDA, 0xDB, 0xC0, 0xC2, 0xC4, 0xDD,
                                    0xD0, 0xE1, 0xFE, 0xC9, 0xCF, 0x00, 0xFF};
  const int mutations = 1 + static_cast<int>(rng() % 3);
  for (int m = 0; m < mutations; ++m) {
    const size_t pos = b.empty() ? 0 : rng() % b.size();
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!b.empty()) b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // set a byte
        if (!b.empty()) b[pos] = static_cast<uint8_t>(rng());
        break;
      case 2:  // insert a byte
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<uint8_t>(rng()));
        break;
      case 3:  // delete a byte
        if (!b.empty()) b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos));
        break;
      case 4:  // a bogus marker
        if (b.size() > 1) {
          const size_t p = std::min(pos, b.size() - 2);
          b[p] = 0xFF;
          b[p + 1] = markers[rng() % sizeof markers];
        }
        break;
      case 5:  // a header byte (the first 700 hold the tables and SOF)
        if (!b.empty()) b[rng() % std::min<size_t>(b.size(), 700)] = static_cast<uint8_t>(rng());
        break;
      case 6:  // truncate, keeping EOI so the damage reaches libjpeg
        if (b.size() > 2) {
          b.resize(pos);
          b.push_back(0xFF);
          b.push_back(0xD9);
        }
        break;
    }
  }
}

}  // namespace

TEST_SUITE("jpeg") {
  TEST_CASE("this build has JPEG support") { CHECK(dscache::jpeg_supported()); }

  TEST_CASE("encode -> decode round trip: sizes, quality, channels, determinism") {
    JpegScratch scratch;
    struct Case {
      uint32_t h, w, c;
      int quality;
      double min_psnr;
    };
    // Odd sizes exercise partial MCUs; 1x1 is the smallest stream there is.
    const Case cases[] = {
        {96, 128, 3, 90, 28.0}, {96, 128, 1, 90, 34.0}, {17, 33, 3, 90, 25.0},
        {17, 33, 1, 90, 30.0},  {1, 1, 3, 90, 30.0},    {1, 1, 1, 90, 40.0},
        {5, 300, 3, 75, 20.0},  {257, 3, 1, 100, 40.0},
    };
    for (const Case& k : cases) {
      CAPTURE(k.h);
      CAPTURE(k.w);
      CAPTURE(k.c);
      const Image img = synthetic(k.h, k.w, k.c);
      const std::vector<uint8_t> bytes = encode(img, k.quality);
      CHECK(bytes == encode(img, k.quality));  // same bytes every time
      REQUIRE(bytes.size() > 4);
      CHECK(bytes[0] == 0xFF);
      CHECK(bytes[1] == 0xD8);
      const dscache::JpegInfo info = dscache::jpeg_info(bytes.data(), bytes.size());
      CHECK(info.height == k.h);
      CHECK(info.width == k.w);
      CHECK(info.channels == k.c);
      const Image back = decode(bytes, k.h, k.w, k.c, &scratch);
      CHECK(psnr(img, back) > k.min_psnr);
      CHECK(back.px == decode(bytes, k.h, k.w, k.c, &scratch).px);  // the scratch is reusable
    }
  }

  TEST_CASE("quality: higher quality, closer image and more bytes") {
    JpegScratch scratch;
    for (uint32_t c : {1u, 3u}) {
      const Image img = synthetic(160, 200, c, 7);
      double last_psnr = 0;
      size_t last_size = 0;
      for (int q : {10, 50, 75, 90, 95}) {
        CAPTURE(q);
        const std::vector<uint8_t> bytes = encode(img, q);
        const double p = psnr(img, decode(bytes, img.h, img.w, c, &scratch));
        CHECK(p > last_psnr);
        CHECK(bytes.size() > last_size);
        last_psnr = p;
        last_size = bytes.size();
      }
      CHECK(last_psnr > 30.0);  // Q95
    }
  }

  TEST_CASE("grey <-> RGB: a stream decodes to either channel count") {
    JpegScratch scratch;
    const Image rgb = synthetic(40, 56, 3, 3);
    const std::vector<uint8_t> colour = encode(rgb, 92);
    const Image as_rgb = decode(colour, 40, 56, 3, &scratch);
    const Image as_grey = decode(colour, 40, 56, 1, &scratch);
    // Grey from a YCbCr stream is its Y plane: the BT.601 luma of the decoded RGB, within
    // chroma upsampling and rounding.
    double err = 0;
    for (size_t i = 0; i < as_grey.px.size(); ++i) {
      const uint8_t* p = &as_rgb.px[i * 3];
      const double y = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
      err += std::abs(y - as_grey.px[i]);
    }
    CHECK(err / as_grey.px.size() < 2.0);

    const Image grey = synthetic(40, 56, 1, 4);
    const std::vector<uint8_t> mono = encode(grey, 92);
    CHECK(dscache::jpeg_info(mono.data(), mono.size()).channels == 1);
    const Image g1 = decode(mono, 40, 56, 1, &scratch);
    const Image g3 = decode(mono, 40, 56, 3, &scratch);
    bool replicated = true;
    for (size_t i = 0; i < g1.px.size(); ++i) {
      for (int ch = 0; ch < 3; ++ch) replicated &= g3.px[i * 3 + ch] == g1.px[i];
    }
    CHECK(replicated);
  }

  TEST_CASE("bad arguments and bad streams are errors of the right kind") {
    JpegScratch scratch;
    const Image img = synthetic(32, 48, 3);
    const std::vector<uint8_t> bytes = encode(img, 90);
    std::vector<uint8_t> out(32 * 48 * 3);
    std::vector<uint8_t> sink;
    for (int q : {0, -5, 101}) {
      CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 32, 48, 3, q, &sink),
                           doctest::Contains("InvalidArgument"), Error);
    }
    CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 32, 48, 2, 90, &sink),
                         doctest::Contains("channels"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 0, 48, 3, 90, &sink),
                         doctest::Contains("InvalidArgument"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_encode(img.px.data(), 70000, 48, 3, 90, &sink),
                         doctest::Contains("InvalidArgument"), Error);
    // A size mismatch names both sizes.
    CHECK_THROWS_WITH_AS(
        dscache::jpeg_decode(bytes.data(), bytes.size(), 48, 32, 3, out.data(), &scratch),
        doctest::Contains("Corruption: jpeg: stream is 32x48, expected 48x32"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_decode(bytes.data(), 0, 32, 48, 3, out.data(), &scratch),
                         doctest::Contains("Corruption: jpeg: empty stream"), Error);
    CHECK_THROWS_WITH_AS(dscache::jpeg_info(bytes.data(), 0), doctest::Contains("empty"), Error);
    const uint8_t junk[] = {'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g', 0xFF, 0xD9};
    CHECK_THROWS_WITH_AS(dscache::jpeg_info(junk, sizeof junk),
                         doctest::Contains("Corruption: jpeg: Not a JPEG file"), Error);
    // Truncated: one byte short of EOI, and half the stream.
    CHECK_THROWS_WITH_AS(
        dscache::jpeg_decode(bytes.data(), bytes.size() - 1, 32, 48, 3, out.data(), &scratch),
        doctest::Contains("Corruption"), Error);
    std::vector<uint8_t> half(bytes.begin(), bytes.begin() + bytes.size() / 2);
    half.push_back(0xFF);
    half.push_back(0xD9);  // a fake EOI does not hide the missing data
    CHECK_THROWS_WITH_AS(
        dscache::jpeg_decode(half.data(), half.size(), 32, 48, 3, out.data(), &scratch),
        doctest::Contains("Corruption: jpeg: "), Error);
    // Crop arguments: a box outside the image, an empty output.
    const CropBox outside{20, 0, 20, 10, false};
    CHECK_THROWS_WITH_AS(dscache::jpeg_decode_crop(bytes.data(), bytes.size(), 32, 48, 3, outside,
                                                   8, 8, out.data(), &scratch),
                         doctest::Contains("outside"), Error);
    const CropBox whole{0, 0, 32, 48, false};
    CHECK_THROWS_AS(dscache::jpeg_decode_crop(bytes.data(), bytes.size(), 32, 48, 3, whole, 0, 8,
                                              out.data(), &scratch),
                    Error);
    // After all those failures the scratch still decodes.
    CHECK_NOTHROW(
        dscache::jpeg_decode(bytes.data(), bytes.size(), 32, 48, 3, out.data(), &scratch));
    CHECK(psnr(img, Image(decode(bytes, 32, 48, 3, &scratch))) > 26.0);
  }

  TEST_CASE("bytes after the first EOI are Corruption; FF D9 inside an APP segment is not an EOI") {
    JpegScratch scratch;
    const Image img = synthetic(32, 48, 3);
    const std::vector<uint8_t> bytes = encode(img, 90);
    const std::vector<uint8_t> second = encode(synthetic(16, 16, 3, 7), 50);
    std::vector<uint8_t> out(32 * 48 * 3);
    const CropBox box{0, 0, 16, 16, false};
    std::vector<std::vector<uint8_t>> bad;
    bad.push_back(bytes);
    bad.back().insert(bad.back().end(), second.begin(), second.end());  // a second image
    bad.push_back(bytes);
    bad.back().insert(bad.back().end(), {0x00, 0x12, 0xFF, 0xD9});  // junk ending in EOI
    for (const std::vector<uint8_t>& b : bad) {
      CAPTURE(b.size());
      for (int entry = 0; entry < 3; ++entry) {
        CAPTURE(entry);
        try {
          if (entry == 0) dscache::jpeg_decode(b.data(), b.size(), 32, 48, 3, out.data(), &scratch);
          if (entry == 1) {
            dscache::jpeg_decode_crop(b.data(), b.size(), 32, 48, 3, box, 8, 8, out.data(),
                                      &scratch, JpegDecodeOptions{});
          }
          if (entry == 2) dscache::jpeg_info(b.data(), b.size());
          FAIL("accepted a stream with bytes after its EOI");
        } catch (const Error& e) {
          CHECK(e.kind() == ErrorKind::kCorruption);
          CHECK(std::string(e.what()).find("after the end-of-image marker") != std::string::npos);
        }
      }
    }
    // An APP15 segment holding FF D9 (as an EXIF thumbnail would) right after SOI: still one
    // image, which decodes to the same pixels.
    std::vector<uint8_t> app = {bytes[0], bytes[1], 0xFF, 0xEF, 0x00, 0x06, 0xFF, 0xD9, 0xFF, 0xD8};
    app.insert(app.end(), bytes.begin() + 2, bytes.end());
    const Image a = decode(app, 32, 48, 3, &scratch), b = decode(bytes, 32, 48, 3, &scratch);
    CHECK(a.px == b.px);
  }

  TEST_CASE("fuzz: mutated streams decode or throw Error(kCorruption), truncations always throw") {
    JpegScratch scratch;
    const std::vector<std::string> photos = photo_paths();
    std::vector<std::vector<uint8_t>> bases;
    std::vector<Image> images;
    images.push_back(synthetic(48, 64, 3, 41));
    images.push_back(synthetic(40, 40, 1, 42));
    if (!photos.empty()) images.push_back(load_photo(photos[0], 48, &scratch));
    for (const Image& img : images) bases.push_back(encode(img, 85));
    // Progressive streams (4:2:0 and 4:4:4) take the crop/skip path too.
    for (const dscache::detail::JpegLayout& layout :
         {dscache::detail::JpegLayout{85, 2, 2, true},
          dscache::detail::JpegLayout{85, 1, 1, true}}) {
      images.push_back(images[0]);
      bases.emplace_back();
      dscache::detail::jpeg_encode_layout(images[0].px.data(), images[0].h, images[0].w, 3, layout,
                                          &bases.back());
    }

    uint64_t ok = 0, caught = 0, truncations = 0;
    // Runs the three entry points on `b` (meant as an image of `img`'s shape).
    auto run_all = [&](const std::vector<uint8_t>& b, const Image& img) {
      std::vector<uint8_t> out(size_t{img.h} * img.w * 3);
      const CropBox box =
          dscache::choose_crop(recipe_options(kRecipes[1]), img.h, img.w, 1, 0, b.size());
      bool all_ok = true;
      for (int which = 0; which < 4; ++which) {
        const Outcome o = classify([&] {
          switch (which) {
            case 0:
              dscache::jpeg_info(b.data(), b.size());
              break;
            case 1:
              dscache::jpeg_decode(b.data(), b.size(), img.h, img.w, img.c, out.data(), &scratch);
              break;
            case 2:
              dscache::jpeg_decode_crop(b.data(), b.size(), img.h, img.w, 3, box, 16, 16,
                                        out.data(), &scratch);
              break;
            case 3:
              dscache::jpeg_decode_crop(b.data(), b.size(), img.h, img.w, 1, box, 8, 8, out.data(),
                                        &scratch, {false, true});
              break;
          }
        });
        all_ok &= o == Outcome::kOk;
        (o == Outcome::kOk ? ok : caught) += 1;
      }
      return all_ok;
    };

    // Every truncation of each stream (all lengths) is an error in every entry point but
    // jpeg_info, which only reads the header... and checks the EOI: an error there too.
    for (size_t k = 0; k < bases.size(); ++k) {
      for (size_t len = 0; len < bases[k].size(); ++len) {
        const std::vector<uint8_t> t(bases[k].begin(), bases[k].begin() + len);
        ++truncations;
        if (run_all(t, images[k])) FAIL("a truncation to " << len << " bytes decoded as good");
      }
    }
    const uint64_t truncation_calls = ok + caught;
    CHECK(ok == 0);
    CHECK(caught == truncation_calls);

    // Random mutations: bit flips, byte sets, inserted/deleted bytes, bogus markers, truncation.
    std::mt19937_64 rng(0x1F1F);
    uint64_t mutated_ok = 0, mutated_caught = 0;
    constexpr int kIterations = 6000;
    for (int iter = 0; iter < kIterations; ++iter) {
      const size_t k = iter % bases.size();
      std::vector<uint8_t> b = bases[k];
      mutate(b, rng);
      const uint64_t before_ok = ok;
      run_all(b, images[k]);
      mutated_ok += ok - before_ok;
      mutated_caught += 4 - (ok - before_ok);
    }
    MESSAGE("fuzz: " << truncations << " truncations (" << truncation_calls
                     << " calls, all errors); " << kIterations << " mutated streams: " << mutated_ok
                     << " calls decoded, " << mutated_caught << " caught");
    CHECK(mutated_ok + mutated_caught == 4 * kIterations);
    CHECK(mutated_caught > kIterations);  // the damage is noticed...
    CHECK(mutated_ok > kIterations / 4);  // ...and not everything is rejected blindly
  }

}  // TEST_SUITE
