// dscache-train stopped by signals (suite cli, issue 11): SIGTERM and SIGINT checkpoint and exit
// 128 + N, a second SIGTERM exits at once, 2 ranks stop after the same step. No LibTorch here.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cli_fixtures.h"
#include "fixtures.h"
#include "lazy_source.h"
#include "options.h"
#include "precision.h"
#include "train_runs.h"

namespace {

using namespace dscache::train;
using trainer_test::check_same_result;
using trainer_test::code_of;
using trainer_test::dp_args;
using trainer_test::read_metrics;
using trainer_test::resume;
using trainer_test::Resumed;
using trainer_test::run_ranks;
using trainer_test::run_with_timeout;
using trainer_test::spawn_ranks;
using trainer_test::TempDir;
using trainer_test::tiny_args;
using trainer_test::wait_for_lines;

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("SIGTERM and SIGINT mid-epoch: checkpoint, exit 128 + N, --resume ends the same") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    const std::string ref = tmp.path() + "/ref";
    REQUIRE(code_of(trainer_test::run_process(tiny_args(train, ref, {"--epochs", "2"}), {}, log)) ==
            0);
    for (int sig : {SIGTERM, SIGINT}) {
      const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
      CAPTURE(name);
      const std::string out = tmp.path() + "/" + name;
      std::filesystem::remove(log);
      // The test hook raises the signal in the process after step 3 (of 4 in epoch 1).
      const int st = run_with_timeout(
          tiny_args(train, out, {"--epochs", "2"}),
          {"DSCACHE_TEST_KILL_AFTER_STEPS=3", "DSCACHE_TEST_KILL_SIGNAL=" + std::to_string(sig)},
          log, 120);
      const std::string text = trainer_test::read_file(log);
      CAPTURE(text);
      CHECK(code_of(st) == 128 + sig);
      CHECK(text.find("got " + name + ": stopping after the current optimizer step") !=
            std::string::npos);
      CHECK(text.find("stopped by " + name + " at epoch 1 step 3; checkpoint written to " + out +
                      "/checkpoint.pt; resume with --resume") != std::string::npos);
      CHECK(std::filesystem::exists(out + "/checkpoint.pt"));
      CHECK_FALSE(std::filesystem::exists(out + "/model.pt"));
      const Resumed r = resume(train, out, log, 120);
      CAPTURE(r.text);
      REQUIRE(code_of(r.status) == 0);
      CHECK(r.text.find("resuming from " + out +
                        "/checkpoint.pt at a step of epoch 1/2, step 3 (48 samples seen)") !=
            std::string::npos);
      check_same_result(ref, out, ModelKind::kCnn, 1, 4, 8, 8, 8 + 2);
    }
  }

  // Whether every occurrence of `needle` in `text` starts a line; false when there is none.
  bool starts_lines(const std::string& text, const std::string& needle) {
    size_t at = text.find(needle);
    if (at == std::string::npos) return false;
    for (; at != std::string::npos; at = text.find(needle, at + 1)) {
      if (at > 0 && text[at - 1] != '\n') return false;
    }
    return true;
  }

  TEST_CASE("--progress always: the SIGINT messages and epoch summaries start lines of their own") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    const std::string out = tmp.path() + "/out";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    auto args = tiny_args(train, out, {"--epochs", "2"});
    std::replace(args.begin(), args.end(), std::string("--no-progress"), std::string("--progress"));
    args.insert(std::find(args.begin(), args.end(), std::string("--progress")) + 1, "always");
    // The hook raises SIGINT after step 3 of 4: the progress line drawn at step 1 is still open.
    const int st = run_with_timeout(
        args, {"DSCACHE_TEST_KILL_AFTER_STEPS=3", "DSCACHE_TEST_KILL_SIGNAL=2", "COLUMNS=100"}, log,
        120);
    std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 128 + SIGINT);
    CHECK(text.find("\repoch 1/2 [") != std::string::npos);  // drawn, with its bar
    CHECK(text.find(" ETA ") != std::string::npos);
    CHECK(starts_lines(text, "dscache-train: got SIGINT: stopping after the current optimizer"));
    CHECK(starts_lines(text, "dscache-train: stopped by SIGINT at epoch 1 step 3"));
    // Resumed to the end: each epoch's final progress line ends before its summary on stdout.
    args.push_back("--resume");
    std::filesystem::remove(log);
    REQUIRE(code_of(run_with_timeout(args, {"COLUMNS=100"}, log, 120)) == 0);
    text = trainer_test::read_file(log);
    CAPTURE(text);
    const size_t bar = text.rfind("\repoch 2/2 [");  // the epoch's final line: a full bar
    REQUIRE(bar != std::string::npos);
    const size_t from = bar + 12, to = text.find(']', from);
    REQUIRE(to != std::string::npos);
    CHECK(text.substr(from, to - from) == std::string(to - from, '#'));
    CHECK(text.compare(to, 6, "]  4/4") == 0);
    CHECK(starts_lines(text, "epoch 1/2: loss"));
    CHECK(starts_lines(text, "epoch 2/2: loss"));
    // Not a terminal and no --progress: no progress line, as before (auto); --no-progress alike.
    for (const char* mode : {"auto", "never"}) {
      CAPTURE(mode);
      auto plain = tiny_args(train, tmp.path() + "/" + mode, {"--epochs", "1"});
      plain.erase(std::find(plain.begin(), plain.end(), std::string("--no-progress")));
      if (std::string(mode) == "never") plain.push_back("--no-progress");
      std::filesystem::remove(log);
      REQUIRE(code_of(run_with_timeout(plain, {}, log, 120)) == 0);
      text = trainer_test::read_file(log);
      CHECK(text.find("epoch 1/1: loss") != std::string::npos);
      CHECK(text.find('\r') == std::string::npos);
    }
  }

  TEST_CASE("a second SIGTERM while stopping exits at once, without a checkpoint") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    const std::string out = tmp.path() + "/out";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    // The hook raises SIGTERM after step 2, then again 1.2 s later, before the loop could stop.
    const int st = run_with_timeout(tiny_args(train, out, {"--epochs", "2"}),
                                    {"DSCACHE_TEST_KILL_AFTER_STEPS=2",
                                     "DSCACHE_TEST_KILL_SIGNAL=15", "DSCACHE_TEST_SIGNAL_TWICE=1"},
                                    log, 120);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 128 + SIGTERM);
    CHECK(text.find("second SIGTERM while stopping: exiting at once, without a checkpoint") !=
          std::string::npos);
    CHECK(text.find("stopped by SIGTERM at") == std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out + "/checkpoint.pt"));
  }

  // The stop line of rank R in `text`: "epoch E step S", or "" when missing.
  std::string stop_point(const std::string& text, int rank) {
    const std::string key = "rank " + std::to_string(rank) + " of 2: stopped by SIGTERM at ";
    const size_t at = text.find(key);
    if (at == std::string::npos) return "";
    const size_t from = at + key.size();
    return text.substr(from, text.find_first_of(";(\n", from) - from);
  }

  TEST_CASE(
      "2 ranks: SIGTERM to one or to both stops both after the same step, with a checkpoint") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    // Rank 1 alone gets SIGTERM after step 3: the stop request travels with step 4's all-reduce.
    auto st =
        run_ranks(dp_args(train, tmp.path() + "/one", {"--dist-timeout", "20"}), 2, {0, 1}, log,
                  {"DSCACHE_TEST_KILL_AFTER_STEPS=3", "DSCACHE_TEST_KILL_RANK=1",
                   "DSCACHE_TEST_KILL_SIGNAL=15"});
    std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st[0]) == 128 + SIGTERM);
    CHECK(code_of(st[1]) == 128 + SIGTERM);
    CHECK(stop_point(text, 0) == "epoch 1 step 4");
    CHECK(stop_point(text, 1) == "epoch 1 step 4 ");
    // Resumed, the pair ends as an uninterrupted pair does.
    for (int s : run_ranks(dp_args(train, tmp.path() + "/one", {"--resume"}), 2, {0, 1}, log)) {
      CHECK(code_of(s) == 0);
    }
    for (int s : run_ranks(dp_args(train, tmp.path() + "/ref"), 2, {0, 1}, log)) {
      CHECK(code_of(s) == 0);
    }
    check_same_result(tmp.path() + "/ref", tmp.path() + "/one", ModelKind::kCnn, 3, 4, 12, 12,
                      14 + 2);

    // Both ranks sent SIGTERM from outside, mid-run.
    const std::string big = tmp.path() + "/big", out = tmp.path() + "/both";
    trainer_test::write_cache(big, trainer_test::synthetic(16000, 12, 12, 3, 4, 5));
    std::filesystem::remove(log);
    const std::vector<int> pids =
        spawn_ranks(dp_args(big, out, {"--dist-timeout", "20"}), 2, {0, 1}, log);
    CHECK(wait_for_lines(out + "/metrics.jsonl", 3, 120));
    for (int pid : pids) ::kill(pid, SIGTERM);
    std::vector<int> codes;
    for (int pid : pids) codes.push_back(code_of(trainer_test::wait_process(pid)));
    text = trainer_test::read_file(log);
    CHECK(codes == std::vector<int>{128 + SIGTERM, 128 + SIGTERM});
    const std::string p0 = stop_point(text, 0), p1 = stop_point(text, 1);
    CHECK(!p0.empty());
    CHECK(p0 + " " == p1);
    CHECK(std::filesystem::exists(out + "/checkpoint.pt"));
    CHECK_NOTHROW(read_metrics(out + "/metrics.jsonl"));
  }
}  // TEST_SUITE cli
