// dscache-train's elastic resume (suite cli): a run continued on another number of Gloo ranks
// keeps its global batch (--accum-steps chosen, trainer/elastic.h) and takes, step by step, the
// samples an uninterrupted run takes; a geometry that cannot keep it is refused with its numbers.
// No LibTorch here: the runs are compared through DSCACHE_TEST_SAMPLE_LOG (trainer/test_hooks.h).
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_fixtures.h"
#include "fixtures.h"
#include "train_runs.h"

namespace {

using trainer_test::cat;
using trainer_test::read_file;
using trainer_test::run_ranks;
using trainer_test::TempDir;
using trainer_test::train_exe;

// 132 samples: a multiple of 1, 2, 3 and 4 ranks, so no rank pads its share and every step of
// every geometry holds the same 24 samples. --batch 2, global batch 24: 6 steps per epoch.
constexpr uint64_t kSamples = 132;

// One step's samples: its epoch and its sample indices over all ranks, sorted.
struct StepSamples {
  uint64_t epoch = 0;
  std::vector<uint64_t> indices;
};

// DSCACHE_TEST_SAMPLE_LOG's lines ("EPOCH STEP RANK INDEX...") by step.
std::map<uint64_t, StepSamples> steps_of(const std::string& log) {
  std::map<uint64_t, StepSamples> steps;
  std::istringstream in(read_file(log));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    uint64_t epoch = 0, step = 0, index = 0;
    int rank = 0;
    const bool parsed = static_cast<bool>(words >> epoch >> step >> rank);
    REQUIRE(parsed);
    StepSamples& s = steps[step];
    s.epoch = epoch;
    while (words >> index) s.indices.push_back(index);
  }
  for (auto& [step, s] : steps) std::sort(s.indices.begin(), s.indices.end());
  return steps;
}

