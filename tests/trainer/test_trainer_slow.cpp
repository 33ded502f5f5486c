// dscache-train's convergence on Fashion-MNIST in fp32 and bf16 (suite slow; registered only
// where Debian's dataset-fashion-mnist is installed). No LibTorch here.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fixtures.h"
#include "train_runs.h"

namespace {

using trainer_test::read_metrics;
using trainer_test::TempDir;
using trainer_test::train_exe;

}  // namespace

TEST_SUITE("slow") {
  TEST_CASE(
      "convergence: cnn on Fashion-MNIST reaches >= 0.80 validation accuracy in fp32 and bf16") {
    const char* dir = std::getenv("DSCACHE_FASHION_MNIST");
    const std::string root = dir ? dir : "/usr/share/datasets/fashion-mnist";
    TempDir tmp;
    // 6000 training images from the training set, 2000 validation images from the test set.
    trainer_test::write_cache(
        tmp.path() + "/train",
        trainer_test::read_idx_gz(root + "/train-images-idx3-ubyte.gz",
                                  root + "/train-labels-idx1-ubyte.gz", 0, 6000));
    trainer_test::write_cache(
        tmp.path() + "/val",
        trainer_test::read_idx_gz(root + "/t10k-images-idx3-ubyte.gz",
                                  root + "/t10k-labels-idx1-ubyte.gz", 0, 2000));
    for (const std::string precision : {"fp32", "bf16"}) {
      CAPTURE(precision);
      const std::string out = tmp.path() + "/out-" + precision;
      const std::string log = tmp.path() + "/log-" + precision + ".txt";
      const auto t0 = std::chrono::steady_clock::now();
      const int st = trainer_test::run_process(
          trainer_test::cat(
              {train_exe(), "--train", tmp.path() + "/train", "--val", tmp.path() + "/val"},
              {"--epochs",       "2",     "--batch",     "32",      "--accum-steps", "2",
               "--optimizer",    "adamw", "--lr",        "2e-3",    "--schedule",    "cosine",
               "--warmup-steps", "10",    "--precision", precision, "--threads",     "2",
               "--output",       out,     "--log-every", "20",      "--no-progress"}),
          {}, log);
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string text = trainer_test::read_file(log);
      CAPTURE(text);
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 0);
      const auto metrics = read_metrics(out + "/metrics.jsonl");
      REQUIRE(!metrics.empty());
      const auto& last = metrics.back();
      REQUIRE(last["kind"] == "epoch");
      MESSAGE(precision << ": val_acc " << last["val_acc"].get<double>() << ", "
                        << last["samples_per_s"].get<double>() << " samples/s, " << secs
                        << " s in all");
      CHECK(last["val_acc"].get<double>() >= 0.80);
      CHECK(last["skipped_steps"].get<int64_t>() == 0);
    }
  }

}  // TEST_SUITE slow
