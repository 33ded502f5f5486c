// The dscache-train binary (suite cli): resume after SIGKILL, data parallel over Gloo ranks,
// --lazy-cache, usage errors; the launcher (--nproc-per-node), timeouts and failures, elastic
// restarts; hardening (issue 11): checkpoints, signals, the output lock, bad inputs; torchrun.
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
using trainer_test::spawn_ranks;
using trainer_test::TempDir;
using trainer_test::train_exe;
using trainer_test::with_output;

// Writes `d` as the cache TMP/train; returns the flags that train on it.
std::vector<std::string> train_on(const TempDir& tmp, const trainer_test::Dataset& d) {
  const std::string dir = tmp.path() + "/train";
  trainer_test::write_cache(dir, d);
  return {"--train", dir};
}

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

  // ---- launching, timeouts and failures (launch.h, distributed.h) ----

  // The data-parallel fixture: 200 samples, batch 8, K = 2 → 7 windows per epoch per rank.
  std::vector<std::string> dp_args(const std::string& train, const std::string& out,
                                   std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {
        train_exe(), "--train",   train, "--batch",       "8",           "--accum-steps",
        "2",         "--threads", "1",   "--seed",        "3",           "--epochs",
        "2",         "--output",  out,   "--no-progress", "--log-every", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  TEST_CASE("--nproc-per-node 2: the same weights and metrics as 2 ranks started by hand") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    for (int st : run_ranks(dp_args(train, tmp.path() + "/byhand"), 2, {0, 1}, log)) {
      INFO(trainer_test::read_file(log));
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 0);
    }
    const int st = trainer_test::run_process(
        dp_args(train, tmp.path() + "/launched", {"--nproc-per-node", "2"}), {}, log);
    INFO(trainer_test::read_file(log));
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    check_same_result(tmp.path() + "/byhand", tmp.path() + "/launched", ModelKind::kCnn, 3, 4, 12,
                      12, 14 + 2);
  }

  // srun sets SLURM_* only; the trainer reads them (rank_env.h) as it reads torchrun's. The real
  // srun is the slurm suite's (tests/slurm); here the two tasks get what srun would give them.
  TEST_CASE("Slurm job step variables: 2 tasks equal --nproc-per-node 2") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    const std::string port = std::to_string(trainer_test::free_port());
    std::vector<int> pids;
    for (int r = 0; r < 2; ++r) {
      pids.push_back(trainer_test::spawn_process(
          dp_args(train, tmp.path() + "/srun"),
          {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_PROCID=" + std::to_string(r),
           "SLURM_LOCALID=" + std::to_string(r), "SLURM_STEP_NUM_TASKS=2", "SLURM_NTASKS=2",
           "SLURM_STEP_NODELIST=localhost", "SLURM_JOB_NODELIST=localhost", "MASTER_PORT=" + port},
          log));
    }
    for (int pid : pids) {
      const int st = trainer_test::wait_process(pid);
      INFO(trainer_test::read_file(log));
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 0);
    }
    CHECK(trainer_test::read_file(log).find("2 ranks from Slurm (SLURM_PROCID") !=
          std::string::npos);
    const int st = trainer_test::run_process(
        dp_args(train, tmp.path() + "/launched", {"--nproc-per-node", "2"}), {}, log);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    check_same_result(tmp.path() + "/srun", tmp.path() + "/launched", ModelKind::kCnn, 3, 4, 12, 12,
                      14 + 2);
  }

  TEST_CASE("a rank SIGKILLed mid-run: the launcher stops the other and exits 128 + 9") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    const auto t0 = std::chrono::steady_clock::now();
    const int st = trainer_test::run_process(
        dp_args(train, tmp.path() + "/out", {"--nproc-per-node", "2", "--dist-timeout", "10"}),
        {"DSCACHE_TEST_KILL_AFTER_STEPS=3", "DSCACHE_TEST_KILL_RANK=1"}, log);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 128 + SIGKILL);
    CHECK(text.find("rank 1 (pid") != std::string::npos);
    CHECK(text.find("was killed by signal 9") != std::string::npos);
    CHECK(seconds_since(t0) < 60);
    CHECK_FALSE(std::filesystem::exists(tmp.path() + "/out/model.pt"));
  }

  // Waits until `path` holds at least `lines` lines (a running trainer's metrics.jsonl), at most
  // `seconds`; false on timeout.
  bool wait_for_lines(const std::string& path, size_t lines, double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < seconds) {
      const std::string text = trainer_test::read_file(path);
      if (static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) >= lines) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Since issue 11 the launcher forwards SIGTERM and the ranks stop at a step with a checkpoint
  // (before: the ranks got SIGTERM and died where they were, leaving no checkpoint).
  TEST_CASE("the launcher, sent SIGTERM: forwards it, the ranks checkpoint, it exits 128 + 15") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    // 4000 samples: training runs well past the signal
    trainer_test::write_cache(train, trainer_test::synthetic(4000, 12, 12, 3, 4, 5));
    const int pid = trainer_test::spawn_process(
        dp_args(train, tmp.path() + "/out", {"--nproc-per-node", "2"}), {}, log);
    CHECK(wait_for_lines(tmp.path() + "/out/metrics.jsonl", 2, 120));
    ::kill(pid, SIGTERM);
    const int st = trainer_test::wait_process(pid);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 128 + SIGTERM);
    CHECK(text.find("got signal 15") != std::string::npos);
    CHECK(text.find("rank 0 of 2: stopped by SIGTERM at epoch") != std::string::npos);
    CHECK(text.find("rank 1 of 2: stopped by SIGTERM at epoch") != std::string::npos);
    CHECK(text.find("; checkpoint written to " + tmp.path() + "/out/checkpoint.pt") !=
          std::string::npos);
    CHECK(std::filesystem::exists(tmp.path() + "/out/checkpoint.pt"));
    CHECK_FALSE(std::filesystem::exists(tmp.path() + "/out/model.pt"));
  }

  TEST_CASE("a rank SIGKILLed mid-run: the survivor exits 8 naming the failed collective") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    const auto t0 = std::chrono::steady_clock::now();
    const auto st =
        run_ranks(dp_args(train, tmp.path() + "/out", {"--dist-timeout", "10"}), 2, {0, 1}, log,
                  {"DSCACHE_TEST_KILL_AFTER_STEPS=3", "DSCACHE_TEST_KILL_RANK=1"});
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    REQUIRE(WIFSIGNALED(st[1]));
    CHECK(WTERMSIG(st[1]) == SIGKILL);
    REQUIRE(WIFEXITED(st[0]));
    CHECK(WEXITSTATUS(st[0]) == 8);
    CHECK(text.find("rank 0 of 2: a collective failed") != std::string::npos);
    CHECK(seconds_since(t0) < 60);
  }

  TEST_CASE("a stopped rank: the other fails when the collective times out (--dist-timeout)") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    const auto args = dp_args(train, tmp.path() + "/out", {"--dist-timeout", "3"});
    const std::vector<int> pids =
        spawn_ranks(args, 2, {0, 1}, log,
                    {"DSCACHE_TEST_KILL_AFTER_STEPS=3", "DSCACHE_TEST_KILL_RANK=1",
                     "DSCACHE_TEST_STOP_INSTEAD=1"});
    const auto t0 = std::chrono::steady_clock::now();
    const int st = trainer_test::wait_process(pids[0]);
    const double took = seconds_since(t0);
    ::kill(pids[1], SIGKILL);  // stopped (SIGSTOP), never exits by itself
    trainer_test::wait_process(pids[1]);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 8);
    CHECK(text.find("rank 0 of 2: a collective failed") != std::string::npos);
    CHECK(took < 30);
  }

  TEST_CASE("rendezvous: a missing rank fails after --dist-timeout, naming it") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train";
    trainer_test::write_cache(train, trainer_test::synthetic(40, 12, 12, 3, 4, 5));
    struct Case {
      std::vector<int> started;
      std::vector<std::string> needles;
    };
    const std::vector<Case> cases = {
        // rank 0 waits for rank 1, then names it
        {{0, 2}, {"rank 0 of 3: rendezvous: 2 of 3 ranks joined", "missing rank(s): 1"}},
        // no rank 0: nobody hosts the store
        {{1}, {"rank 1 of 3: rendezvous: rank 1 could not reach rank 0's TCPStore"}},
    };
    for (const auto& c : cases) {
      const std::string log = tmp.path() + "/log.txt";
      std::filesystem::remove(log);
      const auto t0 = std::chrono::steady_clock::now();
      const auto st = run_ranks(dp_args(train, tmp.path() + "/out", {"--dist-timeout", "3"}), 3,
                                c.started, log);
      const double took = seconds_since(t0);
      const std::string text = trainer_test::read_file(log);
      CAPTURE(text);
      for (const auto& needle : c.needles) CHECK(text.find(needle) != std::string::npos);
      REQUIRE(WIFEXITED(st[0]));
      CHECK(WEXITSTATUS(st[0]) == 8);
      for (size_t i = 1; i < st.size(); ++i) {  // rank 2 loses rank 0's store: exit 8 as well
        REQUIRE(WIFEXITED(st[i]));
        CHECK(WEXITSTATUS(st[i]) == 8);
      }
      // It waited for the timeout rather than failing at once (which takes well under 0.5 s);
      // c10d's client gives up a little before its deadline (2.46 s seen for 3 s), so the
      // lower bound is half the timeout, not the timeout.
      CHECK(took >= 1.5);
      CHECK(took < 30);
    }
  }

  TEST_CASE("TORCHELASTIC_RESTART_COUNT > 0 resumes from the checkpoint, saying so") {
    TempDir tmp;
    const std::vector<std::string> args =
        cat(train_on(tmp, trainer_test::synthetic(96, 12, 12, 3, 4, 7)),
            {"--batch", "16", "--threads", "1", "--epochs", "2", "--seed", "2",
             "--checkpoint-every", "2", "--log-every", "1"});
    const std::string a_dir = tmp.path() + "/a", b_dir = tmp.path() + "/b";
    const std::string log = tmp.path() + "/log.txt";
    int st = trainer_test::run_process(with_output(args, a_dir), {}, log);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    st = trainer_test::run_process(with_output(args, b_dir), {"DSCACHE_TEST_KILL_AFTER_STEPS=5"},
                                   log);
    REQUIRE(WIFSIGNALED(st));
    std::filesystem::remove(log);
    st = trainer_test::run_process(with_output(args, b_dir), {"TORCHELASTIC_RESTART_COUNT=1"}, log);
    const std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    CHECK(text.find("TORCHELASTIC_RESTART_COUNT=1: restarted by the launcher, resuming") !=
          std::string::npos);
    check_same_result(a_dir, b_dir, ModelKind::kCnn, 3, 4, 12, 12, 12 + 2);
  }

  // ---- hardening (issue 11): checkpoints, signals, the output lock, bad inputs ----

  // Runs `argv` with at most `seconds`: the raw wait status, or -1 when it had to be killed.
  int run_with_timeout(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const std::string& log, double seconds) {
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
  int code_of(int status) {
    if (status < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // The tiny fixture: 64 samples of 8x8x1, 4 classes, batch 16 → 4 optimizer steps per epoch.
  std::vector<std::string> tiny_args(const std::string& train, const std::string& out,
                                     std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {
        train_exe(), "--train",  train, "--batch",       "16",          "--threads", "1", "--seed",
        "1",         "--output", out,   "--no-progress", "--log-every", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  // A finished reference run in WORK/ref and, in WORK/tmpl, the same run killed (SIGKILL) after
  // step 6 of 8 with a checkpoint every step: checkpoint.pt holds step 6, checkpoint.prev.pt 5.
  void interrupted_run(const std::string& work, const std::string& train) {
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    const std::string log = work + "/setup.txt";
    const auto args = [&](const std::string& out) {
      return tiny_args(train, out, {"--epochs", "2", "--checkpoint-every", "1"});
    };
    int st = trainer_test::run_process(args(work + "/ref"), {}, log);
    INFO(trainer_test::read_file(log));
    REQUIRE(code_of(st) == 0);
    st = trainer_test::run_process(args(work + "/tmpl"), {"DSCACHE_TEST_KILL_AFTER_STEPS=6"}, log);
    REQUIRE(code_of(st) == 128 + SIGKILL);
    REQUIRE(std::filesystem::exists(work + "/tmpl/checkpoint.pt"));
    REQUIRE(std::filesystem::exists(work + "/tmpl/checkpoint.prev.pt"));
  }

  // A fresh copy of WORK/tmpl in WORK/NAME.
  std::string copy_of_template(const std::string& work, const std::string& name) {
    const std::string dir = work + "/" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::copy(work + "/tmpl", dir, std::filesystem::copy_options::recursive);
    return dir;
  }

  // `bytes` with the byte at `pos` flipped.
  std::string flipped(std::string bytes, size_t pos) {
    bytes[pos] = static_cast<char>(bytes[pos] ^ 0xff);
    return bytes;
  }

  struct Resumed {
    int status;        // raw wait status
    std::string text;  // its log
  };

  // Runs the tiny fixture with `--epochs 2 --resume` on DIR, logging to LOG (replaced), killed
  // after `timeout_s`.
  Resumed resume(const std::string& train, const std::string& dir, const std::string& log,
                 int timeout_s) {
    std::filesystem::remove(log);
    const int st =
        run_with_timeout(tiny_args(train, dir, {"--epochs", "2", "--resume"}), {}, log, timeout_s);
    return {st, trainer_test::read_file(log)};
  }

  TEST_CASE("checkpoint: 40 single-byte flips are each caught; resume falls back or refuses") {
    TempDir tmp;
    const std::string w = tmp.path(), train = w + "/train", log = w + "/log.txt";
    interrupted_run(w, train);
    const std::string good = trainer_test::read_file(w + "/tmpl/checkpoint.pt");
    REQUIRE(good.size() > 1000);
    const std::string want = trainer_test::read_file(w + "/ref/model.pt");
    // Every field of the 32-byte header, then 27 positions evenly over the archive (the last
    // byte included).
    std::vector<size_t> positions = {0, 3, 7, 8, 11, 12, 15, 16, 19, 23, 24, 28, 31};
    for (size_t i = 0; i < 27; ++i) positions.push_back(32 + (good.size() - 33) * i / 26);
    REQUIRE(positions.size() >= 40);
    int fell_back = 0;
    for (size_t pos : positions) {
      CAPTURE(pos);
      const std::string dir = copy_of_template(w, "flip");
      write_bytes(dir + "/checkpoint.pt", flipped(good, pos));
      const Resumed r = resume(train, dir, log, 120);
      CAPTURE(r.text);
      REQUIRE(code_of(r.status) == 0);
      CHECK(r.text.find(dir + "/checkpoint.pt: ") != std::string::npos);
      CHECK(r.text.find("falling back to the older " + dir + "/checkpoint.prev.pt") !=
            std::string::npos);
      CHECK(trainer_test::read_file(dir + "/model.pt") == want);  // the uninterrupted weights
      fell_back += r.text.find("falling back") != std::string::npos;
    }
    MESSAGE(fell_back << " of " << positions.size() << " flips fell back to checkpoint.prev.pt");
    // Without the older checkpoint a flip is refused: exit 5, naming the file and the reason.
    for (size_t pos :
         {size_t{0}, size_t{20}, size_t{24}, size_t{40}, good.size() / 2, good.size() - 1}) {
      CAPTURE(pos);
      const std::string dir = copy_of_template(w, "flip");
      std::filesystem::remove(dir + "/checkpoint.prev.pt");
      write_bytes(dir + "/checkpoint.pt", flipped(good, pos));
      const Resumed r = resume(train, dir, log, 120);
      CAPTURE(r.text);
      CHECK(code_of(r.status) == 5);
      CHECK(r.text.find("no usable checkpoint in " + dir) != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(dir + "/model.pt"));
    }
  }

  TEST_CASE(
      "checkpoint: FIFO, directory, device, text, bare archive, truncated: refused or fall back") {
    TempDir tmp;
    const std::string w = tmp.path(), train = w + "/train", log = w + "/log.txt";
    interrupted_run(w, train);
    const std::string good = trainer_test::read_file(w + "/tmpl/checkpoint.pt");
    struct Row {
      std::string name;
      std::function<void(const std::string&)> make;  // creates the bad checkpoint.pt
      bool keep_previous;
      int code;
      std::string needle;
    };
    const auto fifo = [](const std::string& p) { REQUIRE(::mkfifo(p.c_str(), 0644) == 0); };
    const std::vector<Row> rows = {
        {"a FIFO", fifo, false, 5, "is a FIFO (named pipe), not a regular file"},
        {"a FIFO, the older one intact", fifo, true, 0, "falling back to the older"},
        {"a directory", [](const std::string& p) { std::filesystem::create_directory(p); }, false,
         5, "is a directory, not a regular file"},
        {"a link to /dev/zero",
         [](const std::string& p) { std::filesystem::create_symlink("/dev/zero", p); }, false, 5,
         "is a character device"},
        {"text",
         [](const std::string& p) { write_bytes(p, "this is not a checkpoint, only some text\n"); },
         false, 5, "not a dscache-train checkpoint (no checkpoint header)"},
        {"a bare LibTorch archive (format 1, no header)",
         [&](const std::string& p) { std::filesystem::copy_file(w + "/ref/model.pt", p); }, false,
         5, "a bare LibTorch archive"},
        {"truncated",
         [&](const std::string& p) { write_bytes(p, good.substr(0, good.size() / 2)); }, false, 5,
         "(truncated or damaged)"},
        {"empty", [](const std::string& p) { write_bytes(p, ""); }, false, 5,
         "0 bytes, shorter than the header"},
        {"missing, the older one intact", [](const std::string&) {}, true, 0,
         "checkpoint.pt is missing; falling back to the older"},
    };
    for (const Row& row : rows) {
      CAPTURE(row.name);
      const std::string dir = copy_of_template(w, "bad");
      std::filesystem::remove(dir + "/checkpoint.pt");
      if (!row.keep_previous) std::filesystem::remove(dir + "/checkpoint.prev.pt");
      row.make(dir + "/checkpoint.pt");
      const auto t0 = std::chrono::steady_clock::now();
      const Resumed r = resume(train, dir, log, 60);
      CAPTURE(r.text);
      CHECK(code_of(r.status) == row.code);
      CHECK(r.text.find(row.needle) != std::string::npos);
      CHECK(seconds_since(t0) < 60);
      if (row.code == 0) {
        CHECK(trainer_test::read_file(dir + "/model.pt") ==
              trainer_test::read_file(w + "/ref/model.pt"));
      }
    }
  }

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

  TEST_CASE("--resume says where it resumes, refuses meaning changes and names the rest") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", out = tmp.path() + "/out";
    const std::string log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    REQUIRE(code_of(trainer_test::run_process(tiny_args(train, out), {}, log)) == 0);
    std::filesystem::remove(log);
    auto changed = tiny_args(
        train, out, {"--resume", "--normalize", "half", "--model", "resnet18", "--lr", "0.1"});
    // tiny_args gives --batch 16 and --seed 1: change their values
    *(std::find(changed.begin(), changed.end(), "--batch") + 1) = "8";
    *(std::find(changed.begin(), changed.end(), "--seed") + 1) = "9";
    int st = run_with_timeout(changed, {}, log, 120);
    std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 2);
    for (const char* needle :
         {"was made with other settings that change the run's meaning: ",
          "--model cnn (this run: resnet18)", "--batch 16 (this run: 8)", "--seed 1 (this run: 9)",
          "--normalize dataset (this run: half)", "or --force to start over"}) {
      CHECK(text.find(needle) != std::string::npos);
    }
    std::filesystem::remove(log);
    st = run_with_timeout(tiny_args(train, out,
                                    {"--resume", "--epochs", "2", "--lr", "0.1", "--precision",
                                     "bf16", "--schedule", "cosine", "--clip-grad", "1"}),
                          {}, log, 120);
    text = trainer_test::read_file(log);
    CHECK(code_of(st) == 0);
    for (const char* needle :
         {"at the end of epoch 1/2, step 4 (64 samples seen)",
          "options that differ from the checkpoint's take effect from now: ",
          "--lr 0.1 (checkpoint: 0.05)", "--schedule cosine (checkpoint: constant)",
          "--clip-grad 1 (checkpoint: 0)", "--epochs 2 (checkpoint: 1)",
          "--precision bf16 (checkpoint: fp32)"}) {
      CHECK(text.find(needle) != std::string::npos);
    }
    CHECK(text.find("--batch") == std::string::npos);  // what did not change is not named
    CHECK(read_metrics(out + "/metrics.jsonl").size() == 2 * (4 + 1));
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

  TEST_CASE("--resume refuses a cache rebuilt with other samples unless --allow-data-change") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train", out = tmp.path() + "/out";
    const std::string log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 3));
    REQUIRE(code_of(run_with_timeout(tiny_args(train, out), {}, log, 120)) == 0);
    // The same count, shape and classes, other pixels: what a rebuild from another source gives.
    std::filesystem::remove_all(train);
    trainer_test::write_cache(train, trainer_test::synthetic(64, 8, 8, 1, 4, 4));
    std::filesystem::remove(log);
    int st = run_with_timeout(tiny_args(train, out, {"--resume", "--epochs", "2"}), {}, log, 120);
    std::string text = trainer_test::read_file(log);
    CAPTURE(text);
    CHECK(code_of(st) == 2);
    CHECK(text.find("was made on other training data: ") != std::string::npos);
    CHECK(text.find("content digest ") != std::string::npos);
    CHECK(text.find("--allow-data-change") != std::string::npos);
    std::filesystem::remove(log);
    st = run_with_timeout(
        tiny_args(train, out, {"--resume", "--epochs", "2", "--allow-data-change"}), {}, log, 120);
    text = trainer_test::read_file(log);
    CHECK(code_of(st) == 0);
    CHECK(text.find("warning: --allow-data-change: continuing") != std::string::npos);
    // The checkpoint now records the new data: a plain resume of it is accepted.
    std::filesystem::remove(log);
    st = run_with_timeout(tiny_args(train, out, {"--resume", "--epochs", "3"}), {}, log, 120);
    text = trainer_test::read_file(log);
    CHECK(code_of(st) == 0);
    CHECK(text.find("other training data") == std::string::npos);
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

  // Debian 12's torchrun (python3-torch 1.13 on Python 3.11) needs PET_REDIRECTS/PET_TEE set to
  // a mapping (trainer/README.md, "torchrun on Debian 12"). Registered as its own meson test
  // (trainer_torchrun), which exits 77 (SKIP) when torchrun is not installed.
  TEST_CASE("torchrun --nproc_per_node=2 --no_python dscache-train: the same as --nproc-per-node") {
    std::string torchrun;
    if (const char* path = std::getenv("PATH")) {
      std::istringstream dirs(path);
      std::string d;
      while (torchrun.empty() && std::getline(dirs, d, ':')) {
        if (::access((d + "/torchrun").c_str(), X_OK) == 0) torchrun = d + "/torchrun";
      }
    }
    if (torchrun.empty()) {
      std::fprintf(stderr, "SKIP: torchrun not found on PATH (apt-get install python3-torch)\n");
      std::exit(77);
    }
    TempDir tmp;
    const std::string train = tmp.path() + "/train", log = tmp.path() + "/log.txt";
    trainer_test::write_cache(train, trainer_test::synthetic(200, 12, 12, 3, 4, 5));
    int st = trainer_test::run_process(
        dp_args(train, tmp.path() + "/launched", {"--nproc-per-node", "2"}), {}, log);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    // Static rendezvous on 127.0.0.1, not --standalone: that one meets at localhost:29400, which a
    // minimal Debian without /etc/hosts does not resolve (torchrun then retries until its timeout).
    auto args = dp_args(train, tmp.path() + "/torchrun");
    args.insert(args.begin(),
                {torchrun, "--nnodes=1", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                 "--master_port=" + std::to_string(trainer_test::free_port()), "--no_python"});
    st = trainer_test::run_process(args, {"PET_REDIRECTS=9:0", "PET_TEE=9:0"}, log);
    INFO(trainer_test::read_file(log));
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    check_same_result(tmp.path() + "/launched", tmp.path() + "/torchrun", ModelKind::kCnn, 3, 4, 12,
                      12, 14 + 2);
  }

}  // TEST_SUITE cli
