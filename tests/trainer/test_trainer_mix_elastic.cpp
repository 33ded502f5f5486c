// dscache-train's elastic resume over a mixture of caches (suite cli, meson test trainer_mix):
// a stratified 2-source run over 4 Gloo ranks on loopback, killed and resumed on 2 ranks, takes
// in every global step the (source, index) samples of an uninterrupted 4-rank run. Compared
// through DSCACHE_TEST_SAMPLE_LOG's mixture lines; prints the step table the docs quote.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fixtures.h"
#include "mix_fixtures.h"
#include "train_runs.h"

namespace {

using trainer_test::cat;
using trainer_test::read_file;
using trainer_test::run_ranks;
using trainer_test::TempDir;
using trainer_test::train_exe;

// a: 80 samples, b: 60; --mix 0.6,0.4 --mix-samples 120: 72 from a and 48 from b per epoch,
// fewer than each holds, so no sample comes twice in epoch 0. --batch 2 x global batch 24
// (stratum 24): 5 steps per epoch; 120 is a multiple of 4 and 2 ranks (no pad).
constexpr uint64_t kEpoch = 120, kGlobalBatch = 24, kStepsPerEpoch = 5;
const std::vector<double> kWeights = {0.6, 0.4};

std::vector<std::string> args(const std::string& a, const std::string& b, const std::string& out,
                              const std::string& batching, const std::vector<std::string>& extra) {
  return cat({train_exe(), "--train", a, "--train", b, "--output", out, "--mix-batching", batching},
             cat({"--mix", "0.6,0.4", "--mix-samples", "120", "--batch", "2", "--threads", "1",
                  "--workers", "1", "--seed", "4", "--epochs", "2", "--checkpoint-every", "1",
                  "--log-every", "1", "--no-progress"},
                 extra));
}

void run_world(const std::vector<std::string>& argv, int world, const std::string& log,
               const std::vector<std::string>& env, bool killed) {
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = r;
  std::filesystem::remove(log);
  for (int st : run_ranks(argv, world, ranks, log, env)) {
    INFO(read_file(log));
    if (killed) {
      REQUIRE(WIFSIGNALED(st));
      CHECK(WTERMSIG(st) == SIGKILL);
    } else {
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 0);
    }
  }
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE(
      "mixture elastic resume: 4 -> 2 ranks take every global step's (source, index) "
      "samples of an uninterrupted 4-rank run") {
    TempDir tmp;
    const std::string a = tmp.path() + "/a", b = tmp.path() + "/b";
    trainer_test::write_named_cache(a, 80, {"c0", "c1", "c2", "c3"}, 31);
    trainer_test::write_named_cache(b, 60, {"c2", "c3", "c4"}, 32);
    for (const std::string batching : {"stratified", "random"}) {
      CAPTURE(batching);
      const std::string dir = tmp.path() + "/" + batching;
      const std::string log = dir + ".log";
      const std::string ref_log = dir + ".ref.samples", got_log = dir + ".got.samples";
      run_world(args(a, b, dir + "-ref", batching, {"--accum-steps", "3"}), 4, log,
                {"DSCACHE_TEST_SAMPLE_LOG=" + ref_log}, false);
      const std::string out = dir + "-elastic";
      // 4 ranks killed after step 3 (72 samples of epoch 0 taken), resumed on 2 ranks.
      run_world(args(a, b, out, batching, {"--accum-steps", "3"}), 4, log,
                {"DSCACHE_TEST_SAMPLE_LOG=" + got_log, "DSCACHE_TEST_KILL_AFTER_STEPS=3"}, true);
      run_world(args(a, b, out, batching, {"--resume"}), 2, log,
                {"DSCACHE_TEST_SAMPLE_LOG=" + got_log}, false);
      const std::string text = read_file(log);
      INFO(text);
      CHECK(text.find("dscache-train: resuming on 2 ranks (checkpoint: 4): --accum-steps 6 "
                      "(checkpoint: 3) keeps the global batch of 24 samples\n") !=
            std::string::npos);

      const auto ref = trainer_test::mix_steps_of(read_file(ref_log));
      const auto got = trainer_test::mix_steps_of(read_file(got_log));
      REQUIRE(ref.size() == 2 * kStepsPerEpoch);
      REQUIRE(got.size() == ref.size());
      const std::vector<uint64_t> counts = trainer_test::largest_remainder_ref(kEpoch, kWeights);
      std::map<uint64_t, std::vector<trainer_test::MixSample>> per_epoch;
      std::printf(
          "mixture 4 -> 2 ranks (killed after step 3), %s, global batch %llu:\n"
          "  step  epoch  samples  a  b  equal to the 4-rank run\n",
          batching.c_str(), static_cast<unsigned long long>(kGlobalBatch));
      for (const auto& [step, r] : ref) {
        CAPTURE(step);
        REQUIRE(got.count(step) == 1);
        const auto& g = got.at(step);
        CHECK(g.epoch == r.epoch);
        CHECK(r.samples.size() == kGlobalBatch);
        const bool equal = g.samples == r.samples;
        CHECK(equal);  // the same (source, index) samples in every global step
        uint64_t from_a = 0;
        for (const auto& s : g.samples) from_a += s.first == 0;
        if (batching == "stratified") {
          // each global batch holds a's share: floor or ceil of 24 x 72 / 120 = 14.4
          CHECK(from_a >= 14);
          CHECK(from_a <= 15);
        }
        std::printf("  %4llu  %5llu  %7zu  %llu  %llu  %s\n", static_cast<unsigned long long>(step),
                    static_cast<unsigned long long>(g.epoch), g.samples.size(),
                    static_cast<unsigned long long>(from_a),
                    static_cast<unsigned long long>(g.samples.size() - from_a),
                    equal ? "yes" : "no");
        auto& e = per_epoch[g.epoch];
        e.insert(e.end(), g.samples.begin(), g.samples.end());
      }
      REQUIRE(per_epoch.size() == 2);
      for (const auto& [epoch, seen] : per_epoch) {
        CAPTURE(epoch);
        uint64_t per_source[2] = {0, 0};
        for (const auto& [source, index] : seen) {
          REQUIRE(source < 2);
          CHECK(index < (source == 0 ? 80u : 60u));
          ++per_source[source];
        }
        CHECK(per_source[0] == counts[0]);  // 72
        CHECK(per_source[1] == counts[1]);  // 48
      }
      // Epoch 0 draws fewer samples than either cache holds: each sample at most once.
      const auto& first = per_epoch.at(0);
      CHECK(std::set<trainer_test::MixSample>(first.begin(), first.end()).size() == kEpoch);
      // The epoch lines' counts, carried across the kill in the checkpoint.
      std::vector<nlohmann::json> epochs;
      for (const auto& l : trainer_test::read_metrics(out + "/metrics.jsonl")) {
        if (l["kind"] == "epoch") epochs.push_back(l);
      }
      REQUIRE(epochs.size() == 2);
      for (const auto& l : epochs) {
        CAPTURE(l.dump());
        CHECK(l["samples_per_source"]["a"].get<uint64_t>() == counts[0]);
        CHECK(l["samples_per_source"]["b"].get<uint64_t>() == counts[1]);
      }
      std::fflush(stdout);
    }
  }
}
