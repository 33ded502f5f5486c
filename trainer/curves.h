// OUTPUT/curves.png: line charts of a run's metrics.jsonl (train/val loss and accuracy against
// the optimizer step), drawn with the trainer's own raster, font and PNG writer (no torch).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "raster.h"

namespace dscache {
namespace train {

struct CurvePoint {
  double x = 0;  // optimizer step
  double y = 0;  // NaN or infinite: not drawn (the line breaks there)
};

struct CurveSeries {
  std::string label;  // in the panel's legend
  Rgb colour;
  bool markers = false;            // a dot on each point (sparse series: one point per epoch)
  std::vector<CurvePoint> points;  // in drawing order
};

struct CurvePanel {
  std::string title;    // above the plot
  std::string x_title;  // under the x axis
  std::string y_title;  // left of the y axis, read bottom to top
  std::vector<CurveSeries> series;
};

struct ChartOptions {
  int width = 1400;    // pixels, all panels side by side; default 1400
  int height = 560;    // pixels; default 560
  int text_scale = 2;  // raster pixels per font pixel (5x7 font); default 2
  int line_width = 2;  // pixels; default 2
};

// Where a panel's data is drawn: [left, right) x [top, bottom) in raster pixels.
struct PlotArea {
  int left = 0;
  int top = 0;
  int right = 0;
  int bottom = 0;
};

// The plot area of panel `index` of `panels` side by side.
PlotArea plot_area(const ChartOptions& options, size_t panels, size_t index);

// Tick values for an axis covering [lo, hi]: multiples of 1, 2 or 5 x 10^k, about `target` of
// them, the first <= lo and the last >= hi (so the axis runs from first to last). A degenerate
// or non-finite range is widened first.
std::vector<double> nice_ticks(double lo, double hi, int target);

// A tick's label: as many decimals as the tick step needs, thousands as "20k", millions "2M".
std::string tick_label(double value, double step);

// The panels side by side on a white picture; every panel shares the x range of all points.
// Empty series, one-point series and NaN values are drawn as far as they go (an empty panel
// keeps its axes).
Raster render_chart(const std::vector<CurvePanel>& panels, const ChartOptions& options = {});

// A run's history as drawn in curves.png, from its metrics.jsonl lines ("step" and "epoch"; null
// = NaN), each against the line's "step". Not thread-safe; the run's rank 0 keeps one.
class TrainingCurves {
 public:
  // One metrics.jsonl line; kinds other than "step" and "epoch" are ignored.
  void add(const nlohmann::json& line);
  // Adds each line of a metrics.jsonl (a resumed run's history up to its checkpoint, which
  // MetricsLog::open has cut the file back to). Returns how many lines were not JSON objects
  // (skipped). Throws dscache::Error naming the file when it cannot be read.
  size_t load(const std::string& metrics_path);
  // The same series for every run, each legend saying what a point averages. Left, loss:
  // "train/N steps" (the step lines', each the mean over the N steps since the previous one;
  // only when there are step lines), "train/epoch" and "val/epoch" (per epoch). Right, train and
  // val of one metric: pixel accuracy (segment), accuracy (classify; multilabel: every output
  // right), or val R^2 alone (regress).
  std::vector<CurvePanel> panels() const;
  // render_chart(panels()) written to `png_path` atomically (write_png).
  void draw(const std::string& png_path, const ChartOptions& options = {}) const;

 private:
  struct MetricPair {
    const char* train_key;  // the epoch line's key; null: none is measured
    const char* val_key;
    const char* title;
    const char* train_legend;
    const char* val_legend;
  };
  static const MetricPair kMetricPairs[3];
  std::string step_loss_label() const;  // "train/50 steps"

  std::vector<CurvePoint> step_loss_;
  std::vector<CurvePoint> epoch_loss_;
  std::vector<CurvePoint> val_loss_;
  std::map<std::string, std::vector<CurvePoint>> metrics_;  // kMetricPairs' keys, per epoch
};

}  // namespace train
}  // namespace dscache
