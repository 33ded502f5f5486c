// What a run reports: metrics.jsonl lines and the per-epoch summary on stdout (no torch types;
// the progress line is progress_line.h's).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorboard.h"

namespace dscache {
namespace train {

// OUTPUT/metrics.jsonl: one JSON object a line, written with one write(2) each. Counts its
// length, which a checkpoint records so that a resumed run can drop what was logged after it.
// Not thread-safe.
class MetricsLog {
 public:
  MetricsLog() = default;
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // Truncates `path`, or with `resume_bytes` cuts it back to that length and appends. Only a
  // regular file is opened (a FIFO cannot block). Throws dscache::Error naming the file.
  void open(const std::string& path, std::optional<uint64_t> resume_bytes);
  // From now on also writes each line's numbers (tensorboard_scalars) to a new TensorBoard event
  // file in `dir` (EventWriter: created when missing). `purge_from`: a resumed run's first step
  // to come, from which TensorBoard drops what earlier event files logged. Throws
  // dscache::Error naming the directory or the file.
  void open_tensorboard(const std::string& dir, std::optional<int64_t> purge_from);
  // Appends `line`, and its scalars to the event file, each with one write(2); does nothing when
  // not open (no --output, or not rank 0). Throws Error(kIOError) with the system's reason
  // (e.g. "File too large") when a write fails.
  void write(const nlohmann::json& line);
  uint64_t bytes() const { return bytes_; }  // the file's length; 0 before open

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  std::unique_ptr<EventWriter> events_;
};

// The TensorBoard scalars of a metrics.jsonl line: every number but "step" and "epoch" (the
// axis), tagged "train/KEY" for a "step" line, "epoch/KEY" for an "epoch" line and "val/KEY" for
// its val_KEY keys (val/loss, val/acc); nulls and booleans are left out. The step they belong to
// is the line's "step".
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& line);

// Prints an epoch's summary to stdout (and flushes it) from its metrics.jsonl line, after ending
// an open progress line (terminal.h): the kind
// "epoch" object with epoch, loss, val_loss/val_acc (null without validation), seconds,
// samples_per_s, data_wait and skipped_steps.
void print_epoch_summary(const nlohmann::json& line, uint32_t epochs);

}  // namespace train
}  // namespace dscache
