// What keeps a run safe to start, stop and resume (no torch types): its errors, opening only
// regular files, the output directory's lock, and stopping cleanly on SIGINT/SIGTERM.
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "dscache/exit_codes.h"

namespace dscache {
namespace train {

// dscache-train exits with the codes of the one table it shares with dscache
// (dscache/exit_codes.h, docs/OPERATIONS.md "Exit codes"): main() runs through run_command, and
// each error below names its row. Stopped by SIGINT/SIGTERM: 128 + the signal number (130, 143), as
// a shell reports a process killed by it, but only after the checkpoint was written (or
// immediately, before training started or on a second signal).

// --output holds a run and neither --resume nor --force was given: ExitCode::kOutputExists.
class OutputInUseError : public std::runtime_error, public ExitsWith<ExitCode::kOutputExists> {
 public:
  using std::runtime_error::runtime_error;
};

// Another dscache-train holds --output's lock: ExitCode::kLocked.
class OutputLockedError : public std::runtime_error, public ExitsWith<ExitCode::kLocked> {
 public:
  using std::runtime_error::runtime_error;
};

// --resume found checkpoints but none verifies (checksum, format, not a regular file...): the
// files are corrupt, ExitCode::kCorruption.
class CheckpointError : public std::runtime_error, public ExitsWith<ExitCode::kCorruption> {
 public:
  using std::runtime_error::runtime_error;
};

// The loss or the gradients stayed inf/NaN (no loss scaler to back off): ExitCode::kDiverged.
class DivergedError : public std::runtime_error, public ExitsWith<ExitCode::kDiverged> {
 public:
  using std::runtime_error::runtime_error;
};

// An open file descriptor, closed on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {  // the caller closes it
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// The trainer's regular-file open. libcache's dscache::File (dscache/file.h) is read-only and
// speaks for cache files (Corruption); the trainer also opens files to write (metrics, the lock)
// and names the option the path came from, so it keeps this one: opens `path` with `flags`
// (O_RDONLY, or O_WRONLY|O_CREAT...) plus
// O_NONBLOCK, O_NOCTTY and O_CLOEXEC, so that a FIFO or a device cannot block the open, checks
// with fstat that it is a regular file, then clears O_NONBLOCK. `what` names the file for the
// user ("checkpoint", "--lazy-cache"). Throws dscache::Error: kNotFound when missing,
// kInvalidArgument when not a regular file (saying what it is), kIOError otherwise.
Fd trainer_open_regular_file(const std::string& path, int flags, const std::string& what,
                             mode_t mode = 0644);

// The whole of a regular file (trainer_open_regular_file, then read). Throws as it does.
std::string trainer_read_regular_file(const std::string& path, const std::string& what);

// Throws dscache::Error(kInvalidArgument) when `path` exists and is not a regular file.
void check_regular_if_exists(const std::string& path, const std::string& what);

// Throws dscache::Error: kNotFound when `path` does not exist, kInvalidArgument when it is not a
// directory (or, with `or_file`, not a directory nor a regular file).
void check_directory(const std::string& path, const std::string& what, bool or_file = false);

// "a FIFO", "a directory", "a character device"...: what a stat mode says a path is.
std::string describe_file_type(mode_t mode);

// An exclusive flock on OUTPUT/dscache-train.lock, held while this object lives (and released by
// the kernel when the process dies, however it dies). The file holds the holder's pid, host and
// start time for the next one to name. Not thread-safe.
class OutputLock {
 public:
  static constexpr const char* kFileName = "dscache-train.lock";
  // Takes the lock or throws OutputLockedError naming the holder; dscache::Error when the file
  // cannot be created (or is not a regular file).
  explicit OutputLock(const std::string& dir);

 private:
  Fd fd_;
};

// The names in `dir` that make it hold a run: checkpoint.pt, checkpoint.prev.pt, metrics.jsonl,
// model.pt, model.json (whatever their type), in that order.
std::vector<std::string> run_files_present(const std::string& dir);

// ---- Stopping on SIGINT/SIGTERM ----
// Process-wide by nature (signal handlers): the executable's, never a library's. Until
// stop_signals_training(), a signal ends the process at once (128 + signal; nothing to save
// yet). Then the first SIGINT/SIGTERM only asks to stop: the loop finishes its optimizer step,
// writes a checkpoint and exits 128 + signal. A second one at least 1 s after the first exits at
// once (the same Ctrl-C reaches a rank from the terminal and from its launcher a moment apart:
// that is one request). After stop_signals_exiting() signals are ignored. SIGXFSZ is ignored
// for good, so a file-size limit is a write error naming the file.

// Installs the handlers; `who` prefixes messages ("rank 1 of 2: " or "").
void install_stop_signals(const std::string& who);
void stop_signals_training();
void stop_signals_exiting();
// 0, or the first SIGINT/SIGTERM received while training.
int stop_requested();
// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int sig);

}  // namespace train
}  // namespace dscache
