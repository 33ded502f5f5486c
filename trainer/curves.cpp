// Line charts of a run's metrics, and the run history they are drawn from.
#include "curves.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "bitmap_font.h"
#include "safety.h"

namespace dscache {
namespace train {

namespace {

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kText{30, 30, 30};
constexpr Rgb kFrame{90, 90, 90};
constexpr Rgb kGrid{228, 228, 228};
constexpr Rgb kTrainColour{31, 119, 180};       // blue: training
constexpr Rgb kTrainStepColour{140, 185, 225};  // light blue: training, per logged steps
constexpr Rgb kValColour{240, 110, 0};          // orange: validation
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// Pixel centres are at integer coordinates. Coverage falls off over the last half pixel on
// each side, so a 2 px line is one solid pixel wide (the exact colour) plus a soft edge.
void draw_segment(Raster* pic, double x0, double y0, double x1, double y1, Rgb c, double width,
                  const PlotArea& clip) {
  const double hw = width / 2;
  const int bx0 = std::max(clip.left, static_cast<int>(std::floor(std::min(x0, x1) - hw - 1)));
  const int bx1 = std::min(clip.right - 1, static_cast<int>(std::ceil(std::max(x0, x1) + hw + 1)));
  const int by0 = std::max(clip.top, static_cast<int>(std::floor(std::min(y0, y1) - hw - 1)));
  const int by1 = std::min(clip.bottom - 1, static_cast<int>(std::ceil(std::max(y0, y1) + hw + 1)));
  const double dx = x1 - x0;
  const double dy = y1 - y0;
  const double len2 = dx * dx + dy * dy;
  for (int y = by0; y <= by1; ++y) {
    for (int x = bx0; x <= bx1; ++x) {
      double t = len2 > 0 ? ((x - x0) * dx + (y - y0) * dy) / len2 : 0;
      t = std::min(1.0, std::max(0.0, t));
      const double d = std::hypot(x - (x0 + t * dx), y - (y0 + t * dy));
      pic->blend(x, y, c, std::min(1.0, hw + 0.5 - d));
    }
  }
}

void draw_dot(Raster* pic, double x, double y, Rgb c, double radius, const PlotArea& clip) {
  draw_segment(pic, x, y, x, y, c, 2 * radius, clip);
}

int text_height(int scale) { return kGlyphHeight * scale; }  // descenders included

// Right edge of the y-axis tick labels and the other margins, in font pixels x scale.
struct Margins {
  int left, top, right, bottom;
};
Margins margins(int s) {
  // left: edge gap, y title, gap, six characters of tick label, gap to the axis.
  return {8 + text_height(s) + 6 * s + 6 * kGlyphAdvance * s + 4 * s,
          // top: gap, title (one scale larger), gap, legend, gap.
          5 * s + text_height(s + 1) + 5 * s + text_height(s) + 6 * s, 12 * s,
          // bottom: tick, gap, tick labels, gap, x title, gap.
          4 * s + 3 * s + text_height(s) + 5 * s + text_height(s) + 8 * s};
}

void draw_panel(Raster* pic, const CurvePanel& panel, const PlotArea& a,
                const std::vector<double>& xt, const ChartOptions& o) {
  const int s = o.text_scale;
  const int th = text_height(s);
  const int panel_left = a.left - margins(s).left;
  const int panel_right = a.right + margins(s).right;

  Range yr;
  for (const auto& ser : panel.series) {
    for (const auto& p : ser.points) {
      if (std::isfinite(p.x)) yr.add(p.y);
    }
  }
  const bool no_data = yr.empty();
  const std::vector<double> yt = no_data ? nice_ticks(0, 1, 5) : nice_ticks(yr.lo, yr.hi, 5);
  const double xlo = xt.front(), xhi = xt.back(), ylo = yt.front(), yhi = yt.back();
  const auto px = [&](double x) {
    return a.left + (x - xlo) / (xhi - xlo) * (a.right - 1 - a.left);
  };
  const auto py = [&](double y) {
    return (a.bottom - 1) - (y - ylo) / (yhi - ylo) * (a.bottom - 1 - a.top);
  };

  // Grid, frame, ticks and their labels.
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  int widest_x = 0;
  for (double v : xt) widest_x = std::max(widest_x, text_width(tick_label(v, xstep), s));
  const double x_spacing = xt.size() > 1 ? px(xt[1]) - px(xt[0]) : 1e9;
  const size_t x_every = x_spacing >= widest_x + 4 * s ? 1 : 2;  // labels that would touch
  for (size_t i = 0; i < xt.size(); ++i) {
    const int x = static_cast<int>(std::lround(px(xt[i])));
    pic->fill_rect(x, a.top, x + 1, a.bottom, kGrid);
    pic->fill_rect(x, a.bottom, x + 1, a.bottom + 4 * s, kFrame);
    if (i % x_every) continue;
    const std::string label = tick_label(xt[i], xstep);
    draw_text(pic, x - text_width(label, s) / 2 + s / 2, a.bottom + 4 * s + 3 * s, label, kText, s);
  }
  for (double v : yt) {
    const int y = static_cast<int>(std::lround(py(v)));
    pic->fill_rect(a.left, y, a.right, y + 1, kGrid);
    pic->fill_rect(a.left - 4 * s, y, a.left, y + 1, kFrame);
    const std::string label = tick_label(v, ystep);
    draw_text(pic, a.left - 4 * s - 2 * s - text_width(label, s) + s, y - 7 * s / 2, label, kText,
              s);  // digits: 7 rows
  }
  pic->fill_rect(a.left, a.top, a.right, a.top + 1, kFrame);
  pic->fill_rect(a.left, a.bottom - 1, a.right, a.bottom, kFrame);
  pic->fill_rect(a.left, a.top, a.left + 1, a.bottom, kFrame);
  pic->fill_rect(a.right - 1, a.top, a.right, a.bottom, kFrame);

  // Titles.
  const int centre_x = (a.left + a.right) / 2;
  draw_text(pic, centre_x - text_width(panel.title, s + 1) / 2, 5 * s, panel.title, kText, s + 1);
  draw_text(pic, centre_x - text_width(panel.x_title, s) / 2, a.bottom + 4 * s + 3 * s + th + 5 * s,
            panel.x_title, kText, s);
  draw_text_up(pic, panel_left + 8, (a.top + a.bottom) / 2 + text_width(panel.y_title, s) / 2,
               panel.y_title, kText, s);
  if (no_data) {
    const std::string msg = "no data yet";
    draw_text(pic, centre_x - text_width(msg, s) / 2, (a.top + a.bottom - th) / 2, msg, kFrame, s);
  }

  // Legend, one row between the title and the plot: a line (and dot) of each colour, its label.
  int lx = a.left;
  const int ly = 5 * s + text_height(s + 1) + 5 * s;
  const PlotArea whole{0, 0, pic->width(), pic->height()};
  for (const auto& ser : panel.series) {
    const int swatch = 12 * s;
    if (lx + swatch + 3 * s + text_width(ser.label, s) > panel_right) break;
    const double mid = ly + th / 2.0 - 0.5;
    draw_segment(pic, lx, mid, lx + swatch, mid, ser.colour, o.line_width, whole);
    if (ser.markers) draw_dot(pic, lx + swatch / 2.0, mid, ser.colour, o.line_width + 1.5, whole);
    lx += swatch + 3 * s;
    draw_text(pic, lx, ly, ser.label, kText, s);
    lx += text_width(ser.label, s) + 8 * s;
  }

  // The data, inside the frame.
  const PlotArea inside{a.left + 1, a.top + 1, a.right - 1, a.bottom - 1};
  for (const auto& ser : panel.series) {
    const auto& pts = ser.points;
    const auto ok = [&](size_t i) {
      return i < pts.size() && std::isfinite(pts[i].x) && std::isfinite(pts[i].y);
    };
    for (size_t i = 0; i < pts.size(); ++i) {
      if (!ok(i)) continue;
      if (ok(i + 1)) {
        draw_segment(pic, px(pts[i].x), py(pts[i].y), px(pts[i + 1].x), py(pts[i + 1].y),
                     ser.colour, o.line_width, inside);
      }
      const bool alone = !ok(i + 1) && (i == 0 || !ok(i - 1));
      if (ser.markers || alone) {
        draw_dot(pic, px(pts[i].x), py(pts[i].y), ser.colour,
                 ser.markers ? o.line_width + 1.5 : o.line_width, inside);
      }
    }
  }
}

double number_or_nan(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  return it != line.end() && it->is_number() ? it->get<double>() : kNaN;
}

bool any_finite(const std::vector<CurvePoint>& pts) {
  return std::any_of(pts.begin(), pts.end(),
                     [](const CurvePoint& p) { return std::isfinite(p.x) && std::isfinite(p.y); });
}

}  // namespace

// The right panel's metric, in order of preference: the first whose train or val values an
// epoch line has. Train and val of one metric side by side, never two metrics.
const TrainingCurves::MetricPair TrainingCurves::kMetricPairs[3] = {
    // segment: per labelled pixel
    {"train_pixel_acc", "val_pixel_acc", "pixel accuracy", "train pixel acc", "val pixel acc"},
    // classify: argmax; multilabel: every output right (exact match)
    {"train_acc", "val_acc", "accuracy", "train acc", "val acc"},
    // regress: no train counterpart is measured
    {nullptr, "val_r2", "R^2", nullptr, "val R^2"},
};

PlotArea plot_area(const ChartOptions& o, size_t panels, size_t index) {
  const Margins m = margins(o.text_scale);
  const size_t n = std::max<size_t>(1, panels);
  const int x0 = static_cast<int>(o.width * index / n);
  const int x1 = static_cast<int>(o.width * (index + 1) / n);
  return {x0 + m.left, m.top, x1 - m.right, o.height - m.bottom};
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= std::max(std::fabs(lo), std::fabs(hi)) * 1e-9) {
    const double pad = lo == 0 ? 0.5 : std::fabs(lo) * 0.05;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last; ++k) ticks.push_back(k * step);
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string tick_label(double value, double step) {
  const char* suffix = "";
  if (step >= 1e6) {
    value /= 1e6, step /= 1e6, suffix = "M";
  } else if (step >= 1e3) {
    value /= 1e3, step /= 1e3, suffix = "k";
  }
  if (std::fabs(value) < step * 1e-6) return "0";  // not "-0.0" from rounding, nor "0k"
  const int decimals =
      std::min(8, std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9))));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, value, suffix);
  return buf;
}

