// curves.png: nice ticks, tick labels, the chart's pixels, the PNG bytes (decoded here with
// zlib) and the run history read back from metrics.jsonl. No LibTorch: builds in seconds.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "bitmap_font.h"
#include "curves.h"
#include "dscache/error.h"

namespace {

using namespace dscache::train;
using dscache::Error;
using dscache::ErrorKind;
using dscache::test::TempDir;

constexpr Rgb kRed{255, 0, 0};
constexpr Rgb kBlue{0, 0, 255};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

// A PNG decoder for what encode_png writes (8-bit RGB, filter 0): checks the signature, every
// chunk's CRC and the order IHDR, IDAT..., IEND; fails the test otherwise.
Raster decode_png(const std::string& png) {
  REQUIRE(png.size() > 8);
  REQUIRE(png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
  size_t at = 8;
  int w = 0, h = 0;
  std::string idat;
  std::vector<std::string> types;
  while (at < png.size()) {
    REQUIRE(at + 12 <= png.size());
    const uint32_t len = be32(png, at);
    REQUIRE(at + 12 + len <= png.size());
    const std::string type = png.substr(at + 4, 4);
    const std::string data = png.substr(at + 8, len);
    const auto* p = reinterpret_cast<const Bytef*>(png.data() + at + 4);
    CHECK(be32(png, at + 8 + len) == ::crc32(::crc32(0L, Z_NULL, 0), p, 4 + len));
    types.push_back(type);
    if (type == "IHDR") {
      REQUIRE(len == 13);
      w = static_cast<int>(be32(data, 0));
      h = static_cast<int>(be32(data, 4));
      CHECK(data.substr(8) == std::string("\x08\x02\x00\x00\x00", 5));
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + len;
  }
  REQUIRE(types.size() >= 3);
  CHECK(types.front() == "IHDR");
  CHECK(types.back() == "IEND");
  REQUIRE(w > 0);
  REQUIRE(h > 0);
  const size_t row = static_cast<size_t>(w) * 3 + 1;
  std::string raw(row * h, '\0');
  uLongf raw_size = static_cast<uLongf>(raw.size());
  REQUIRE(::uncompress(reinterpret_cast<Bytef*>(&raw[0]), &raw_size,
                       reinterpret_cast<const Bytef*>(idat.data()),
                       static_cast<uLong>(idat.size())) == Z_OK);
  REQUIRE(raw_size == raw.size());
  Raster out(w, h, {});
  for (int y = 0; y < h; ++y) {
    REQUIRE(raw[row * y] == 0);  // filter: none
    for (int x = 0; x < w; ++x) {
      const size_t i = row * y + 1 + 3 * x;
      out.set(x, y, {uint8_t(raw[i]), uint8_t(raw[i + 1]), uint8_t(raw[i + 2])});
    }
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The pixels of exactly `c` inside `a`.
struct Hits {
  int count = 0;
  int min_x = INT32_MAX, max_x = -1;
  int y_at_min_x = -1, y_at_max_x = -1;
  int count_in_columns(int x0, int x1) const {
    int n = 0;
    for (const auto& p : points)
      if (p.first >= x0 && p.first < x1) ++n;
    return n;
  }
  std::vector<std::pair<int, int>> points;
};
Hits find(const Raster& pic, const PlotArea& a, Rgb c) {
  Hits h;
  for (int y = a.top; y < a.bottom; ++y) {
    for (int x = a.left; x < a.right; ++x) {
      if (pic.at(x, y) != c) continue;
      ++h.count;
      h.points.push_back({x, y});
      if (x < h.min_x) h.min_x = x, h.y_at_min_x = y;
      if (x > h.max_x) h.max_x = x, h.y_at_max_x = y;
    }
  }
  return h;
}

CurveSeries line(Rgb c, std::vector<CurvePoint> pts, bool markers = false) {
  return {"series", c, markers, std::move(pts)};
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("nice_ticks: 1-2-5 steps covering the range") {
    struct Case {
      double lo, hi;
      int target;
      double first, last, step;
    };
    const Case cases[] = {
        {0, 1, 5, 0, 1, 0.2},
        {0.78, 0.92, 5, 0.78, 0.92, 0.02},
        {0, 4690, 6, 0, 5000, 1000},
        {0.21, 1.03, 5, 0.2, 1.2, 0.2},
        {-3, 7, 5, -4, 8, 2},
        {3, 3, 5, 2.85, 3.15, 0.05},
        {0, 0, 5, -0.6, 0.6, 0.2},
        {kNaN, 1, 5, 0, 1, 0.2},
        {1e-4, 5e-4, 4, 1e-4, 5e-4, 1e-4},
    };
    for (const Case& c : cases) {
      CAPTURE(c.lo);
      CAPTURE(c.hi);
      const std::vector<double> t = nice_ticks(c.lo, c.hi, c.target);
      REQUIRE(t.size() >= 2);
      CHECK(t.front() == doctest::Approx(c.first));
      CHECK(t.back() == doctest::Approx(c.last));
      CHECK(t[1] - t[0] == doctest::Approx(c.step));
    }
  }

  TEST_CASE("tick_label: the step's decimals, k and M, never -0") {
    struct Case {
      double value, step;
      const char* text;
    };
    const Case cases[] = {{0, 1000, "0"},       {2000, 1000, "2k"},   {3e6, 1e6, "3M"},
                          {0.05, 0.05, "0.05"}, {0.8, 0.2, "0.8"},    {1.2, 0.2, "1.2"},
                          {-1e-17, 0.1, "0"},   {0.78, 0.02, "0.78"}, {500, 100, "500"},
                          {-4, 2, "-4"}};
    for (const Case& c : cases) CHECK(tick_label(c.value, c.step) == c.text);
  }

  TEST_CASE("the PNG decodes to the raster, its size and every pixel") {
    CurvePanel p{"loss", "step", "loss", {line(kRed, {{0, 1}, {10, 0.5}, {20, 0.2}})}};
    const ChartOptions o{640, 300, 1, 2};
    const Raster pic = render_chart({p, p}, o);
    const Raster back = decode_png(encode_png(pic));
    CHECK(back.width() == 640);
    CHECK(back.height() == 300);
    CHECK(back.bytes() == pic.bytes());
  }

  TEST_CASE("a rising series ends top-right of its panel, a falling one bottom-right") {
    std::vector<CurvePoint> rising, falling;
    for (int i = 0; i <= 100; ++i) {
      rising.push_back({i * 10.0, 0.5 + 0.4 * i / 100});
      falling.push_back({i * 10.0, 2.0 - 1.5 * i / 100});
    }
    const ChartOptions o;
    const Raster pic = decode_png(encode_png(render_chart(
        {{"a", "step", "y", {line(kRed, rising)}}, {"b", "step", "y", {line(kBlue, falling)}}},
        o)));
    for (size_t panel = 0; panel < 2; ++panel) {
      CAPTURE(panel);
      const PlotArea a = plot_area(o, 2, panel);
      const Hits h = find(pic, a, panel == 0 ? kRed : kBlue);
      const Hits other = find(pic, a, panel == 0 ? kBlue : kRed);
      CHECK(other.count == 0);  // each series in its own panel
      REQUIRE(h.count > 0);
      const int w = a.right - a.left, ht = a.bottom - a.top;
      CHECK(h.min_x < a.left + w / 20);  // x from 0 to 1000 spans the axis
      CHECK(h.max_x > a.right - w / 20);
      const int top_tenth = a.top + ht / 10, bottom_tenth = a.bottom - ht / 10;
      if (panel == 0) {
        CHECK(h.y_at_max_x < top_tenth);
        CHECK(h.y_at_min_x > bottom_tenth);
      } else {
        CHECK(h.y_at_max_x > bottom_tenth);
        CHECK(h.y_at_min_x < top_tenth);
      }
    }
  }

  TEST_CASE("empty, one-point, NaN-only and NaN-broken series draw what they can") {
    const ChartOptions o;
    const PlotArea a = plot_area(o, 1, 0);
    SUBCASE("no panels, no series, no points") {
      CHECK(render_chart({}, o).width() == o.width);
      const Raster pic = render_chart({{"t", "x", "y", {}}, {"t", "x", "y", {line(kRed, {})}}}, o);
      CHECK(find(pic, plot_area(o, 2, 1), kRed).count == 0);
    }
    SUBCASE("one point: a dot") {
      const Raster pic = render_chart({{"t", "x", "y", {line(kRed, {{5, 2}})}}}, o);
      const Hits h = find(pic, a, kRed);
      CHECK(h.count > 0);
      CHECK(h.max_x - h.min_x <= 4);
    }
    SUBCASE("only NaN and infinities: nothing") {
      const double inf = std::numeric_limits<double>::infinity();
      const Raster pic =
          render_chart({{"t", "x", "y", {line(kRed, {{0, kNaN}, {1, inf}, {kNaN, 1}})}}}, o);
      CHECK(find(pic, a, kRed).count == 0);
    }
    SUBCASE("a NaN in the middle breaks the line") {
      const Raster pic =
          render_chart({{"t", "x", "y", {line(kRed, {{0, 1}, {50, kNaN}, {100, 2}})}}}, o);
      const Hits h = find(pic, a, kRed);
      CHECK(h.count > 0);
      const int mid = (a.left + a.right) / 2;
      CHECK(h.count_in_columns(mid - 50, mid + 50) == 0);  // no segment across the gap
      CHECK(h.count_in_columns(a.left, a.left + 10) > 0);  // the two points, as dots
      CHECK(h.count_in_columns(a.right - 10, a.right) > 0);
    }
  }

  TEST_CASE("write_png: a regular file, atomically; errors name the file") {
    TempDir dir;
    const Raster pic = render_chart({{"t", "x", "y", {line(kRed, {{0, 0}, {1, 1}})}}});
    const std::string path = dir.file("curves.png");
    write_png(path, pic);
    write_png(path, pic);  // over the previous one
    CHECK(decode_png(read_file(path)).bytes() == pic.bytes());
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      (void)e;
      ++entries;
    }
    CHECK(entries == 1);  // no temp file left

    struct Case {
      std::string path;
      ErrorKind kind;
    };
    std::filesystem::create_directory(dir.file("a_dir.png"));
    REQUIRE(::mkfifo(dir.file("fifo.png").c_str(), 0600) == 0);
    const Case cases[] = {{dir.file("a_dir.png"), ErrorKind::kInvalidArgument},
                          {dir.file("fifo.png"), ErrorKind::kInvalidArgument},
                          {dir.file("missing/curves.png"), ErrorKind::kIOError}};
    for (const Case& c : cases) {
      CAPTURE(c.path);
      try {
        write_png(c.path, pic);
        FAIL("written");
      } catch (const Error& e) {
        CHECK(e.kind() == c.kind);
        CHECK(std::string(e.what()).find(c.path) != std::string::npos);
      }
    }
  }

  TEST_CASE("TrainingCurves: a metrics.jsonl read back, drawn into curves.png") {
    TempDir dir;
    const std::string metrics = dir.file("metrics.jsonl");
    {
      std::ofstream out(metrics);
      out << R"({"kind":"step","step":50,"epoch":0,"loss":2.1,"lr":0.1})"
          << "\n"
          << R"({"kind":"step","step":100,"epoch":0,"loss":null,"lr":0.1})"
          << "\n"
          << "not json\n"
          << R"({"kind":"epoch","epoch":0,"step":117,"loss":1.5,"train_acc":0.6,)"
          << R"("val_loss":1.2,"val_acc":0.7})"
          << "\n"
          << R"({"kind":"resume","step":117})"
          << "\n"
          << R"({"kind":"step","step":150,"epoch":1,"loss":0.9,"lr":0.1})"
          << "\n";
    }
    TrainingCurves curves;
    CHECK(curves.load(metrics) == 1);
    curves.add({{"kind", "epoch"},
                {"epoch", 1},
                {"step", 234},
                {"loss", 0.8},
                {"train_acc", 0.8},
                {"val_loss", 0.9},
                {"val_acc", 0.75}});
    const std::vector<CurvePanel> panels = curves.panels();
    REQUIRE(panels.size() == 2);
    REQUIRE(panels[0].series.size() == 3);
    CHECK(panels[0].series[0].label == "train/50 steps");
    REQUIRE(panels[0].series[0].points.size() == 3);
    CHECK(std::isnan(panels[0].series[0].points[1].y));  // null loss
    CHECK(panels[0].series[0].points[2].x == 150);
    CHECK(panels[0].series[1].label == "train/epoch");
    CHECK(panels[0].series[1].points.size() == 2);
    CHECK(panels[0].series[2].label == "val/epoch");
    CHECK(panels[0].series[2].points.size() == 2);
    REQUIRE(panels[1].series.size() == 2);
    CHECK(panels[1].series[1].label == "val acc");
    CHECK(panels[1].series[1].points[1].y == 0.75);

    const std::string png = dir.file("curves.png");
    curves.draw(png);
    const Raster pic = decode_png(read_file(png));
    CHECK(pic.width() == ChartOptions{}.width);
    CHECK(pic.height() == ChartOptions{}.height);

    SUBCASE("without validation or step lines: the epochs' train loss, no val series") {
      TrainingCurves bare;
      bare.add({{"kind", "epoch"},
                {"epoch", 0},
                {"step", 10},
                {"loss", 1.0},
                {"train_acc", 0.5},
                {"val_loss", nullptr},
                {"val_acc", nullptr}});
      const std::vector<CurvePanel> p = bare.panels();
      REQUIRE(p[0].series.size() == 1);
      CHECK(p[0].series[0].markers);
      CHECK(p[0].series[0].points.size() == 1);
      CHECK(p[1].series.size() == 1);
    }
    SUBCASE("a missing metrics.jsonl is an error naming it") {
      CHECK_THROWS_WITH_AS(curves.load(dir.file("none.jsonl")), doctest::Contains("none.jsonl"),
                           Error);
    }
  }

  TEST_CASE("TrainingCurves: every run draws the same series, each legend says what it averages") {
    using nlohmann::json;
    const auto epoch = [](int step, json extra) {
      json line = {{"kind", "epoch"}, {"epoch", 0}, {"step", step}, {"loss", 1.5}};
      line.update(extra);
      return line;
    };
    const auto labels = [](const CurvePanel& p) {
      std::vector<std::string> out;
      for (const auto& ser : p.series) out.push_back(ser.label);
      return out;
    };
    // --log-every 50: a 48-step run logs no step line, a 60-step run one. Both draw the epoch's
    // train loss, named so; the 60-step run adds its one step line, named by what it averages.
    TrainingCurves short_run, long_run;
    short_run.add(epoch(48, {{"train_acc", 0.5}}));
    long_run.add({{"kind", "step"}, {"step", 50}, {"loss", 1.7}});
    long_run.add(epoch(60, {{"train_acc", 0.5}}));
    const auto s = short_run.panels(), l = long_run.panels();
    CHECK(labels(s[0]) == std::vector<std::string>{"train/epoch"});
    CHECK(labels(l[0]) == std::vector<std::string>{"train/50 steps", "train/epoch"});
    for (const CurvePanel* p : {&s[0], &l[0]}) {
      const CurveSeries& train = p->series.back();
      CHECK(train.markers);
      REQUIRE(train.points.size() == 1);
      CHECK(train.points[0].y == 1.5);
    }
    // The right panel: train and val of one metric, never two metrics side by side.
    struct Case {
      json line;
      std::string title;
      std::vector<std::string> legend;
    };
    const Case cases[] = {
        {{{"train_pixel_acc", 0.8}, {"val_pixel_acc", 0.7}, {"val_miou", 0.31}},  // segment
         "pixel accuracy",
         {"train pixel acc", "val pixel acc"}},
        {{{"train_acc", 0.5}, {"val_acc", 0.4}, {"val_map", 0.93}},  // multilabel
         "accuracy",
         {"train acc", "val acc"}},
        {{{"train_acc", nullptr}, {"val_acc", nullptr}, {"val_r2", 0.6}}, "R^2", {"val R^2"}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.title);
      TrainingCurves curves;
      curves.add(epoch(10, c.line));
      const CurvePanel right = curves.panels()[1];
      CHECK(right.title == c.title);
      CHECK(labels(right) == c.legend);
      for (const auto& ser : right.series) CHECK(ser.points[0].y != 0.31);  // no mIoU
      for (const auto& ser : right.series) CHECK(ser.points[0].y != 0.93);  // no mAP
    }
    // Three loss series fit the legend row of a panel (draw_panel leaves out what does not).
    TrainingCurves wide;
    wide.add({{"kind", "step"}, {"step", 100000}, {"loss", 1.0}});
    wide.add(epoch(100000, {{"val_loss", 1.1}}));
    const ChartOptions o;
    const PlotArea a = plot_area(o, 2, 0);
    int width = 0;
    const std::vector<CurvePanel> wide_panels = wide.panels();
    for (const auto& ser : wide_panels[0].series) {
      width += 12 * o.text_scale + 3 * o.text_scale + text_width(ser.label, o.text_scale) +
               8 * o.text_scale;
    }
    CHECK(wide_panels[0].series.size() == 3);
    CHECK(width - 8 * o.text_scale <= a.right + 12 * o.text_scale - a.left);
  }
}
