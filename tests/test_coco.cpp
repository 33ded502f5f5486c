// dscache/ingest/coco.h: COCO segmentations rasterised (polygons against an OpenCV fillPoly
// reference, RLE exactly) and RLE strings decoded. Parsing and listing are in test_coco_parse.cpp,
// mask images in test_coco_mask.cpp.
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

#include "coco_fixtures.h"
#include "dscache/error.h"
#include "dscache/ingest/coco.h"
#include "test_util.h"

using dscache::CocoInstances;
using dscache::Error;
using dscache::ErrorKind;
using dscache::test::annotation;
using dscache::test::categories;
using dscache::test::expect_error;
using dscache::test::image;
using dscache::test::TempDir;
using dscache::test::write_all;
using dscache::test::write_json;
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
}
