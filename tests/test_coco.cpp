// dscache/ingest/coco.h: COCO instances parsed, listed with fields and rasterised (polygons
// against an OpenCV fillPoly reference, RLE exactly), and mask images decoded as class ids.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/ingest/coco.h"
#include "test_util.h"

using dscache::CocoInstances;
using dscache::Error;
using dscache::ErrorKind;
using dscache::test::expect_error;
using dscache::test::TempDir;
using dscache::test::write_all;
using json = nlohmann::json;

namespace {

// pycocotools' rleEncode of a column-major 0/1 mask: counts alternate 0-runs and 1-runs,
// starting with 0s.
std::vector<uint32_t> rle_encode(const std::vector<uint8_t>& col_major) {
  std::vector<uint32_t> counts;
  uint8_t cur = 0;
  uint32_t run = 0;
  for (uint8_t v : col_major) {
    if ((v != 0) != (cur != 0)) {
      counts.push_back(run);
      run = 0;
      cur = v != 0;
    }
    ++run;
  }
  counts.push_back(run);
  return counts;
}

// pycocotools' rleToString: counts after the third as differences from the count two before,
// 5 bits a char least significant first, 0x20 = more follows, + 48.
std::string rle_to_string(const std::vector<uint32_t>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t x = counts[i];
    if (i > 2) x -= counts[i - 2];
    bool more = true;
    while (more) {
      int c = static_cast<int>(x & 0x1f);
      x >>= 5;  // arithmetic: keeps the sign
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) c |= 0x20;
      s += static_cast<char>(c + 48);
    }
  }
  return s;
}

// A row-major h x w mask (0/1) in column-major order, as RLE counts it.
std::vector<uint8_t> to_col_major(const std::vector<uint8_t>& row_major, int h, int w) {
  std::vector<uint8_t> out(row_major.size());
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) out[static_cast<size_t>(x) * h + y] = row_major[y * w + x];
  }
  return out;
}

json image(int64_t id, const std::string& file, int w, int h) {
  return {{"id", id}, {"file_name", file}, {"width", w}, {"height", h}};
}

json annotation(int64_t id, int64_t image_id, int64_t category_id, std::vector<double> bbox,
                json segmentation = json::array(), int crowd = 0) {
  return {{"id", id},     {"image_id", image_id},         {"category_id", category_id},
          {"bbox", bbox}, {"segmentation", segmentation}, {"iscrowd", crowd}};
}

// Non-contiguous ids, listed out of id order: indexes follow the file's order.
json categories() {
  return json::array(
      {{{"id", 7}, {"name", "cat"}}, {{"id", 3}, {"name", "dog"}}, {{"id", 90}, {"name", "bird"}}});
}

std::string write_json(const TempDir& dir, const json& j, const std::string& name = "ann.json") {
  write_all(dir.file(name), j.dump());
  return dir.file(name);
}

// Chebyshev (L-infinity) distance from (px, py) to the segment a-b: the largest of the x and y
// offsets to its nearest point. Convex in the segment's parameter: ternary search.
double segment_distance(double px, double py, double ax, double ay, double bx, double by) {
  auto at = [&](double t) {
    return std::max(std::fabs(px - (ax + t * (bx - ax))), std::fabs(py - (ay + t * (by - ay))));
  };
  double lo = 0, hi = 1;
  for (int k = 0; k < 100; ++k) {
    const double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
    (at(m1) < at(m2) ? hi : lo) = at(m1) < at(m2) ? m2 : m1;
  }
  return at((lo + hi) / 2);
}

double boundary_distance(const std::vector<double>& poly, double px, double py) {
  double best = 1e300;
  const size_t n = poly.size() / 2;
  for (size_t j = 0; j < n; ++j) {
    const size_t k = (j + 1) % n;
    best = std::min(
        best, segment_distance(px, py, poly[2 * j], poly[2 * j + 1], poly[2 * k], poly[2 * k + 1]));
  }
  return best;
}

// Even-odd rule: whether (px, py) lies inside the polygon.
bool centre_inside(const std::vector<double>& poly, double px, double py) {
  bool in = false;
  const size_t n = poly.size() / 2;
  for (size_t j = 0, k = n - 1; j < n; k = j++) {
    const double xj = poly[2 * j], yj = poly[2 * j + 1], xk = poly[2 * k], yk = poly[2 * k + 1];
    if ((yj > py) != (yk > py) && px < xj + (py - yj) * (xk - xj) / (yk - yj)) in = !in;
  }
  return in;
}

