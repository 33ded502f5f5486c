// The trainer's progress line (trainer/progress_line.h): its text at every width, the durations,
// the ETAs with unknown and zero rates, and what ProgressLine writes to stderr.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "progress_line.h"
#include "terminal.h"

namespace {

using namespace dscache::train;

// The brief's example: epoch 2/10, batch 812 of 1875.
ProgressView example() {
  ProgressView v;
  v.epoch = 1;
  v.epochs = 10;
  v.batch = 812;
  v.batches = 1875;
  v.rate = 1234.4;
  v.loss = 0.431;
  v.lr = 0.1;
  v.epoch_eta = 41;
  v.run_eta = 432;
  return v;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// What stderr received while `body` ran (fd 2 redirected into a temporary file).
template <typename F>
std::string captured_stderr(F body) {
  dscache::test::TempDir tmp;
  const std::string path = tmp.path() + "/stderr.txt";
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  body();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("format_duration: m:ss below an hour, h:mm:ss from one, --:-- when unknown") {
    const double inf = std::numeric_limits<double>::infinity();
    const struct {
      double seconds;
      const char* text;
    } rows[] = {
        {0, "0:00"},           {0.4, "0:00"},     {41, "0:41"},      {59.6, "1:00"},
        {432, "7:12"},         {3599.4, "59:59"}, {3600, "1:00:00"}, {3723, "1:02:03"},
        {360000, "100:00:00"}, {-1, "--:--"},     {-0.001, "--:--"}, {std::nan(""), "--:--"},
        {inf, "--:--"},
    };
    for (const auto& r : rows) {
      CAPTURE(r.seconds);
      CHECK(format_duration(r.seconds) == r.text);
    }
  }

  TEST_CASE("format_progress: the whole line with a 30-cell bar when the terminal is wide") {
    const std::string line = format_progress(example(), 200);
    CHECK(line ==
          "epoch 2/10 [############..................]  812/1875  1234 samples/s  loss 0.431  "
          "lr 0.1  ETA 0:41 (run 7:12)");
  }

  TEST_CASE("format_progress: never wider than columns - 1; the bar goes first, then run, lr") {
    const std::string full = format_progress(example(), 200);
    const size_t text = full.size() - 33;  // without " [" + 30 cells + "]"
    const struct {
      int columns;
      int bar_cells;  // 0: no bar
      bool run, lr, rate;
    } rows[] = {
        {200, 30, true, true, true},
        {static_cast<int>(text + 34), 30, true, true, true},    // exactly room for 30 cells
        {static_cast<int>(text + 33), 29, true, true, true},    // one column less: 29 cells
        {static_cast<int>(text + 14), 10, true, true, true},    // the smallest bar
        {static_cast<int>(text + 13), 0, true, true, true},     // no room for it: dropped
        {static_cast<int>(text + 1), 0, true, true, true},      // the text alone, exactly
        {static_cast<int>(text), 0, false, true, true},         // then "(run ...)"
        {static_cast<int>(text - 11), 0, false, false, true},   // then "lr ..."
        {static_cast<int>(text - 19), 0, false, false, false},  // then the rate
        {30, 0, false, false, false},                           // and then it is cut
        {1, 0, false, false, false},
    };
    for (const auto& r : rows) {
      CAPTURE(r.columns);
      const std::string line = format_progress(example(), r.columns);
      CAPTURE(line);
      CHECK(line.size() <= static_cast<size_t>(std::max(1, r.columns - 1)));
      CHECK(line.substr(0, 10) == std::string("epoch 2/10").substr(0, line.size()));
      const size_t open = line.find(" ["), close = line.find(']');
      if (r.bar_cells) {
        REQUIRE(open != std::string::npos);
        CHECK(close - open - 2 == static_cast<size_t>(r.bar_cells));
      } else {
        CHECK(open == std::string::npos);
      }
      CHECK(has(line, "(run 7:12)") == r.run);
      CHECK(has(line, "lr 0.1") == r.lr);
      CHECK(has(line, "1234 samples/s") == r.rate);
      if (r.columns > 60) CHECK(has(line, "ETA 0:41"));
    }
  }

  TEST_CASE(
      "format_progress: an unknown or zero rate and ETA say so; the bar fills with the epoch") {
    ProgressView v = example();
    for (double rate : {0.0, -5.0, std::nan("")}) {
      v.rate = rate;
      v.epoch_eta = v.run_eta = -1;
      const std::string line = format_progress(v, 200);
      CAPTURE(line);
      CHECK(has(line, "  -- samples/s  "));
      CHECK(has(line, "ETA --:-- (run --:--)"));
    }
    v = example();
    const struct {
      uint64_t batch, batches;
      const char* bar;
    } rows[] = {{0, 1875, "[..."},
                {1875, 1875, "[##############################]"},
                {5, 0, "[..."},
                {10, 5, "[##############################]"}};
    for (const auto& r : rows) {
      v.batch = r.batch;
      v.batches = r.batches;
      CAPTURE(r.batch);
      CHECK(has(format_progress(v, 200), r.bar));
    }
  }

  TEST_CASE("estimate_eta: the epoch's pace over the epoch and the run, validation included") {
    const double nan = std::nan("");
    const struct {
      const char* name;
      EtaInput in;
      double epoch, run;
    } rows[] = {
        {"unknown pace", {-1, 10, 40, 110, -1}, -1, -1},
        {"zero pace", {0, 10, 40, 110, 5}, -1, -1},
        {"NaN pace", {nan, 10, 40, 110, 5}, -1, -1},
        {"3 epochs, no validation", {0.5, 10, 40, 110, -1}, 15, 55},
        // this epoch's pass and the two later epochs': 3 x 4 s
        {"3 epochs, validation 4 s", {0.5, 10, 40, 110, 4}, 15, 55 + 12},
        {"last batch of the last epoch", {0.5, 40, 40, 0, 4}, 0, 4},
        // --max-steps ends the run 6 batches from now, inside this epoch
        {"--max-steps inside the epoch", {0.5, 10, 40, 6, 2}, 3, 3 + 2},
        // ... or 5 batches into the next epoch: two passes
        {"--max-steps in the next epoch", {0.5, 10, 40, 35, 2}, 15, 17.5 + 4},
    };
    for (const auto& r : rows) {
      CAPTURE(r.name);
      const Eta e = estimate_eta(r.in);
      CHECK(e.epoch == doctest::Approx(r.epoch));
      CHECK(e.run == doctest::Approx(r.run));
    }
  }

  TEST_CASE("ProgressLine: redrawn in place, padded, ended by its final line or break_line once") {
    ::setenv("COLUMNS", "70", 1);
    const std::string out = captured_stderr([] {
      ProgressLine p(ProgressMode::kAlways, 2);
      p.start_epoch(0);
      p.show({0, 1, 4, 7, 2.5, 0.1, 100}, false);
      p.break_line();  // a message comes: the line ends once
      p.break_line();
      end_progress_line();
      p.show({0, 4, 4, 4, 1.25, 0.1, 1e6}, true);  // final: drawn despite the 250 ms limit
      end_progress_line();                         // already ended
    });
    ::unsetenv("COLUMNS");
    CAPTURE(out);
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    REQUIRE(lines.size() == 2);
    CHECK(out.back() == '\n');
    for (const std::string& l : lines) {
      CHECK(l.rfind("\repoch 1/2", 0) == 0);
      CHECK(l.size() <= 70);  // '\r' + at most 69 characters
    }
    CHECK(has(lines[0], "1/4"));
    CHECK(has(lines[1], "4/4"));
    CHECK(has(lines[1], "ETA 0:00"));
  }

  TEST_CASE("ProgressLine: never and auto without a terminal draw nothing") {
    for (ProgressMode mode : {ProgressMode::kNever, ProgressMode::kAuto}) {
      const std::string out = captured_stderr([mode] {  // a file is not a terminal
        ProgressLine p(mode, 1);
        p.start_epoch(0);
        p.show({0, 1, 2, 2, 1, 0.1, 10}, false);
        p.show({0, 2, 2, 1, 1, 0.1, 10}, true);
        p.break_line();
      });
      CHECK(out.empty());
    }
  }
}
