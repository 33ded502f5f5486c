// The progress line of a training run on stderr: a bar, the epoch's batches, throughput, loss,
// LR and the epoch's and the run's ETA, fitted to the terminal's width (no torch types).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "options.h"

namespace dscache {
namespace train {

// What one progress line says.
struct ProgressView {
  uint64_t epoch = 0;     // 0-based
  uint32_t epochs = 1;    // of the run
  uint64_t batch = 0;     // batches of the epoch done
  uint64_t batches = 0;   // batches per epoch
  double rate = 0;        // samples/s; <= 0 or not finite: unknown ("--")
  double loss = 0;        // the epoch's mean loss so far
  double lr = 0;          // the current learning rate
  double epoch_eta = -1;  // seconds to the epoch's last batch; < 0 or not finite: unknown
  double run_eta = -1;    // seconds to the run's end; < 0 or not finite: unknown
};

// "epoch 2/10 [####......]  812/1875  1234 samples/s  loss 0.431  lr 0.1  ETA 0:41 (run 7:12)",
// at most `columns` - 1 characters (writing the last column wraps on some terminals). When it
// does not fit, the bar goes first (it shrinks from 30 to 10 cells before), then "(run ...)",
// "lr ..." and the rate; what is left is cut at the width.
std::string format_progress(const ProgressView& v, int columns);

// "m:ss" below an hour, "h:mm:ss" from one; "--:--" when negative or not finite.
std::string format_duration(double seconds);

// What the ETAs are estimated from.
struct EtaInput {
  double seconds_per_batch = -1;  // this epoch's pace so far; <= 0 or not finite: unknown
  uint64_t batch = 0;             // batches of the epoch done
  uint64_t batches = 0;           // batches per epoch
  uint64_t run_batches_left = 0;  // batches left in the run, this epoch's included
  double val_seconds = -1;        // one validation pass, as last measured; < 0: none or unknown
};
struct Eta {
  double epoch = -1;  // seconds; -1 = unknown
  double run = -1;    // seconds, the validation passes to come included; -1 = unknown
};
// The epoch's ETA is its batches left (or the run's, when fewer) at this epoch's pace; the run's
// is the run's batches left at the same pace plus one validation pass per epoch still to end
// (this one included).
Eta estimate_eta(const EtaInput& in);

// Draws ProgressViews on stderr in place ('\r', padded over the previous line), at most every
// 250 ms and always for an epoch's final line, which ends with a newline. Between draws the line
// stays open: end_progress_line() (terminal.h), or break_line(), ends it before another message.
// Not thread-safe (the training thread).
class ProgressLine {
 public:
  // kAuto draws when stderr is a terminal, kAlways whatever it is, kNever never.
  ProgressLine(ProgressMode mode, uint32_t epochs);

  // The epoch's clock: its pace is measured from now and `first_batch` (a resumed epoch's
  // cursor) on.
  void start_epoch(uint64_t first_batch);
  // One validation pass took `seconds`: the run's ETA counts one per epoch still to end.
  void validation_took(double seconds) { val_seconds_ = seconds; }

  struct Step {
    uint64_t epoch = 0;             // 0-based
    uint64_t batch = 0;             // batches of the epoch done
    uint64_t batches = 0;           // per epoch
    uint64_t run_batches_left = 0;  // in the run, this epoch's included
    double loss = 0, lr = 0, rate = 0;
  };
  void show(const Step& s, bool final_line);
  // Ends the line if one is open, so the next message starts at the beginning of a line.
  void break_line();

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  uint32_t epochs_;
  Clock::time_point last_{};
  Clock::time_point epoch_start_ = Clock::now();
  uint64_t epoch_first_batch_ = 0;
  double val_seconds_ = -1;
  size_t drawn_ = 0;  // characters of the line on screen
};

}  // namespace train
}  // namespace dscache