Raster render_chart(const std::vector<CurvePanel>& panels, const ChartOptions& o) {
  Raster pic(o.width, o.height, kWhite);
  Range xr;
  for (const auto& panel : panels) {
    for (const auto& ser : panel.series) {
      for (const auto& p : ser.points) {
        if (std::isfinite(p.y)) xr.add(p.x);
      }
    }
  }
  // Steps start at 0; a single step still gets a range.
  const std::vector<double> xt =
      xr.empty() ? nice_ticks(0, 1, 6) : nice_ticks(std::min(0.0, xr.lo), xr.hi, 6);
  for (size_t i = 0; i < panels.size(); ++i) {
    const PlotArea a = plot_area(o, panels.size(), i);
    if (a.right - a.left < 8 || a.bottom - a.top < 8) continue;  // too small to draw in
    draw_panel(&pic, panels[i], a, xt, o);
  }
  return pic;
}

void TrainingCurves::add(const nlohmann::json& line) {
  if (!line.is_object()) return;
  const auto kind = line.find("kind");
  if (kind == line.end() || !kind->is_string()) return;
  const double step = number_or_nan(line, "step");
  if (*kind == "step") {
    step_loss_.push_back({step, number_or_nan(line, "loss")});
  } else if (*kind == "epoch") {
    epoch_loss_.push_back({step, number_or_nan(line, "loss")});
    val_loss_.push_back({step, number_or_nan(line, "val_loss")});
    for (const MetricPair& m : kMetricPairs) {
      for (const char* key : {m.train_key, m.val_key}) {
        if (key) metrics_[key].push_back({step, number_or_nan(line, key)});
      }
    }
  }
}

