// RecipeDecoder, the one decode of a source file with a cache's recipe: that it makes what
// decode_image makes with the same options, and that a file changed since it was listed is
// refused (the build's "changed while the build ran"), never stored as other bytes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/ingest/source_list.h"
#include "test_util.h"

using dscache::test::TempDir;
using dscache::test::write_all;

namespace {

// A binary PPM (P6) of h x w pixels, every byte distinct enough that a crop or a wrong channel
// order shows; OpenCV reads it, so no encoder is needed here.
std::string ppm(uint32_t h, uint32_t w, uint8_t seed) {
  std::string s = "P6\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n";
  for (uint32_t i = 0; i < h * w * 3; ++i) s += static_cast<char>((seed + i * 7) & 0xff);
  return s;
}

void set_mtime_ns(const std::string& path, int64_t ns) {
  struct timespec t[2];
  t[0].tv_sec = t[1].tv_sec = ns / 1000000000;
  t[0].tv_nsec = t[1].tv_nsec = ns % 1000000000;
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
}

dscache::BuildRecipe recipe(uint32_t h, uint32_t w, uint32_t max_side) {
  dscache::BuildRecipe r;
  r.height = h;
  r.width = w;
  r.channels = 3;
  r.max_side = max_side;
  return r;
}

// The one-image list "a.ppm,0" in tmp, listed.
dscache::SourceListing list_one(const TempDir& tmp, const std::string& image) {
  write_all(tmp.file("a.ppm"), image);
  write_all(tmp.file("list.csv"), "a.ppm,0\n");
  dscache::SourceListing l = dscache::list_source(tmp.file("list.csv"), {});
  REQUIRE(l.entries.size() == 1);
  REQUIRE(l.entries[0].size == image.size());
  return l;
}

}  // namespace

TEST_SUITE("source decoder") {
  TEST_CASE("the recipe's decode is decode_image's with the recipe's options") {
    TempDir tmp;
    const std::string image = ppm(6, 8, 3);
    const dscache::SourceListing l = list_one(tmp, image);
    const auto* bytes = reinterpret_cast<const uint8_t*>(image.data());

    // Fixed: 4x4 center crop, into a vector and into a caller's slot.
    const dscache::RecipeDecoder fixed(recipe(4, 4, 0), dscache::Layout::kFixed);
    CHECK(fixed.fixed_bytes() == 4 * 4 * 3);
    dscache::DecodeOptions o;
    o.height = o.width = 4;
    std::vector<uint8_t> want(4 * 4 * 3);
    REQUIRE(dscache::decode_image(bytes, image.size(), o, want.data()).ok);
    std::vector<uint8_t> got;
    uint32_t h = 0, w = 0;
    std::string reason;
    const dscache::SourceEntry first = l.entries[0];
    REQUIRE(fixed.decode_file(first.path, &first, &got, &h, &w, &reason));
    CHECK(reason.empty());
    CHECK(h == 4);
    CHECK(w == 4);
    CHECK(got == want);
    std::vector<uint8_t> slot(fixed.fixed_bytes());
    REQUIRE(fixed.decode_file(first.path, &first, slot.data(), &reason));
    CHECK(slot == want);

    // Ragged: shorter side 6 -> 3, aspect kept.
    const dscache::RecipeDecoder ragged(recipe(0, 0, 3), dscache::Layout::kRagged);
    CHECK(ragged.fixed_bytes() == 0);
    o.height = o.width = 1;
    uint32_t wh = 0, ww = 0;
    REQUIRE(dscache::decode_image_ragged(bytes, image.size(), o, 3, &want, &wh, &ww).ok);
    REQUIRE(ragged.decode_file(first.path, &first, &got, &h, &w, &reason));
    CHECK(h == 3);
    CHECK(w == 4);
    CHECK(h == wh);
    CHECK(w == ww);
    CHECK(got == want);
    CHECK_THROWS_AS(ragged.decode_file(first.path, nullptr, slot.data(), &reason), dscache::Error);
  }

  TEST_CASE("a file changed since it was listed is refused, saying how") {
    const std::string image = ppm(6, 8, 11);
    const std::string n = std::to_string(image.size());
    struct Case {
      const char* what;
      // Changes the listed file at `path`, listed with modification time `mtime_ns`.
      void (*change)(const std::string& path, const std::string& image, int64_t mtime_ns);
      std::string reason;      // with the listing's entry; "" = decodes
      bool decodes_unchecked;  // without it (verify --source, the lazy cache) still decodes:
                               // only the listing check refuses it
    };
    const std::string changed = "changed while the build ran (listed " + n + " bytes, read ";
    const std::string n10 = std::to_string(image.size() + 10);
    const Case cases[] = {
        {"unchanged", [](const std::string&, const std::string&, int64_t) {}, "", true},
        {"touched",
         [](const std::string& p, const std::string&, int64_t t) {
           set_mtime_ns(p, t + 1000000000);
         },
         changed + n + ", now " + n + ", modified)", true},
        {"rewritten with other pixels, same size",
         [](const std::string& p, const std::string&, int64_t t) {
           write_all(p, ppm(6, 8, 99));
           set_mtime_ns(p, t + 1);
         },
         changed + n + ", now " + n + ", modified)", true},
        {"grown, mtime put back",
         [](const std::string& p, const std::string& img, int64_t t) {
           write_all(p, img + "0123456789");
           set_mtime_ns(p, t);
         },
         changed + n10 + ", now " + n10 + ")", false},
        {"truncated, mtime put back",
         [](const std::string& p, const std::string& img, int64_t t) {
           write_all(p, img.substr(0, 11));
           set_mtime_ns(p, t);
         },
         changed + "11, now 11)", false},
        {"deleted", [](const std::string& p, const std::string&, int64_t) { ::unlink(p.c_str()); },
         "cannot open: No such file or directory", false},
    };
    const dscache::RecipeDecoder dec(recipe(4, 4, 0), dscache::Layout::kFixed);
    for (const Case& c : cases) {
      CAPTURE(c.what);
      TempDir tmp;
      const dscache::SourceListing l = list_one(tmp, image);
      const dscache::SourceEntry& e = l.entries[0];
      c.change(e.path, image, e.mtime_ns);

      const std::string& want = c.reason;
      std::vector<uint8_t> out;
      uint32_t h = 0, w = 0;
      std::string reason;
      CHECK(dec.decode_file(e.path, &e, &out, &h, &w, &reason) == want.empty());
      CHECK(reason == want);
      std::vector<uint8_t> slot(dec.fixed_bytes());
      CHECK(dec.decode_file(e.path, &e, slot.data(), &reason) == want.empty());
      CHECK(reason == want);
      // The check is the listing's: without the entry the file is only read and decoded.
      if (c.decodes_unchecked) CHECK(dec.decode_file(e.path, nullptr, &out, &h, &w, &reason));
    }
  }
}
