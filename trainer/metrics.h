// What a run reports: metrics.jsonl lines, the TTY progress line on stderr and the per-epoch
// summary on stdout (no torch types).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

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
  // Appends `line`; does nothing when not open (no --output, or not rank 0). Throws
  // Error(kIOError) with the system's reason (e.g. "File too large") when the write fails.
  void write(const nlohmann::json& line);
  uint64_t bytes() const { return bytes_; }  // the file's length; 0 before open

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
};

// "epoch E/N  batch B/M  loss L  lr R  S samples/s", redrawn in place on stderr at most every
// 250 ms and always for an epoch's final line (which ends with a newline). Draws nothing unless
// wanted and stderr is a terminal. Not thread-safe.
class ProgressLine {
 public:
  ProgressLine(bool wanted, uint32_t epochs);
  void show(uint64_t epoch, uint64_t batch_in_epoch, uint64_t batches, double loss, double lr,
            double rate, bool final_line);

 private:
  bool enabled_;
  uint32_t epochs_;
  std::chrono::steady_clock::time_point last_{};
};

// Prints an epoch's summary to stdout (and flushes it) from its metrics.jsonl line: the kind
// "epoch" object with epoch, loss, val_loss/val_acc (null without validation), seconds,
// samples_per_s, data_wait and skipped_steps.
void print_epoch_summary(const nlohmann::json& line, uint32_t epochs);

}  // namespace train
}  // namespace dscache