std::vector<std::string> elastic_args(const std::string& train, const std::string& out,
                                      std::vector<std::string> extra = {},
                                      const std::string& batch = "2") {
  return cat({train_exe(), "--train", train, "--output", out, "--batch", batch},
             cat({"--threads", "1", "--workers", "1", "--seed", "4", "--epochs", "2",
                  "--checkpoint-every", "1", "--log-every", "1", "--no-progress"},
                 extra));
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE(
      "elastic resume: 4 -> 2 -> 1 -> 3 ranks take every global step's samples of an "
      "uninterrupted 4-rank run, each sample of an epoch once") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train";
    trainer_test::write_cache(train, trainer_test::synthetic(kSamples, 8, 8, 1, 4, 7));
    const std::string log = tmp.path() + "/log.txt";
    const std::string ref_samples = tmp.path() + "/ref.samples";
    for (int st : run_ranks(elastic_args(train, tmp.path() + "/ref", {"--accum-steps", "3"}), 4,
                            {0, 1, 2, 3}, log, {"DSCACHE_TEST_SAMPLE_LOG=" + ref_samples})) {
      INFO(read_file(log));
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 0);
    }
    // The same run stopped (SIGKILL after a checkpointed step) three times, each time resumed
    // on another number of ranks without --accum-steps.
    struct Phase {
      int world;
      int kill_after;    // 0: to the end
      std::string note;  // what rank 0 says of the --accum-steps it chose
    };
    const std::vector<Phase> phases = {
        {4, 3, ""},
        {2, 7,
         "resuming on 2 ranks (checkpoint: 4): --accum-steps 6 (checkpoint: 3) keeps the "
         "global batch of 24 samples"},
        {1, 10,
         "resuming on 1 rank (checkpoint: 2): --accum-steps 12 (checkpoint: 6) keeps the "
         "global batch of 24 samples"},
        {3, 0,
         "resuming on 3 ranks (checkpoint: 1): --accum-steps 4 (checkpoint: 12) keeps the "
         "global batch of 24 samples"},
    };
    const std::string out = tmp.path() + "/elastic", samples = tmp.path() + "/elastic.samples";
    for (const Phase& ph : phases) {
      CAPTURE(ph.world);
      std::vector<std::string> args =
          elastic_args(train, out,
                       ph.note.empty() ? std::vector<std::string>{"--accum-steps", "3"}
                                       : std::vector<std::string>{"--resume"});
      std::vector<int> ranks(ph.world);
      for (int r = 0; r < ph.world; ++r) ranks[r] = r;
      std::vector<std::string> env = {"DSCACHE_TEST_SAMPLE_LOG=" + samples};
      if (ph.kill_after)
        env.push_back("DSCACHE_TEST_KILL_AFTER_STEPS=" + std::to_string(ph.kill_after));
      std::filesystem::remove(log);
      for (int st : run_ranks(args, ph.world, ranks, log, env)) {
        INFO(read_file(log));
        if (ph.kill_after) {
          REQUIRE(WIFSIGNALED(st));
          CHECK(WTERMSIG(st) == SIGKILL);
        } else {
          REQUIRE(WIFEXITED(st));
          REQUIRE(WEXITSTATUS(st) == 0);
        }
      }
      const std::string text = read_file(log);
      INFO(text);
      if (!ph.note.empty())
        CHECK(text.find("dscache-train: " + ph.note + "\n") != std::string::npos);
    }
    const auto ref = steps_of(ref_samples), got = steps_of(samples);
    REQUIRE(ref.size() == 12);  // 2 epochs of 6 steps
    REQUIRE(got.size() == ref.size());
    std::map<uint64_t, std::vector<uint64_t>> per_epoch;
    for (const auto& [step, r] : ref) {
      CAPTURE(step);
      REQUIRE(got.count(step) == 1);
      CHECK(got.at(step).epoch == r.epoch);
      CHECK(r.indices.size() == (step % 6 ? 24 : kSamples - 5 * 24));  // an epoch's last: 12
      CHECK(got.at(step).indices == r.indices);  // the same samples in every global step
      auto& e = per_epoch[got.at(step).epoch];
      e.insert(e.end(), got.at(step).indices.begin(), got.at(step).indices.end());
    }
    REQUIRE(per_epoch.size() == 2);
    std::vector<uint64_t> all(kSamples);
    for (uint64_t i = 0; i < kSamples; ++i) all[i] = i;
    for (auto& [epoch, seen] : per_epoch) {
      CAPTURE(epoch);
      std::sort(seen.begin(), seen.end());
      CHECK(seen == all);  // each sample of the epoch exactly once over the four geometries
    }
    // metrics.jsonl continued at each checkpoint: every step logged once.
    const auto m = trainer_test::read_metrics(out + "/metrics.jsonl");
    std::vector<uint64_t> logged;
    for (const auto& line : m) {
      if (line["kind"] == "step") logged.push_back(line["step"].get<uint64_t>());
    }
    CHECK(logged == std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    CHECK(std::filesystem::exists(out + "/model.pt"));
  }

  TEST_CASE("elastic resume: a geometry that cannot keep the global batch is refused (exit 2)") {
    TempDir tmp;
    const std::string train = tmp.path() + "/train";
    trainer_test::write_cache(train, trainer_test::synthetic(kSamples, 8, 8, 1, 4, 7));
    const std::string out = tmp.path() + "/run", log = tmp.path() + "/log.txt";
    // 2 ranks x --batch 2 x --accum-steps 6: a global batch of 24, killed after step 2.
    for (int st : run_ranks(elastic_args(train, out, {"--accum-steps", "6"}), 2, {0, 1}, log,
                            {"DSCACHE_TEST_KILL_AFTER_STEPS=2"})) {
      INFO(read_file(log));
      REQUIRE(WIFSIGNALED(st));
    }
    REQUIRE(std::filesystem::exists(out + "/checkpoint.pt"));
    const std::string before = read_file(out + "/checkpoint.pt");
    struct Refusal {
      std::vector<std::string> flags;
      std::string batch;
      std::string message;
    };
    const std::vector<Refusal> refusals = {
        {{},
         "5",
         "--resume: the checkpoint's global batch is 24 samples (--batch 2 x --accum-steps 6 x 2 "
         "ranks); on 1 rank with --batch 5 that needs 24 / (5 x 1) = 4.8 accumulation steps, not "
         "a whole number: use a --batch dividing 24 (24 / 1 rank), e.g. --batch 4 (--accum-steps "
         "6), or a world size dividing 12 (24 / --batch 2)"},
        {{"--accum-steps", "6"},
         "2",
         "--resume: --accum-steps 6 gives a global batch of 12 samples (--batch 2 x --accum-steps "
         "6 x 1 rank), but the checkpoint's global batch is 24 samples (--batch 2 x --accum-steps "
         "6 x 2 ranks): a run keeps its global batch; leave --accum-steps out to have it chosen "
         "(12 here)"},
        {{"--effective-batch", "8"}, "2", "--accum-steps 4 gives a global batch of 8 samples"},
    };
    for (const Refusal& r : refusals) {
      CAPTURE(r.message);
      std::filesystem::remove(log);
      std::vector<std::string> flags = r.flags;
      flags.push_back("--resume");
      const int st = trainer_test::run_process(elastic_args(train, out, flags, r.batch), {}, log);
      const std::string text = read_file(log);
      INFO(text);
      REQUIRE(WIFEXITED(st));
      CHECK(WEXITSTATUS(st) == 2);
      CHECK(text.find(r.message) != std::string::npos);
      CHECK(read_file(out + "/checkpoint.pt") == before);  // nothing written
    }
  }
}