// Euclidean distance from (px, py) to the polygon's edges.
double euclid_distance(const std::vector<double>& poly, double px, double py) {
  double best = 1e300;
  const size_t n = poly.size() / 2;
  for (size_t j = 0; j < n; ++j) {
    const size_t k = (j + 1) % n;
    const double ax = poly[2 * j], ay = poly[2 * j + 1];
    const double dx = poly[2 * k] - ax, dy = poly[2 * k + 1] - ay;
    const double t = std::clamp(((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy), 0.0, 1.0);
    best = std::min(best, std::hypot(px - ax - t * dx, py - ay - t * dy));
  }
  return best;
}

double perimeter(const std::vector<double>& poly) {
  double p = 0;
  const size_t n = poly.size() / 2;
  for (size_t j = 0; j < n; ++j) {
    const size_t k = (j + 1) % n;
    p += std::hypot(poly[2 * k] - poly[2 * j], poly[2 * k + 1] - poly[2 * j + 1]);
  }
  return p;
}

// The reference: OpenCV's fillPoly, whose pixel (x, y) is the point (x, y), so COCO's edge
// coordinates move by -0.5 to put pixel centres on the integer grid; 8 fractional bits.
void fill_reference(const std::vector<double>& poly, cv::Mat& ref) {
  std::vector<cv::Point> pts;
  for (size_t j = 0; j < poly.size(); j += 2) {
    pts.emplace_back(static_cast<int>(std::lround((poly[j] - 0.5) * 256)),
                     static_cast<int>(std::lround((poly[j + 1] - 0.5) * 256)));
  }
  std::vector<std::vector<cv::Point>> contours = {pts};
  cv::fillPoly(ref, contours, cv::Scalar(1), cv::LINE_8, 8);
}

// A PNG chunk: length, type, data, CRC-32 of type + data (big-endian numbers).
std::string png_chunk(const char* type, const std::string& data) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  std::string body = std::string(type, 4) + data;
  const uint32_t crc =
      crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return be32(static_cast<uint32_t>(data.size())) + body + be32(crc);
}

// A palette PNG (colour type 3), or with `grey` a grey one (type 0), of `bits` per pixel, written
// by hand: OpenCV writes neither palettes nor grey below 8 bits.
std::string packed_png(uint32_t w, uint32_t h, int bits, const std::vector<uint8_t>& idx,
                       bool grey = false) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  std::string ihdr =
      be32(w) + be32(h) + std::string{static_cast<char>(bits), grey ? '\0' : '\3', 0, 0, 0};
  std::string plte;
  for (int i = 0; i < (1 << bits); ++i) plte += std::string{char(i * 7), char(255 - i), char(i)};
  std::string raw;
  for (uint32_t y = 0; y < h; ++y) {
    raw += '\0';  // filter: none
    std::vector<uint8_t> row((w * bits + 7) / 8, 0);
    for (uint32_t x = 0; x < w; ++x) {
      const uint32_t bit = x * bits;
      row[bit / 8] |= static_cast<uint8_t>(idx[y * w + x] << (8 - bits - bit % 8));
    }
    raw.append(row.begin(), row.end());
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  REQUIRE(compress(reinterpret_cast<Bytef*>(&z[0]), &zlen,
                   reinterpret_cast<const Bytef*>(raw.data()), raw.size()) == Z_OK);
  z.resize(zlen);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) +
         (grey ? "" : png_chunk("PLTE", plte)) + png_chunk("IDAT", z) + png_chunk("IEND", "");
}

