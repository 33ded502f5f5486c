// The dscache-train binary (suite cli): resume after SIGKILL, data parallel over Gloo ranks,
// --lazy-cache, usage errors and --help. The launcher is in test_trainer_launch.cpp, hardening
// (issue 11) in test_trainer_checkpoint.cpp, test_trainer_signals.cpp and test_trainer_output.cpp.
// No LibTorch here (this file compiles fast): runs are compared through train_runs.h.
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
using trainer_test::cat;
using trainer_test::check_close_weights;
using trainer_test::check_resume;
using trainer_test::check_same_result;
using trainer_test::read_metrics;
using trainer_test::run_ranks;
using trainer_test::TempDir;
using trainer_test::train_exe;
using trainer_test::train_on;

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("resume after SIGKILL ends with the same weights as an uninterrupted run (cnn)") {
    TempDir tmp;
    // 200 samples, batch 16 → 13 batches/epoch; K = 2 → 7 windows per epoch (the last of 1 batch
    // of 8 samples); 2 epochs = 14 optimizer steps; checkpoints every 4 steps and at epoch ends.
    trainer_test::write_cache(tmp.path() + "/train", trainer_test::synthetic(200, 12, 12, 3, 4, 5),
                              64);
    trainer_test::write_cache(tmp.path() + "/val", trainer_test::synthetic(40, 12, 12, 3, 4, 6));
    struct Case {
      std::string name;
      std::vector<std::string> extra;
      int kill_after;
    };
    const std::vector<Case> cases = {
        {"sgd fp32, killed mid-epoch 1", {"--schedule", "cosine", "--warmup-steps", "3"}, 5},
        {"sgd fp32, killed in epoch 2", {"--clip-grad", "1.0"}, 10},
        {"adamw bf16 with loss scaling, killed after an epoch-end checkpoint",
         {"--optimizer", "adamw", "--precision", "bf16", "--loss-scaling", "on", "--schedule",
          "step"},
         7},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      std::vector<std::string> args =
          cat({"--train", tmp.path() + "/train", "--val", tmp.path() + "/val"},
              {"--epochs", "2", "--batch", "16", "--accum-steps", "2", "--threads", "2", "--seed",
               "9", "--checkpoint-every", "4", "--log-every", "1"});
      args.insert(args.end(), c.extra.begin(), c.extra.end());
      const bool scaling =
          std::find(c.extra.begin(), c.extra.end(), "--loss-scaling") != c.extra.end();
      check_resume(tmp.path(), args, c.kill_after, ModelKind::kCnn, 3, 4, 12, 12, 14 + 2, scaling);
    }
  }

  TEST_CASE("resume after SIGKILL: resnet18 (BatchNorm buffers), channels-last, effective batch") {
    TempDir tmp;
    // 48 samples of 8x8, batch 8, effective batch 16 → 3 windows per epoch, 2 epochs.
    const std::vector<std::string> args =
        cat(train_on(tmp, trainer_test::synthetic(48, 8, 8, 3, 3, 7)),
            {"--model", "resnet18", "--epochs", "2", "--batch", "8", "--effective-batch", "16",
             "--threads", "2", "--seed", "4", "--checkpoint-every", "2", "--log-every", "1",
             "--channels-last", "--lr", "0.01"});
    check_resume(tmp.path(), args, 5, ModelKind::kResnet18, 3, 3, 8, 8, 6 + 2, false);
  }

  // The step line averages the steps since the previous one; a checkpoint between two lines keeps
  // that running sum, so the resumed run's line at step 6 averages steps 4-6 as the
  // uninterrupted one does (check_same_result compares every line's loss exactly).
  TEST_CASE("resume between two step lines: --log-every 3, checkpoint at step 4, same metrics") {
    TempDir tmp;
    const std::vector<std::string> args =
        cat(train_on(tmp, trainer_test::synthetic(200, 12, 12, 3, 4, 5)),
            {"--val", tmp.path() + "/train", "--epochs", "2", "--batch", "16", "--accum-steps", "2",
             "--threads", "2", "--seed", "9", "--checkpoint-every", "4", "--log-every", "3"});
    // 7 windows an epoch, 14 steps: step lines at 3, 6, 9, 12 and 2 epoch lines.
    check_resume(tmp.path(), args, 5, ModelKind::kCnn, 3, 4, 12, 12, 4 + 2, false);
  }

  TEST_CASE("data parallel: 2 Gloo ranks of batch b equal 1 process of batch 2b") {
    TempDir tmp;
    // 200 samples: 100 per rank, batch 8, K = 2 → 7 windows (the last: 4 samples per rank); one
    // process with batch 16 sees the same windows (positions r, r+2, ... of the epoch's order).
    trainer_test::write_cache(tmp.path() + "/train", trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    auto args = [&](const std::string& batch, const std::string& out) {
      return cat({train_exe(), "--train", tmp.path() + "/train", "--batch", batch},
                 {"--accum-steps", "2", "--threads", "1", "--seed", "3", "--epochs", "2",
                  "--output", out, "--no-progress", "--log-every", "1"});
    };
    const std::string log = tmp.path() + "/log.txt";
    int st = trainer_test::run_process(args("16", tmp.path() + "/single"), {}, log);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    for (int s : run_ranks(args("8", tmp.path() + "/ddp"), 2, {0, 1}, log)) {
      INFO(trainer_test::read_file(log));
      REQUIRE(WIFEXITED(s));
      CHECK(WEXITSTATUS(s) == 0);
    }
    check_close_weights(tmp.path() + "/single/model.pt", tmp.path() + "/ddp/model.pt",
                        ModelKind::kCnn, 3, 4, 12, 12, 1e-4, 1e-6);
    const auto m1 = read_metrics(tmp.path() + "/single/metrics.jsonl");
    const auto m2 = read_metrics(tmp.path() + "/ddp/metrics.jsonl");
    REQUIRE(m1.size() == m2.size());  // rank 1 wrote nothing of its own
    for (size_t i = 0; i < m1.size(); ++i) {
      CHECK(m1[i]["step"] == m2[i]["step"]);
      CHECK(m1[i]["loss"].get<double>() ==
            doctest::Approx(m2[i]["loss"].get<double>()).epsilon(1e-4));
    }
  }

  TEST_CASE(
      "data parallel resume: 2 Gloo ranks killed after a checkpoint and resumed equal an "
      "uninterrupted pair") {
    TempDir tmp;
    // 200 samples over 2 ranks, batch 8, K = 2 → 7 windows per epoch, 2 epochs = 14 steps;
    // checkpoints every 4 steps; both ranks SIGKILL themselves after step 6 (the checkpoint of
    // step 4 is the newest), then both resume from the shared output directory.
    trainer_test::write_cache(tmp.path() + "/train", trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    trainer_test::write_cache(tmp.path() + "/val", trainer_test::synthetic(40, 12, 12, 3, 4, 6));
    const std::string log = tmp.path() + "/log.txt";
    // Starts both ranks with `extra_env` and returns their wait statuses.
    auto run_pair = [&](const std::string& out, bool resume,
                        const std::vector<std::string>& extra_env) {
      std::vector<std::string> args =
          cat({train_exe(), "--train", tmp.path() + "/train", "--val", tmp.path() + "/val"},
              {"--batch",    "8",      "--accum-steps",      "2", "--threads",   "1",
               "--seed",     "5",      "--epochs",           "2", "--optimizer", "adamw",
               "--schedule", "cosine", "--checkpoint-every", "4", "--log-every", "1",
               "--output",   out,      "--no-progress"});
      if (resume) args.push_back("--resume");
      return run_ranks(args, 2, {0, 1}, log, extra_env);
    };
    const std::string a_dir = tmp.path() + "/a", b_dir = tmp.path() + "/b";
    for (int st : run_pair(a_dir, false, {})) {
      INFO(trainer_test::read_file(log));
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 0);
    }
    for (int st : run_pair(b_dir, false, {"DSCACHE_TEST_KILL_AFTER_STEPS=6"})) {
      INFO(trainer_test::read_file(log));
      REQUIRE(WIFSIGNALED(st));
      CHECK(WTERMSIG(st) == SIGKILL);
    }
    CHECK_FALSE(std::filesystem::exists(b_dir + "/model.pt"));
    REQUIRE(std::filesystem::exists(b_dir + "/checkpoint.pt"));
    for (int st : run_pair(b_dir, true, {})) {
      INFO(trainer_test::read_file(log));
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 0);
    }
    check_same_result(a_dir, b_dir, ModelKind::kCnn, 3, 4, 12, 12, 14 + 2);
    CHECK(
        read_metrics(a_dir + "/metrics.jsonl").back()["val_acc"].is_number());  // rank 0 validated
  }

  TEST_CASE("--lazy-cache: train from an image folder, decoded once into a reusable cache file") {
    if (!lazy_source_supported()) {
      MESSAGE("built without the tools' decode module: --lazy-cache reports Unsupported");
      return;
    }
    TempDir tmp;
    // 3 classes of PPM images of 10x10, each class dominated by one colour channel: 16 per class
    // to train on, 5 per class (other pixels) to validate on.
    std::mt19937 rng(1);
    auto write_images = [&](const std::string& root, int per_class) {
      for (int c = 0; c < 3; ++c) {
        const std::string dir = root + "/c" + std::to_string(c);
        std::filesystem::create_directories(dir);
        for (int i = 0; i < per_class; ++i) {
          std::string px;
          for (int p = 0; p < 100; ++p) {
            for (int ch = 0; ch < 3; ++ch)
              px += static_cast<char>((ch == c ? 200 : 40) + rng() % 40);
          }
          std::ofstream(dir + "/" + std::to_string(i) + ".ppm", std::ios::binary)
              << "P6\n10 10\n255\n"
              << px;
        }
      }
    };
    write_images(tmp.path() + "/imgs", 16);
    write_images(tmp.path() + "/val", 5);
    // What real folders hold besides images: skipped as `dscache build` skips them.
    std::ofstream(tmp.path() + "/imgs/c0/README.txt") << "three classes of colour blobs\n";
    std::ofstream(tmp.path() + "/imgs/c1/empty.ppm");
    const std::string lazy = tmp.path() + "/lazy.bin", val_lazy = tmp.path() + "/val.bin";
    const std::string log = tmp.path() + "/log.txt";
    auto args = [&](const std::string& out, const std::string& size) {
      return std::vector<std::string>{train_exe(),
                                      "--train",
                                      tmp.path() + "/imgs",
                                      "--lazy-cache",
                                      lazy,
                                      "--val",
                                      tmp.path() + "/val",
                                      "--val-lazy-cache",
                                      val_lazy,
                                      "--image-size",
                                      size,
                                      "--epochs",
                                      "4",
                                      "--batch",
                                      "8",
                                      "--threads",
                                      "2",
                                      "--output",
                                      out,
                                      "--no-progress"};
    };
    int st = trainer_test::run_process(args(tmp.path() + "/o1", "8"), {}, log);
    INFO(trainer_test::read_file(log));
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    const std::string first_log = trainer_test::read_file(log);
    CHECK(first_log.find("--lazy-cache: skipped 2 of 50 listed entries") != std::string::npos);
    CHECK(first_log.find("README.txt: not an image") != std::string::npos);
    CHECK(first_log.find("empty.ppm: zero-byte file") != std::string::npos);
    CHECK(std::filesystem::exists(lazy));
    CHECK(std::filesystem::exists(val_lazy));
    const auto val_file_size = std::filesystem::file_size(val_lazy);
    // Second run: served from the files; same samples, so the same weights byte for byte.
    st = trainer_test::run_process(args(tmp.path() + "/o2", "8"), {}, log);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    CHECK(trainer_test::read_file(tmp.path() + "/o1/model.pt") ==
          trainer_test::read_file(tmp.path() + "/o2/model.pt"));
    CHECK(std::filesystem::file_size(val_lazy) == val_file_size);  // nothing decoded again
    const auto m = read_metrics(tmp.path() + "/o1/metrics.jsonl");
    const auto m2 = read_metrics(tmp.path() + "/o2/metrics.jsonl");
    REQUIRE(!m.empty());
    CHECK(m.back()["train_acc"].get<double>() > 0.9);  // the colours are easy to tell apart
    REQUIRE(m.back()["val_acc"].is_number());
    CHECK(m.back()["val_acc"].get<double>() > 0.9);  // validated on the 15 decoded images
    CHECK(m.back()["val_acc"].get<double>() == m2.back()["val_acc"].get<double>());
    // The same file for another decode size is refused, not mixed.
    st = trainer_test::run_process(args(tmp.path() + "/o3", "6"), {}, log);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 1);
    CHECK(trainer_test::read_file(log).find("another source or shape") != std::string::npos);
  }

  TEST_CASE("dscache-train: usage errors exit 2, a missing cache exits 1, help exits 0") {
    TempDir tmp;
    trainer_test::write_cache(tmp.path() + "/c", trainer_test::synthetic(20, 8, 8, 1, 2, 1));
    trainer_test::write_cache(tmp.path() + "/rgb", trainer_test::synthetic(20, 8, 8, 3, 2, 1));
    struct Row {
      std::vector<std::string> args;
      int code;
      std::string needle;
    };
    const std::string c = tmp.path() + "/c";
    std::vector<Row> rows = {
        {{"--help"}, 0, "--accum-steps"},
        {{}, 2, "--train"},
        {{"--train", c, "--batch", "0"}, 2, "--batch"},
        {{"--train", c, "--precision", "fp16"}, 2, "--precision"},
        {{"--train", c, "--device", "cuda"}, 2, "--device cuda"},
        {{"--train", c, "--val", tmp.path() + "/rgb"}, 2, "--val"},
        {{"--train", tmp.path() + "/nope"}, 1, "nope"},
        {{"--train", c, "--val", tmp.path() + "/imgs", "--val-lazy-cache", tmp.path() + "/v.bin"},
         2,
         "--image-size"},
        {{"--train", c, "--val-lazy-cache", tmp.path() + "/v.bin", "--image-size", "8"},
         2,
         "needs --val"},
        // fp32 with an absurd LR: five non-finite steps in a row stop the run, exit 9 (diverged).
        {{"--train", c, "--batch", "2", "--epochs", "5", "--lr", "1e12", "--momentum", "0"},
         9,
         "inf/NaN for 5 consecutive steps"},
    };
    // A checkpoint from other settings is refused naming the option, not silently mixed in.
    const std::string out = tmp.path() + "/out";
    REQUIRE(trainer_test::run_process(
                {train_exe(), "--train", c, "--batch", "4", "--output", out, "--no-progress"}, {},
                tmp.path() + "/first.txt") == 0);
    rows.push_back({{"--train", c, "--batch", "8", "--output", out, "--resume"}, 2, "--batch 4"});
    for (const Row& r : rows) {
      std::vector<std::string> argv = {train_exe()};
      argv.insert(argv.end(), r.args.begin(), r.args.end());
      const std::string log = tmp.path() + "/log.txt";
      std::remove(log.c_str());
      const int st = trainer_test::run_process(argv, {}, log);
      const std::string text = trainer_test::read_file(log);
      CAPTURE(text);
      REQUIRE(WIFEXITED(st));
      CHECK(WEXITSTATUS(st) == r.code);
      CHECK(text.find(r.needle) != std::string::npos);
    }
  }

  TEST_CASE("--help: the options grouped by concern under their headings, each option once") {
    TempDir tmp;
    const std::string log = tmp.path() + "/help.txt";
    REQUIRE(trainer_test::run_process({train_exe(), "--help"}, {}, log) == 0);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    const std::vector<std::string> headings = {"Data:",
                                               "Task and model:",
                                               "Optimisation:",
                                               "Precision and device:",
                                               "Output and resume:",
                                               "Distributed:",
                                               "Other:"};
    size_t last = 0;
    for (const std::string& h : headings) {
      CAPTURE(h);
      const size_t at = text.find("\n" + h + "\n");
      REQUIRE(at != std::string::npos);
      CHECK(at > last);  // in this order
      last = at;
    }
    // Option lines start "  --name" (or "  -h [ --help ]"); descriptions wrap deeper.
    std::map<std::string, int> seen;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("  -", 0) != 0) continue;
      const size_t dash = line.find("--");
      REQUIRE(dash != std::string::npos);
      const size_t end = line.find_first_of(" ]=", dash);
      ++seen[line.substr(dash + 2, end - dash - 2)];
    }
    for (const auto& [name, n] : seen) {
      CAPTURE(name);
      CHECK(n == 1);
    }
    for (const char* name : {"train",
                             "val",
                             "lazy-cache",
                             "val-lazy-cache",
                             "channels",
                             "image-size",
                             "normalize",
                             "shuffle",
                             "window-bytes",
                             "workers",
                             "prefetch",
                             "task",
                             "targets",
                             "loss",
                             "target-norm",
                             "model",
                             "epochs",
                             "max-steps",
                             "batch",
                             "accum-steps",
                             "effective-batch",
                             "optimizer",
                             "lr",
                             "momentum",
                             "weight-decay",
                             "schedule",
                             "warmup-steps",
                             "step-size",
                             "gamma",
                             "clip-grad",
                             "seed",
                             "precision",
                             "loss-scaling",
                             "device",
                             "channels-last",
                             "threads",
                             "keep-denormals",
                             "output",
                             "resume",
                             "allow-data-change",
                             "force",
                             "log-every",
                             "checkpoint-every",
                             "progress",
                             "no-progress",
                             "nproc-per-node",
                             "dist-timeout",
                             "bucket-mb",
                             "sync-bn",
                             "help"}) {
      CAPTURE(name);
      CHECK(seen.count(name) == 1);
    }
    // The texts are kept: a heading's first option, with its words.
    CHECK(text.find("Data:\n  --train arg") != std::string::npos);
    CHECK(text.find("micro-batches per optimizer step (default 1)") != std::string::npos);
  }
}  // TEST_SUITE cli
