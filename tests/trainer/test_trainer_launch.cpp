// The dscache-train launcher (suite cli): --nproc-per-node, Slurm job steps, timeouts and
// failures of ranks, elastic restarts, torchrun. No LibTorch here: runs are compared through
// train_runs.h.
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
using trainer_test::check_same_result;
using trainer_test::dp_args;
using trainer_test::run_ranks;
using trainer_test::seconds_since;
using trainer_test::spawn_ranks;
using trainer_test::TempDir;
using trainer_test::train_on;
using trainer_test::wait_for_lines;
using trainer_test::with_output;

}  // namespace

TEST_SUITE("cli") {
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