std::vector<uint8_t> bytes_of(const std::vector<uchar>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_SUITE("coco") {
  TEST_CASE("decode_rle_string: hand-computed strings, pycocotools' encoder round trip, errors") {
    // "352O": 3, 5, 2 as one char each; the 4th is 4 - 5 = -1: 0x1f with the sign bit, + 48.
    CHECK(dscache::decode_rle_string("352O", "w") == std::vector<uint32_t>{3, 5, 2, 4});
    // 100 = 4 + 3 * 32: 'T' (4 | 0x20, + 48) then '3'; 60 = 28 + 32: 28 has 0x10, so a second
    // char (1) follows although 60 >> 5 == 1; the 4th is 40 - 40 = 0.
    CHECK(dscache::decode_rle_string("T3X1l10", "w") == std::vector<uint32_t>{100, 40, 60, 40});
    CHECK(rle_to_string({100, 40, 60, 40}) == "T3X1l10");
    CHECK(dscache::decode_rle_string("", "w").empty());
    CHECK(dscache::decode_rle_string("3300", "w") == std::vector<uint32_t>{3, 3, 0, 3});
    std::mt19937 rng(19);
    for (int round = 0; round < 200; ++round) {
      std::vector<uint32_t> counts(1 + rng() % 40);
      for (auto& c : counts) c = rng() % (round < 100 ? 300u : 4000000000u);
      CAPTURE(round);
      CHECK(dscache::decode_rle_string(rle_to_string(counts), "w") == counts);
    }
    struct Bad {
      const char* text;
      const char* reason;
    };
    const Bad bad[] = {
        {"35 2", "byte 2"},                        // below '0'
        {"35z", "byte 2"},                         // above 'o' (48 + 63)
        {"3T", "ends inside count 1"},             // a continuation char last
        {"O", "count 0 is -1"},                    // a negative first count
        {"30O", "count 2 is -1"},                  // 3rd count is not a difference: -1
        {"oooooooo0", "longer than 7"},            // a number past 35 bits
        {"000oooooo?", "count 3 is 17179869183"},  // 2^34 - 1: past uint32
    };
    for (const Bad& b : bad) {
      CAPTURE(b.text);
      const Error e = expect_error([&] { dscache::decode_rle_string(b.text, "ann[4].counts"); },
                                   ErrorKind::kCorruption, b.reason);
      CHECK(e.path() == "ann[4].counts");
    }
  }

  TEST_CASE("polygons rasterise like annToMask: exact on pixel edges, fillPoly up to boundary") {
    TempDir tmp;
    const int w = 64, h = 48;
    // Rectangles, worked by hand with pycocotools' rule: on pixel edges, exactly their pixels
    // (crossings of column centres round to rows 10 and 15); on pixel centres, a centre on the
    // left or top edge is outside and on the right or bottom edge inside (vertices round half
    // up on the 5x grid: 2.5 -> 13 / 5 = 2.6).
    struct Rect {
      std::vector<double> poly;
      int x0, x1, y0, y1;  // the pixels inside: [x0, x1) x [y0, y1)
    };
    const Rect rects[] = {
        {{10, 10, 20, 10, 20, 15, 10, 15}, 10, 20, 10, 15},
        {{2.5, 2.5, 61.5, 2.5, 61.5, 45.5, 2.5, 45.5}, 3, 62, 3, 46},
    };
    for (const Rect& r : rects) {
      json j = {{"images", {image(1, "a.png", w, h)}},
                {"annotations", {annotation(1, 1, 3, {1, 1, 10, 5}, json::array({r.poly}))}},
                {"categories", categories()}};
      const CocoInstances coco = dscache::read_coco_instances(write_json(tmp, j));
      std::vector<uint8_t> m(w * h);
      dscache::rasterize_semantic(coco, 0, m.data());
      int wrong = 0;
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          const bool in = x >= r.x0 && x < r.x1 && y >= r.y0 && y < r.y1;
          wrong += m[y * w + x] != (in ? 2 : 0);
        }
      }
      CAPTURE(r.x0);
      CHECK(wrong == 0);
    }
    // Against fillPoly: a pixel may differ only on the boundary -- its centre within one pixel
    // of the polygon's edges in x and in y (L-infinity distance <= 1: the pixel or a neighbour
    // of its 3x3 block is crossed by an edge) -- and no more pixels differ than the boundary is
    // long. Both rules sample pixel centres, but pycocotools rounds the edges to a 1/5-pixel
    // trace, and fillPoly also fills every pixel its edges' lines pass through (one or two more
    // per row on shallow edges). Those bounds would pass a mask shifted by a pixel, so the rule
    // itself is checked too: a pixel is inside when its centre is (even-odd), except within
    // 0.25 pixel of an edge (the trace's rounding: 0.1 for vertices, 0.1 along edges, and the
    // 0.1 bias of its row rule, ceil(v / 5 - 0.4)).
    const std::vector<std::vector<double>> polys = {
        {5.3, 4.1, 50.7, 9.9, 30.2, 40.6},                     // triangle
        {4, 4, 40, 4, 40, 12.5, 14.5, 12.5, 14.5, 36, 4, 36},  // concave: an L
        {32, 2, 60, 24, 32, 46, 40.5, 24},                     // concave: arrow head
        {2.5, 2.5, 61.5, 2.5, 61.5, 45.5, 2.5, 45.5},          // on pixel centres
        {10.25, 30.75, 20.6, 20.1, 33.3, 33.3, 45.9, 20.2, 55.1, 40.4, 10.25, 44.4},  // zig-zag
    };
    for (size_t i = 0; i < polys.size(); ++i) {
      CAPTURE(i);
      json j = {{"images", {image(1, "a.png", w, h)}},
                {"annotations", {annotation(1, 1, 90, {0, 0, 63, 47}, json::array({polys[i]}))}},
                {"categories", categories()}};
      const CocoInstances coco = dscache::read_coco_instances(write_json(tmp, j));
      std::vector<uint8_t> m(w * h);
      dscache::rasterize_semantic(coco, 0, m.data());
      cv::Mat ref = cv::Mat::zeros(h, w, CV_8UC1);
      fill_reference(polys[i], ref);
      int differ = 0, inside = 0;
      double worst = 0, worst_centre = 0;
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          CHECK((m[y * w + x] == 0 || m[y * w + x] == 3));
          inside += m[y * w + x] != 0;
          if ((m[y * w + x] != 0) != centre_inside(polys[i], x + 0.5, y + 0.5)) {
            worst_centre = std::max(worst_centre, euclid_distance(polys[i], x + 0.5, y + 0.5));
          }
          if ((m[y * w + x] != 0) != (ref.at<uint8_t>(y, x) != 0)) {
            ++differ;
            worst = std::max(worst, boundary_distance(polys[i], x + 0.5, y + 0.5));
          }
        }
      }
      CAPTURE(differ);
      CAPTURE(worst);
      CHECK(inside > 100);
      CHECK(worst <= 1.0);
      CHECK(worst_centre <= 0.25);
      CHECK(differ <= perimeter(polys[i]));
    }
    // Two polygons of one annotation: their union, as each alone.
    {
      const std::vector<double> a = {4, 4, 20, 4, 12, 20}, b = {30, 30, 60, 30, 60, 44, 30, 44};
      json j = {{"images", {image(1, "a.png", w, h)}},
                {"annotations", {annotation(1, 1, 7, {4, 4, 56, 40}, json::array({a, b}))}},
                {"categories", categories()}};
      const CocoInstances coco = dscache::read_coco_instances(write_json(tmp, j));
      std::vector<uint8_t> both(w * h), one(w * h), two(w * h);
      dscache::rasterize_semantic(coco, 0, both.data());
      for (auto [poly, mask] : {std::make_pair(&a, &one), std::make_pair(&b, &two)}) {
        j["annotations"][0]["segmentation"] = json::array({*poly});
        dscache::rasterize_semantic(dscache::read_coco_instances(write_json(tmp, j, "single.json")),
                                    0, mask->data());
      }
      int painted = 0;
      for (int p = 0; p < w * h; ++p) {
        CHECK(both[p] == std::max(one[p], two[p]));
        painted += both[p] == 1;
      }
      CHECK(painted > 400);
    }
  }

  TEST_CASE("RLE (compressed and counts), crowd, overlaps: later wins, RLE exact") {
    TempDir tmp;
    const int w = 40, h = 30;
    // Two RLE shapes overlapping: a disc (compressed, crowd) and a band (uncompressed).
    std::vector<uint8_t> disc(w * h), band(w * h);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        disc[y * w + x] = (x - 15) * (x - 15) + (y - 12) * (y - 12) < 81;
        band[y * w + x] = y >= 10 && y < 14 && x >= 3;
      }
    }
    const auto disc_counts = rle_encode(to_col_major(disc, h, w));
    const auto band_counts = rle_encode(to_col_major(band, h, w));
    json j = {{"images", {image(5, "a.png", w, h)}},
              {"annotations",
               {annotation(1, 5, 7, {6, 3, 19, 19},
                           {{"size", {h, w}}, {"counts", rle_to_string(disc_counts)}}, 1),
                annotation(2, 5, 90, {3, 10, 37, 4}, {{"size", {h, w}}, {"counts", band_counts}})}},
              {"categories", categories()}};
    const CocoInstances coco = dscache::read_coco_instances(write_json(tmp, j));
    REQUIRE(coco.images.size() == 1);
    REQUIRE(coco.images[0].annotations.size() == 2);
    CHECK(coco.images[0].annotations[0].crowd);
    const std::vector<dscache::CocoSegmentation> segs = dscache::read_segmentations(coco, 0);
    REQUIRE(segs.size() == 2);
    CHECK(segs[0].rle_counts == disc_counts);
    CHECK(segs[1].rle_counts == band_counts);
    std::vector<uint8_t> m(w * h);
    dscache::rasterize_semantic(coco, 0, m.data());
    int overlap = 0;
    for (int p = 0; p < w * h; ++p) {
      const uint8_t expect = band[p] ? 3 : disc[p] ? 1 : 0;  // bird (index 2) painted last
      CHECK(m[p] == expect);
      overlap += band[p] && disc[p];
    }
    CHECK(overlap > 10);
  }

  TEST_CASE("read_coco_instances: category indexes by file order, boxes clipped or dropped") {
    TempDir tmp;
    json j = {{"images", {image(10, "a.png", 40, 30), image(11, "b.jpg", 50, 20)}},
              {"annotations",
               {annotation(1, 11, 90, {1, 2, 3, 4}),
                annotation(2, 10, 7, {-0.5, 29.25, 40.6, 0.75}),  // past the edges by < 1
                annotation(3, 10, 3, {5, 5, 0, 4}),               // no width: dropped
                annotation(4, 10, 3, {5, 5, 4, -1}),              // negative height: dropped
                annotation(5, 10, 3, {40.5, 5, 0.4, 4}),          // nothing left inside: dropped
                annotation(6, 10, 3, {2, 3, 4, 5})}},
              {"categories", categories()}};
    const CocoInstances coco = dscache::read_coco_instances(write_json(tmp, j));
    CHECK(coco.path == tmp.file("ann.json"));
    CHECK(coco.categories == std::vector<std::string>{"cat", "dog", "bird"});
    CHECK(coco.category_ids == std::vector<int64_t>{7, 3, 90});
    REQUIRE(coco.images.size() == 2);
    CHECK(coco.images[0].id == 10);
    CHECK(coco.images[0].file_name == "a.png");
    CHECK(coco.images[0].width == 40);
    CHECK(coco.images[0].height == 30);
    CHECK(coco.images[0].bad.empty());
    const auto& a = coco.images[0].annotations;
    REQUIRE(a.size() == 2);
    CHECK(a[0].category == 0);
    CHECK(a[0].box[0] == 0.0f);
    CHECK(a[0].box[1] == 29.25f);
    CHECK(a[0].box[2] == 40.0f);
    CHECK(a[0].box[3] == 30.0f);
    CHECK(a[1].category == 1);
    CHECK(std::vector<float>(a[1].box, a[1].box + 4) == std::vector<float>{2, 3, 6, 8});
    REQUIRE(coco.images[1].annotations.size() == 1);
    CHECK(coco.images[1].annotations[0].category == 2);
    CHECK(!coco.images[1].annotations[0].crowd);
  }

  TEST_CASE("bad inputs: errors name the element; misfits make their image bad") {
    TempDir tmp;
    const json img = image(1, "a.png", 40, 30);
    struct Case {
      const char* what;
      json doc;
      const char* error;  // nullptr: parses, image 0 is bad with `bad`
      const char* bad;
    };
    const Case cases[] = {
        {"unknown category",
         {{"images", {img}},
          {"annotations", {annotation(17, 1, 5, {1, 1, 2, 2})}},
          {"categories", categories()}},
         nullptr,
         "annotation 17 (annotations[0]): category id 5 is not in categories"},
        {"box outside by more than a pixel",
         {{"images", {img}},
          {"annotations", {annotation(18, 1, 3, {30, 1, 11.5, 2})}},
          {"categories", categories()}},
         nullptr,
         "annotation 18 (annotations[0]), category id 3: box 30,1,41.5,3"},
        {"box left of the image",
         {{"images", {img}},
          {"annotations", {annotation(19, 1, 3, {-2, 1, 5, 2})}},
          {"categories", categories()}},
         nullptr,
         "lies outside the 40x30 image"},
        {"RLE of another size",
         {{"images", {img}},
          {"annotations",
           {annotation(20, 1, 3, {1, 1, 2, 2}, {{"size", {40, 30}}, {"counts", {1200}}})}},
          {"categories", categories()}},
         nullptr,
         "RLE size [40, 30] differs from the image's [30, 40]"},
        {"malformed RLE string",
         {{"images", {img}},
          {"annotations",
           {annotation(21, 1, 3, {1, 1, 2, 2}, {{"size", {30, 40}}, {"counts", "3 5"}})}},
          {"categories", categories()}},
         "annotations[0].segmentation.counts: byte 1",
         nullptr},
        {"RLE counts not covering the image",
         {{"images", {img}},
          {"annotations",
           {annotation(22, 1, 3, {1, 1, 2, 2}, {{"size", {30, 40}}, {"counts", {1000, 100}}})}},
          {"categories", categories()}},
         "annotations[0].segmentation.counts cover 1100 pixels",
         nullptr},
        {"unknown image id",
         {{"images", {img}},
          {"annotations", {annotation(1, 99, 3, {1, 1, 2, 2})}},
          {"categories", categories()}},
         "annotations[0] names image id 99, not in images",
         nullptr},
        {"bbox of 3 numbers",
         {{"images", {img}},
          {"annotations", {annotation(1, 1, 3, {1, 1, 2})}},
          {"categories", categories()}},
         "annotations[0].bbox has 3 numbers",
         nullptr},
        {"image without file_name",
         {{"images", {img, {{"id", 2}, {"width", 4}, {"height", 4}}}},
          {"annotations", json::array()},
          {"categories", categories()}},
         "images[1] has no file_name",
         nullptr},
        {"odd polygon",
         {{"images", {img}},
          {"annotations", {annotation(1, 1, 3, {1, 1, 2, 2}, json::array({{1, 2, 3, 4, 5}}))}},
          {"categories", categories()}},
         "annotations[0].segmentation[0] has an odd count of numbers (5)",
         nullptr},
        {"repeated category id",
         {{"images", {img}},
          {"annotations", json::array()},
          {"categories", {{{"id", 1}, {"name", "a"}}, {{"id", 1}, {"name", "b"}}}}},
         "categories[1] repeats category id 1",
         nullptr},
        {"no categories",
         {{"images", {img}}, {"annotations", json::array()}},
         "no \"categories\" array",
         nullptr},
        {"a JSON array", json::array({1, 2}), "not a JSON object", nullptr},
    };
    for (const Case& c : cases) {
      CAPTURE(c.what);
      const std::string path = write_json(tmp, c.doc);
      if (c.error != nullptr) {
        const Error e = expect_error([&] { dscache::read_coco_instances(path); },
                                     ErrorKind::kCorruption, c.error);
        CHECK(e.path() == path);
        continue;
      }
      const CocoInstances coco = dscache::read_coco_instances(path);
      REQUIRE(coco.images.size() == 1);
      CHECK(coco.images[0].bad.find(c.bad) != std::string::npos);
      CHECK(coco.images[0].annotations.empty());
    }
    write_all(tmp.file("broken.json"), "{\"images\": [");
    expect_error([&] { dscache::read_coco_instances(tmp.file("broken.json")); },
                 ErrorKind::kCorruption, {"broken.json", "not valid JSON"});
    REQUIRE(::mkfifo(tmp.file("fifo.json").c_str(), 0600) == 0);
    expect_error([&] { dscache::read_coco_instances(tmp.file("fifo.json")); },
                 ErrorKind::kCorruption, "FIFO");
    expect_error([&] { dscache::read_coco_instances(tmp.file("none.json")); }, ErrorKind::kNotFound,
                 "none.json");
  }

  TEST_CASE("streamed parse: errors name byte, line and column; masks refuse a changed file") {
    TempDir tmp;
    struct Case {
      const char* text;
      const char* error;
    };
    // Positions as the whole-text parser gave them (checked against it by hand; the file is
    // read in pieces now).
    const std::string deep = std::string(300, '[') + std::string(300, ']');
    const Case cases[] = {
        {"{\n  \"images\": [1,]\n}", "not valid JSON at byte 18 (line 2, column 16)"},
        {"{\"images\": [], \"x\": 1e400}", "not valid JSON at byte 25 (line 1, column 25)"},
        {"{\"images\": []} x", "not valid JSON at byte 16 (line 1, column 16)"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file("e.json"), c.text);
      expect_error([&] { dscache::read_coco_instances(tmp.file("e.json")); },
                   ErrorKind::kCorruption, c.error);
    }
    write_all(tmp.file("e.json"), "{\"info\":\n" + deep + "}");
    expect_error([&] { dscache::read_coco_instances(tmp.file("e.json")); }, ErrorKind::kCorruption,
                 "JSON nested deeper than 256 arrays and objects (the limit) at byte 265 (line 2, "
                 "column 256)");
    // Masks read the polygons again from the file: one edited since (another size, or the same
    // size and another mtime) is refused by name, not rasterised from other bytes.
    json j = {
        {"images", {image(1, "a.png", 20, 10)}},
        {"annotations", {annotation(1, 1, 3, {1, 1, 8, 6}, json::array({{1, 1, 9, 1, 9, 7}}))}},
        {"categories", categories()}};
    const std::string path = write_json(tmp, j);
    const CocoInstances coco = dscache::read_coco_instances(path);
    std::vector<uint8_t> m(200);
    dscache::rasterize_semantic(coco, 0, m.data());
    CHECK(std::count(m.begin(), m.end(), 2) > 10);
    write_all(path, j.dump() + " ");
    expect_error([&] { dscache::rasterize_semantic(coco, 0, m.data()); }, ErrorKind::kCorruption,
                 {path, "changed since it was listed"});
    write_all(path, j.dump());
    const struct timespec times[2] = {{0, UTIME_OMIT}, {1000000, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
    expect_error([&] { dscache::read_segmentations(coco, 0); }, ErrorKind::kCorruption,
                 "changed since it was listed");
  }

  TEST_CASE("list_coco streams the file in pieces, list_source parses its text: same listing") {
    // Past several 1 MiB pieces, elements cut at the piece boundaries: the byte ranges masks
    // are read from again, boxes, digest and masks agree between the two ways in.
    TempDir tmp;
    REQUIRE(::mkdir(tmp.file("img").c_str(), 0700) == 0);
    std::mt19937 rng(33);
    json imgs = json::array(), anns = json::array();
    for (int i = 1; i <= 40; ++i) imgs.push_back(image(i, std::to_string(i) + ".png", 48, 32));
    for (int k = 0; k < 6000; ++k) {
      const int i = 1 + static_cast<int>(rng() % 40);
      std::vector<double> poly;
      for (int p = 0; p < 40; ++p) {
        poly.push_back(static_cast<double>(rng() % 4700) / 100);
        poly.push_back(static_cast<double>(rng() % 3100) / 100);
      }
      anns.push_back(annotation(k + 1, i, k % 2 ? 7 : 90, {1, 2, 30, 20}, json::array({poly})));
    }
    const std::string path =
        write_json(tmp, {{"images", imgs}, {"annotations", anns}, {"categories", categories()}});
    REQUIRE(std::filesystem::file_size(path) > (uint64_t{3} << 20));
    dscache::SourceOptions opt;
    opt.image_root = tmp.file("img");
    opt.coco_mask = "semantic";
    const dscache::SourceListing streamed = dscache::list_coco(path, opt);
    const dscache::SourceListing whole = dscache::list_source(path, opt);
    CHECK(streamed.digest == whole.digest);
    CHECK(streamed.columns.values == whole.columns.values);
    REQUIRE(streamed.coco->images.size() == 40);
    std::vector<uint8_t> a(48 * 32), b(48 * 32);
    for (size_t k = 0; k < 40; ++k) {
      CAPTURE(k);
      const auto& sa = streamed.coco->images[k].annotations;
      const auto& wa = whole.coco->images[k].annotations;
      REQUIRE(sa.size() == wa.size());
      for (size_t j = 0; j < sa.size(); ++j) CHECK(sa[j].offset == wa[j].offset);
      dscache::rasterize_semantic(*streamed.coco, k, a.data());
      dscache::rasterize_semantic(*whole.coco, k, b.data());
      CHECK(a == b);
      CHECK(std::count(a.begin(), a.end(), 0) < 48 * 32);
    }
  }

  TEST_CASE("is_coco_instances tells COCO files from others without throwing or hanging") {
    TempDir tmp;
    const json full = {{"info", {{"year", 2017}}},
                       {"images", json::array()},
                       {"annotations", json::array()},
                       {"categories", categories()},
                       {"licenses", json::array()}};
    struct Case {
      std::string text;
      bool coco;
    };
    const Case cases[] = {
        {full.dump(), true},
        {"\xEF\xBB\xBF  \n" + full.dump(2), true},
        {R"({"images": [], "annotations": [], "categories": {}})", false},
        {R"({"images": [], "annotations": []})", false},
        {R"({"x": {"images": [], "annotations": [], "categories": []}})", false},
        {R"([{"images": [], "annotations": [], "categories": []}])", false},
        {R"({"images": [], "annotations": [], "categories": [)", true},  // told before the end
        {"path,label\na.png,0\n", false},
        {"", false},
        {"{not json", false},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      write_all(tmp.file("x.json"), c.text);
      CHECK(dscache::is_coco_instances(tmp.file("x.json")) == c.coco);
    }
    REQUIRE(::mkfifo(tmp.file("fifo.json").c_str(), 0600) == 0);
    CHECK(!dscache::is_coco_instances(tmp.file("fifo.json")));
    CHECK(!dscache::is_coco_instances(tmp.file("missing.json")));
    CHECK(!dscache::is_coco_instances(tmp.path()));
  }

  TEST_CASE("list_coco: one entry per image, fields column by column, digest") {
    TempDir tmp;
    REQUIRE(::mkdir(tmp.file("img").c_str(), 0700) == 0);
    cv::Mat pixels(30, 40, CV_8UC3, cv::Scalar(10, 200, 30));
    REQUIRE(cv::imwrite(tmp.file("img/a.png"), pixels));
    cv::Mat small(20, 50, CV_8UC3, cv::Scalar(90, 20, 130));
    REQUIRE(cv::imwrite(tmp.file("img/b.jpg"), small));
    json j = {{"images",
               {image(10, "a.png", 40, 30), image(11, "b.jpg", 50, 20), image(12, "gone.png", 8, 8),
                image(13, "a.png", 40, 30)}},
              {"annotations",
               {annotation(1, 10, 90, {1, 2, 3, 4}), annotation(2, 10, 7, {5, 6, 7, 8}, {}, 1),
                annotation(3, 13, 55, {1, 1, 1, 1})}},
              {"categories", categories()}};
    const std::string path = write_json(tmp, j);
    dscache::SourceOptions opt;
    expect_error([&] { dscache::list_coco(path, opt); }, ErrorKind::kInvalidArgument,
                 "--image-root");
    opt.image_root = tmp.file("img");
    opt.coco_mask = "instance";
    expect_error([&] { dscache::list_coco(path, opt); }, ErrorKind::kInvalidArgument,
                 "--coco-mask instance");
    opt.coco_mask = "";
    const dscache::SourceListing l = dscache::list_coco(path, opt);
    CHECK(l.kind == "coco");
    CHECK(l.root == path);
    CHECK(l.classes.empty());
    REQUIRE(l.coco != nullptr);
    CHECK(l.coco->images.size() == 4);
    REQUIRE(l.entries.size() == 4);
    struct stat st;
    REQUIRE(::stat(tmp.file("img/b.jpg").c_str(), &st) == 0);
    CHECK(l.entries[1].path == tmp.file("img/b.jpg"));
    CHECK(l.entries[1].name == "b.jpg");
    CHECK(l.entries[1].label == 0);
    CHECK(l.entries[1].size == static_cast<uint64_t>(st.st_size));
    CHECK(l.entries[1].mtime_ns != 0);
    CHECK(l.entries[2].size == 0);  // missing: the build skips it
    CHECK(l.entries[2].bad.empty());
    CHECK(l.entries[3].bad.find("category id 55") != std::string::npos);
    REQUIRE(l.fields.size() == 4);
    const char* names[] = {"boxes", "box_labels", "box_crowd", "image_id"};
    const dscache::FieldKind kinds[] = {dscache::FieldKind::kBoxes, dscache::FieldKind::kRows,
                                        dscache::FieldKind::kRows, dscache::FieldKind::kScalar};
    for (size_t f = 0; f < 4; ++f) {
      CHECK(l.fields[f].name == names[f]);
      CHECK(l.fields[f].kind == kinds[f]);
      CHECK(l.columns.offsets[f].size() == 5);
    }
    CHECK(l.fields[1].rows_of == "boxes");
    CHECK(l.fields[1].classes == std::vector<std::string>{"cat", "dog", "bird"});
    CHECK_NOTHROW(dscache::validate_fields(l.fields, "coco"));
    auto boxes = l.columns.get(0, 0);
    REQUIRE(boxes.bytes == 32);
    float b[8];
    std::memcpy(b, boxes.data, 32);
    CHECK(std::vector<float>(b, b + 8) == std::vector<float>{1, 2, 4, 6, 5, 6, 12, 14});
    auto labels = l.columns.get(1, 0);
    REQUIRE(labels.bytes == 16);
    int64_t lab[2];
    std::memcpy(lab, labels.data, 16);
    CHECK(lab[0] == 2);
    CHECK(lab[1] == 0);
    auto crowd = l.columns.get(2, 0);
    REQUIRE(crowd.bytes == 2);
    CHECK(static_cast<const uint8_t*>(crowd.data)[0] == 0);
    CHECK(static_cast<const uint8_t*>(crowd.data)[1] == 1);
    auto id = l.columns.get(3, 1);
    REQUIRE(id.bytes == 8);
    int64_t id_value;
    std::memcpy(&id_value, id.data, 8);
    CHECK(id_value == 11);
    CHECK(l.columns.get(0, 1).bytes == 0);  // no annotations: no boxes, still an id
    for (size_t f = 0; f < 4; ++f) CHECK(l.columns.get(f, 3).bytes == 0);  // bad: empty
    // The digest follows the annotation file and the images' stats.
    CHECK(dscache::list_coco(path, opt).digest == l.digest);
    opt.coco_mask = "semantic";
    const dscache::SourceListing masked = dscache::list_coco(path, opt);
    REQUIRE(masked.fields.size() == 5);
    CHECK(masked.fields[4].name == "mask");
    CHECK(masked.fields[4].kind == dscache::FieldKind::kMask);
    CHECK(masked.fields[4].dtype == dscache::FieldType::kUint8);
    CHECK(masked.fields[4].classes == std::vector<std::string>{"background", "cat", "dog", "bird"});
    CHECK(masked.columns.get(4, 0).bytes == 0);
    CHECK(masked.digest == l.digest);
    j["annotations"][0]["bbox"] = {1, 2, 3, 5};
    write_json(tmp, j);
    const uint64_t edited = dscache::list_coco(path, opt).digest;
    CHECK(edited != l.digest);
    REQUIRE(cv::imwrite(tmp.file("img/b.jpg"), pixels));  // another size
    CHECK(dscache::list_coco(path, opt).digest != edited);
    opt.coco_mask = "none";
    CHECK(dscache::list_coco(path, opt).fields.size() == 4);
    // A uint8 mask holds background and 255 classes.
    for (int c = 0; c < 252; ++c) j["categories"].push_back({{"id", 1000 + c}, {"name", "c"}});
    write_json(tmp, j);
    opt.coco_mask = "semantic";
    CHECK(dscache::list_coco(path, opt).fields[4].classes.size() == 256);
    j["categories"].push_back({{"id", 5000}, {"name", "one too many"}});
    write_json(tmp, j);
    expect_error([&] { dscache::list_coco(path, opt); }, ErrorKind::kUnsupported,
                 "256 categories: --coco-mask semantic stores uint8 masks (at most 255)");
    opt.coco_mask = "";
    CHECK(dscache::list_coco(path, opt).fields.size() == 4);
  }

  TEST_CASE("decode_mask: grey 8/16-bit as stored, palette PNG as indices, colour refused") {
    const int w = 13, h = 7;
    cv::Mat m8(h, w, CV_8UC1), m16(h, w, CV_16UC1);
    std::vector<uint8_t> idx(w * h);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        m8.at<uint8_t>(y, x) = static_cast<uint8_t>((x * 3 + y) % 21);
        m16.at<uint16_t>(y, x) = static_cast<uint16_t>(x * 997 + y * 13);
        idx[y * w + x] = static_cast<uint8_t>((x + 2 * y) % 16);
      }
    }
    std::vector<uchar> png8, png16, rgb, rgba;
    REQUIRE(cv::imencode(".png", m8, png8));
    REQUIRE(cv::imencode(".png", m16, png16));
    REQUIRE(cv::imencode(".png", cv::Mat(h, w, CV_8UC3, cv::Scalar(1, 2, 3)), rgb));
    REQUIRE(cv::imencode(".png", cv::Mat(h, w, CV_8UC4, cv::Scalar(1, 2, 3, 4)), rgba));
    std::vector<uchar> jpeg;
    REQUIRE(cv::imencode(".jpg", cv::Mat(h, w, CV_8UC3, cv::Scalar(1, 2, 3)), jpeg));
    const std::string pal8 = packed_png(w, h, 8, idx), pal4 = packed_png(w, h, 4, idx);
    std::vector<uint8_t> binary(w * h);
    for (int p = 0; p < w * h; ++p) binary[p] = idx[p] & 1;
    const std::string grey4 = packed_png(w, h, 4, idx, true);
    const std::string grey1 = packed_png(w, h, 1, binary, true);
    std::vector<uint8_t> expect8(m8.data, m8.data + w * h);
    std::vector<uint8_t> expect16(reinterpret_cast<uint8_t*>(m16.data),
                                  reinterpret_cast<uint8_t*>(m16.data) + 2 * w * h);
    struct Case {
      const char* what;
      std::vector<uint8_t> bytes;
      uint32_t element_bytes;  // 0: refused with `reason`
      std::vector<uint8_t> expect;
      const char* reason;
    };
    const Case cases[] = {
        {"8-bit grey", bytes_of(png8), 1, expect8, ""},
        {"16-bit grey", bytes_of(png16), 2, expect16, ""},
#ifdef DSCACHE_TEST_HAVE_LIBPNG
        {"8-bit palette", {pal8.begin(), pal8.end()}, 1, idx, ""},
        {"4-bit palette", {pal4.begin(), pal4.end()}, 1, idx, ""},
        {"4-bit grey, unscaled", {grey4.begin(), grey4.end()}, 1, idx, ""},
        {"1-bit grey: 0 and 1, not 255", {grey1.begin(), grey1.end()}, 1, binary, ""},
        {"truncated palette", {pal8.begin(), pal8.begin() + 60}, 0, {}, "cannot decode"},
#else
        {"palette without libpng", {pal8.begin(), pal8.end()}, 0, {}, "palette PNG"},
        {"1-bit grey without libpng", {grey1.begin(), grey1.end()}, 0, {}, "grey PNG of 1 bits"},
#endif
        {"RGB PNG", bytes_of(rgb), 0, {}, "mask is RGB (3 channels): expected one channel"},
        {"RGBA PNG", bytes_of(rgba), 0, {}, "mask is RGBA (4 channels)"},
        {"colour JPEG", bytes_of(jpeg), 0, {}, "mask is RGB (3 channels)"},
        {"garbage", {1, 2, 3, 4, 5}, 0, {}, "cannot decode"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.what);
      std::vector<uint8_t> out;
      uint32_t hh = 0, ww = 0, eb = 0;
      std::string reason;
      const bool ok =
          dscache::decode_mask(c.bytes.data(), c.bytes.size(), &out, &hh, &ww, &eb, &reason);
      CAPTURE(reason);
      REQUIRE(ok == (c.element_bytes != 0));
      if (!ok) {
        CHECK(reason.find(c.reason) != std::string::npos);
        continue;
      }
      CHECK(hh == h);
      CHECK(ww == w);
      CHECK(eb == c.element_bytes);
      CHECK(out == c.expect);
    }
  }