size_t TrainingCurves::load(const std::string& metrics_path) {
  std::istringstream in(trainer_read_regular_file(metrics_path, "metrics log"));
  size_t skipped = 0;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object()) {
      ++skipped;
      continue;
    }
    add(line);
  }
  return skipped;
}

std::string TrainingCurves::step_loss_label() const {
  // The steps between step lines (--log-every): the smallest gap, or the first line's step.
  double every = 0;
  for (size_t i = 0; i < step_loss_.size(); ++i) {
    const double gap = i ? step_loss_[i].x - step_loss_[i - 1].x : step_loss_[i].x;
    if (std::isfinite(gap) && gap > 0 && (every == 0 || gap < every)) every = gap;
  }
  if (every <= 0) return "train/logged steps";
  char text[48];
  std::snprintf(text, sizeof text, "train/%.0f step%s", every, every == 1 ? "" : "s");
  return text;
}

std::vector<CurvePanel> TrainingCurves::panels() const {
  // Loss: the same series for every run, named by what each point averages. The train loss per
  // epoch is always drawn (beside the val loss, also per epoch); the step lines' loss, each the
  // mean since the previous one, as a thinner line when there are any.
  CurvePanel loss{"loss", "step", "loss", {}};
  if (!step_loss_.empty()) {
    loss.series.push_back({step_loss_label(), kTrainStepColour, false, step_loss_});
  }
  loss.series.push_back({"train/epoch", kTrainColour, true, epoch_loss_});
  if (any_finite(val_loss_)) loss.series.push_back({"val/epoch", kValColour, true, val_loss_});
  // The task's metric: train and val of the same metric, the first pair the epoch lines have.
  const MetricPair* pick = nullptr;
  for (const MetricPair& m : kMetricPairs) {
    for (const char* key : {m.train_key, m.val_key}) {
      const auto it = key ? metrics_.find(key) : metrics_.end();
      if (!pick && it != metrics_.end() && any_finite(it->second)) pick = &m;
    }
  }
  if (!pick) pick = &kMetricPairs[1];  // accuracy: the classifier's, drawn empty so far
  CurvePanel metric{pick->title, "step", pick->title, {}};
  const auto series = [&](const char* key, const char* label, Rgb colour) {
    const auto it = key ? metrics_.find(key) : metrics_.end();
    if (it != metrics_.end() && any_finite(it->second)) {
      metric.series.push_back({label, colour, true, it->second});
    }
  };
  series(pick->train_key, pick->train_legend, kTrainColour);
  series(pick->val_key, pick->val_legend, kValColour);
  return {loss, metric};
}

void TrainingCurves::draw(const std::string& png_path, const ChartOptions& options) const {
  write_png(png_path, render_chart(panels(), options));
}

}  // namespace train
}  // namespace dscache
