// The progress line: its text (pure functions) and its drawing on stderr.
#include "progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "terminal.h"

namespace dscache {
namespace train {

namespace {

constexpr int kBarMax = 30;  // cells of the bar when there is room
constexpr int kBarMin = 10;  // below this the bar is dropped

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string bar(uint64_t done, uint64_t total, int cells) {
  const double frac = total ? std::min(1.0, static_cast<double>(done) / total) : 0.0;
  const int filled = static_cast<int>(frac * cells);
  return " [" + std::string(filled, '#') + std::string(cells - filled, '.') + "]";
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long long t = std::llround(seconds);
  char buf[48];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  }
  return buf;
}

std::string format_progress(const ProgressView& v, int columns) {
  const size_t width = static_cast<size_t>(std::max(1, columns - 1));
  const std::string head = "epoch " + std::to_string(v.epoch + 1) + "/" + std::to_string(v.epochs);
  const std::string count = "  " + std::to_string(v.batch) + "/" + std::to_string(v.batches);
  std::string rate = std::isfinite(v.rate) && v.rate > 0 ? printf_string("%.0f", v.rate) : "--";
  rate = "  " + rate + " samples/s";
  const std::string loss = "  loss " + printf_string("%.4g", v.loss);
  const std::string lr = "  lr " + printf_string("%.3g", v.lr);
  const std::string eta = "  ETA " + format_duration(v.epoch_eta);
  const std::string run = " (run " + format_duration(v.run_eta) + ")";
  // What is kept, in the order it is given up: rate, lr, run (the bar is sized last).
  bool keep_rate = true, keep_lr = true, keep_run = true;
  auto text_length = [&] {
    return head.size() + count.size() + (keep_rate ? rate.size() : 0) + loss.size() +
           (keep_lr ? lr.size() : 0) + eta.size() + (keep_run ? run.size() : 0);
  };
  // The bar's room: " [" + cells + "]".
  if (text_length() + 3 + kBarMin <= width) {
    const int cells = static_cast<int>(std::min<size_t>(kBarMax, width - text_length() - 3));
    return head + bar(v.batch, v.batches, cells) + count + rate + loss + lr + eta + run;
  }
  for (bool* keep : {&keep_run, &keep_lr, &keep_rate}) {
    if (text_length() <= width) break;
    *keep = false;
  }
  std::string line = head + count + (keep_rate ? rate : "") + loss + (keep_lr ? lr : "") + eta +
                     (keep_run ? run : "");
  if (line.size() > width) line.resize(width);
  return line;
}

Eta estimate_eta(const EtaInput& in) {
  Eta e;
  if (!std::isfinite(in.seconds_per_batch) || in.seconds_per_batch <= 0) return e;
  // --max-steps may end the run, and so this epoch, before the epoch's last batch
  const uint64_t epoch_left =
      std::min(in.batches > in.batch ? in.batches - in.batch : 0, in.run_batches_left);
  e.epoch = epoch_left * in.seconds_per_batch;
  e.run = in.run_batches_left * in.seconds_per_batch;
  if (in.val_seconds > 0 && in.batches > 0) {
    // this epoch's pass, and one per later epoch the run reaches
    const uint64_t later = in.run_batches_left > epoch_left ? in.run_batches_left - epoch_left : 0;
    const uint64_t passes = 1 + (later + in.batches - 1) / in.batches;
    e.run += passes * in.val_seconds;
  }
  return e;
}

ProgressLine::ProgressLine(ProgressMode mode, uint32_t epochs)
    : enabled_(mode == ProgressMode::kAlways ||
               (mode == ProgressMode::kAuto && ::isatty(STDERR_FILENO))),
      epochs_(epochs) {}

void ProgressLine::start_epoch(uint64_t first_batch) {
  epoch_start_ = Clock::now();
  epoch_first_batch_ = first_batch;
}

void ProgressLine::show(const Step& s, bool final_line) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (!final_line && now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - epoch_start_).count();
  const uint64_t done = s.batch > epoch_first_batch_ ? s.batch - epoch_first_batch_ : 0;
  const Eta eta = estimate_eta(
      {done ? secs / done : -1.0, s.batch, s.batches, s.run_batches_left, val_seconds_});
  ProgressView v;
  v.epoch = s.epoch;
  v.epochs = epochs_;
  v.batch = s.batch;
  v.batches = s.batches;
  v.rate = s.rate;
  v.loss = s.loss;
  v.lr = s.lr;
  v.epoch_eta = eta.epoch;
  v.run_eta = eta.run;
  std::string text = format_progress(v, stderr_columns());
  const size_t length = text.size();
  if (length < drawn_) text.append(drawn_ - length, ' ');  // over the longer line before
  text = "\r" + text;
  // Open before the write: a signal arriving meanwhile ends the line rather than joining it.
  mark_progress_line_open();
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  drawn_ = length;
  if (final_line) break_line();
}

void ProgressLine::break_line() {
  end_progress_line();
  drawn_ = 0;
}

}  // namespace train
}  // namespace dscache