#ifdef DSCACHE_TEST_HAVE_LIBPNG
  TEST_CASE("decode_mask reads a VOC-style palette PNG written by PIL as its indices") {
    TempDir tmp;
    // PIL's "P" mode: what VOC's SegmentationClass masks are (255 = the border class).
    REQUIRE(dscache::test::run_python(tmp, R"(
import sys
from PIL import Image
im = Image.new("P", (11, 6))
im.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [224, 224, 192] * 253)
im.putdata([255 if x == 0 else (x + y) % 3 for y in range(6) for x in range(11)])
im.save(sys.argv[1])
)",
                                      tmp.file("voc.png")) == 0);
    const std::string png = dscache::test::read_all(tmp.file("voc.png"));
    std::vector<uint8_t> out;
    uint32_t hh = 0, ww = 0, eb = 0;
    std::string reason;
    REQUIRE(dscache::decode_mask(reinterpret_cast<const uint8_t*>(png.data()), png.size(), &out,
                                 &hh, &ww, &eb, &reason));
    CHECK(hh == 6);
    CHECK(ww == 11);
    CHECK(eb == 1);
    REQUIRE(out.size() == 66);
    for (uint32_t y = 0; y < 6; ++y) {
      for (uint32_t x = 0; x < 11; ++x) CHECK(out[y * 11 + x] == (x == 0 ? 255 : (x + y) % 3));
    }
  }
#endif
}
