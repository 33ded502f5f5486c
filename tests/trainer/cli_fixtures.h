// What the dscache-train CLI tests share (test_trainer_cli.cpp, test_trainer_launch.cpp,
// test_trainer_checkpoint.cpp, test_trainer_signals.cpp, test_trainer_output.cpp): the fixtures'
// command lines, running with a timeout, exit codes as a shell reports them. No LibTorch.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fixtures.h"
#include "train_runs.h"

namespace trainer_test {

// Writes `d` as the cache TMP/train; returns the flags that train on it.
inline std::vector<std::string> train_on(const TempDir& tmp, const Dataset& d) {
  const std::string dir = tmp.path() + "/train";
  write_cache(dir, d);
  return {"--train", dir};
}

// The data-parallel fixture: 200 samples, batch 8, K = 2 → 7 windows per epoch per rank.
inline std::vector<std::string> dp_args(const std::string& train, const std::string& out,
                                        std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {
      train_exe(), "--train",   train, "--batch",       "8",           "--accum-steps",
      "2",         "--threads", "1",   "--seed",        "3",           "--epochs",
      "2",         "--output",  out,   "--no-progress", "--log-every", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Waits until `path` holds at least `lines` lines (a running trainer's metrics.jsonl), at most
// `seconds`; false on timeout.
inline bool wait_for_lines(const std::string& path, size_t lines, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < seconds) {
    const std::string text = trainer_test::read_file(path);
    if (static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Runs `argv` with at most `seconds`: the raw wait status, or -1 when it had to be killed.
inline int run_with_timeout(const std::vector<std::string>& argv,
                            const std::vector<std::string>& env, const std::string& log,
                            double seconds) {
  const int pid = trainer_test::spawn_process(argv, env, log);
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    if (seconds_since(t0) > seconds) {
      ::kill(pid, SIGKILL);
      trainer_test::wait_process(pid);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The exit code as a shell reports it (128 + N for a signal); -1 for a run that timed out.
inline int code_of(int status) {
  if (status < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The tiny fixture: 64 samples of 8x8x1, 4 classes, batch 16 → 4 optimizer steps per epoch.
inline std::vector<std::string> tiny_args(const std::string& train, const std::string& out,
                                          std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {train_exe(),   "--train", train, "--batch",  "16", "--threads",
                                "1",           "--seed",  "1",   "--output", out,  "--no-progress",
                                "--log-every", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

struct Resumed {
  int status;        // raw wait status
  std::string text;  // its log
};

// Runs the tiny fixture with `--epochs 2 --resume` on DIR, logging to LOG (replaced), killed
// after `timeout_s`.
inline Resumed resume(const std::string& train, const std::string& dir, const std::string& log,
                      int timeout_s) {
  std::filesystem::remove(log);
  const int st =
      run_with_timeout(tiny_args(train, dir, {"--epochs", "2", "--resume"}), {}, log, timeout_s);
  return {st, trainer_test::read_file(log)};
}

}  // namespace trainer_test
