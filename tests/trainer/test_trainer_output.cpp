// dscache-train's --output and inputs (suite cli, issue 11): the output lock, a run already in
// --output, --precision auto's message, bad inputs exiting with their codes, a file-size limit.
// No LibTorch here.
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
using trainer_test::code_of;
using trainer_test::read_metrics;
using trainer_test::run_with_timeout;
using trainer_test::seconds_since;
using trainer_test::TempDir;
using trainer_test::tiny_args;
using trainer_test::train_exe;
using trainer_test::wait_for_lines;
using trainer_test::write_bytes;

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("two trainers on one --output: the second refuses at once (exit 6), naming the first") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", out = tmp.path() + "/out";
    const std::string log_a = tmp.path() + "/a.txt", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(16000, 12, 12, 3, 4, 5));
    const auto args = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = {train_exe(), "--train",     train, "--batch",
                                    "8",         "--threads",   "1",   "--output",
                                    out,         "--log-every", "1",   "--no-progress"};
      a.insert(a.end(), extra.begin(), extra.end());
      return a;
    };
    const int first = trainer_test::spawn_process(args({}), {}, log_a);
    REQUIRE(wait_for_lines(out + "/metrics.jsonl", 1, 120));
    for (const auto& extra : {std::vector<std::string>{}, std::vector<std::string>{"--resume"},
                              std::vector<std::string>{"--force"}}) {
      std::filesystem::remove(log);
      const auto t0 = std::chrono::steady_clock::now();
      const int st = run_with_timeout(args(extra), {}, log, 60);
      const std::string text = trainer_test::read_file(log);
      CAPTURE(text);
      CHECK(code_of(st) == 6);
      CHECK(text.find("--output " + out + " is in use by another dscache-train (pid " +
                      std::to_string(first) + " on host ") != std::string::npos);
      CHECK(seconds_since(t0) < 30);
    }
    ::kill(first, SIGTERM);
    CHECK(code_of(trainer_test::wait_process(first)) == 128 + SIGTERM);
    const auto lines = read_metrics(out + "/metrics.jsonl");  // every line whole: one writer
    for (size_t i = 1; i < lines.size(); ++i) CHECK(lines[i]["step"] > lines[i - 1]["step"]);
    // The kernel released the lock with the process: a resume takes it.
    std::filesystem::remove(log);
    const int st = run_with_timeout(args({"--resume", "--max-steps", "1"}), {}, log, 120);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 0);
    CHECK(text.find("take effect from now: --max-steps 1 (checkpoint: 0)") != std::string::npos);
  }

  TEST_CASE(
      "an --output holding a run is refused without --resume or --force; --force starts over") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", out = tmp.path() + "/out";
    const std::string log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    REQUIRE(code_of(trainer_test::run_process(tiny_args(train, out), {}, log)) == 0);
    const std::string model = trainer_test::read_file(out + "/model.pt");
    const std::string metrics = trainer_test::read_file(out + "/metrics.jsonl");
    CHECK(trainer_test::read_file(out + "/curves.png").compare(0, 4, "\x89PNG") == 0);
    std::filesystem::remove(log);
    int st = run_with_timeout(tiny_args(train, out, {"--lr", "0.2"}), {}, log, 60);
    std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 4);
    CHECK(text.find("--output " + out +
                    " holds a run (checkpoint.pt, metrics.jsonl, model.pt, model.json); " +
                    "add --resume to continue it, or --force to start over") != std::string::npos);
    CHECK(trainer_test::read_file(out + "/model.pt") == model);  // untouched
    CHECK(trainer_test::read_file(out + "/metrics.jsonl") == metrics);
    std::filesystem::remove(log);
    st = run_with_timeout(tiny_args(train, out, {"--lr", "0.2", "--force"}), {}, log, 120);
    text = trainer_test::read_file(log);
    CHECK(code_of(st) == 0);
    CHECK(text.find("--force: removed the previous run's checkpoint.pt, metrics.jsonl, model.pt, "
                    "model.json") != std::string::npos);
    CHECK(read_metrics(out + "/metrics.jsonl").size() == 4 + 1);  // a new log, not appended
    CHECK(trainer_test::read_file(out + "/model.pt") != model);
    // A metrics log alone is a run too.
    for (const char* name : {"checkpoint.pt", "model.pt"})
      std::filesystem::remove(out + "/" + name);
    CHECK(code_of(run_with_timeout(tiny_args(train, out), {}, log, 60)) == 4);
  }

  TEST_CASE("--precision auto says what it chose and why; an emulated bf16 is warned about") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    const CpuBf16 here = detect_cpu_bf16();
    auto run = [&](const std::vector<std::string>& extra, const std::vector<std::string>& env) {
      std::filesystem::remove_all(tmp.path() + "/out");
      std::filesystem::remove(log);
      const int st = run_with_timeout(tiny_args(train, tmp.path() + "/out", extra), env, log, 120);
      return std::make_pair(code_of(st), trainer_test::read_file(log));
    };
    auto [code, text] = run({"--precision", "auto"}, {});
    CAPTURE(text);
    CHECK(code == 0);
    CHECK(text.find(here.native() ? "precision auto: bf16 (the CPU has"
                                  : "precision auto: fp32 (the CPU has") != std::string::npos);
    // oneDNN capped below bf16: auto falls back to fp32; an explicit bf16 still trains, warned.
    std::tie(code, text) = run({"--precision", "auto"}, {"ONEDNN_MAX_CPU_ISA=AVX2"});
    CHECK(code == 0);
    CHECK(text.find("precision auto: fp32") != std::string::npos);
    CHECK(text.find("ONEDNN_MAX_CPU_ISA=AVX2") != std::string::npos);
    std::tie(code, text) = run({"--precision", "bf16"}, {"ONEDNN_MAX_CPU_ISA=AVX2"});
    CHECK(code == 0);
    CHECK(text.find("warning: --precision bf16 is emulated on this CPU") != std::string::npos);
  }

  TEST_CASE("bad trainer inputs: each exits with its code, naming the path or option and why") {
    TempDir tmp;
    const std::string t = tmp.path(), good = t + "/good", log = t + "/log.txt";
    trainer_test::write_cache(good, trainer_test::synthetic(40, 8, 8, 1, 4, 3));
    trainer_test::write_cache(t + "/noshard", trainer_test::synthetic(40, 8, 8, 1, 4, 3));
    std::filesystem::remove(t + "/noshard/images-00000.npy");
    std::filesystem::create_directories(t + "/empty");
    std::filesystem::create_directories(t + "/fifoman");
    REQUIRE(::mkfifo((t + "/fifoman/manifest.json").c_str(), 0644) == 0);
    REQUIRE(::mkfifo((t + "/fifo").c_str(), 0644) == 0);
    write_bytes(t + "/file", "x");
    std::filesystem::create_directories(t + "/fifometrics");
    REQUIRE(::mkfifo((t + "/fifometrics/metrics.jsonl").c_str(), 0644) == 0);
    std::filesystem::create_directories(t + "/imgs/a");
    struct Row {
      std::vector<std::string> args;
      int code;
      std::string needle;
    };
    const std::vector<Row> rows = {
        {{"--train", t + "/nope"}, 1, "/nope: --train: no such directory"},
        {{"--train", t + "/file"}, 1, "is a regular file, not a cache directory"},
        {{"--train", t + "/fifo"}, 1, "is a FIFO (named pipe), not a cache directory"},
        {{"--train", "/dev/null"}, 1, "is a character device, not a cache directory"},
        {{"--train", t + "/empty"}, 1, "--train manifest: no such file"},
        {{"--train", t + "/fifoman"}, 1, "manifest.json: --train manifest: is a FIFO"},
        {{"--train", t + "/noshard"}, 1, "images-00000.npy"},
        {{"--train", good, "--val", t + "/fifo"}, 1, "--val: is a FIFO"},
        {{"--train", t + "/imgs", "--lazy-cache", "/dev/zero", "--image-size", "8"},
         1,
         "--lazy-cache: is a character device, not a regular file"},
        {{"--train", good, "--output", t + "/file"},
         2,
         "--output: " + t + "/file is a regular file"},
        {{"--train", good, "--output", t + "/fifometrics", "--resume"},
         1,
         "metrics log: is a FIFO"},
        {{"--train", good, "--batch", "-3"}, 2, "--batch: '-3' is not a non-negative integer"},
        {{"--train", good, "--epochs", "many"}, 2, "--epochs"},
        {{"--train", good, "--lr", "nan"}, 2, "--lr"},
        {{"--train", good, "--dist-timeout", "0"}, 2, "--dist-timeout"},
        {{"--train", good, "--shuffle", "windowed", "--window-bytes", "12Q"}, 2, "--window-bytes"},
        {{"--train", good, "--force"}, 2, "--force: needs --output"},
        {{"--train", good, "--output", t + "/o", "--force", "--resume"},
         2,
         "--force: and --resume"},
    };
    for (const Row& r : rows) {
      std::vector<std::string> argv = {train_exe(), "--no-progress", "--threads", "1"};
      argv.insert(argv.end(), r.args.begin(), r.args.end());
      std::filesystem::remove(log);
      const int st = run_with_timeout(argv, {}, log, 60);
      const std::string text = trainer_test::read_file(log);
      CAPTURE(r.args.back());
      CAPTURE(text);
      CHECK(code_of(st) == r.code);
      CHECK(text.find(r.needle) != std::string::npos);
      CHECK(text.find("dscache-train: ") == 0);  // our words first, not LibTorch's or std's
    }
  }

  TEST_CASE("a file-size limit (ulimit -f) is a write error naming the file, not a SIGXFSZ death") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    // 64 blocks (32 KiB in dash, 64 KiB in bash): the metrics fit, the checkpoint (~400 KB) not.
    std::vector<std::string> argv = {"/bin/sh", "-c", "ulimit -f 64 && exec \"$0\" \"$@\""};
    const auto args = tiny_args(train, tmp.path() + "/out");
    argv.insert(argv.end(), args.begin(), args.end());
    const int st = run_with_timeout(argv, {}, log, 120);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 7);
    CHECK(text.find("checkpoint.pt") != std::string::npos);
    CHECK(text.find("File too large") != std::string::npos);
  }
}  // TEST_SUITE cli
