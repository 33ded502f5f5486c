// plan_elastic (trainer/elastic.h): the --accum-steps of a resume on another number of ranks or
// another --batch, and the refusals with their numbers. Links elastic.cpp alone (no LibTorch).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dscache/exit_codes.h"
#include "elastic.h"

namespace {

using dscache::UsageError;
using dscache::train::ElasticPlan;
using dscache::train::plan_elastic;
using dscache::train::StepGeometry;

// The message of the UsageError plan_elastic throws ("" when it does not throw).
std::string refusal(const StepGeometry& saved, uint64_t batch, uint64_t world, uint64_t asked) {
  try {
    plan_elastic(saved, batch, world, asked);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("plan_elastic: the accumulation steps that keep the global batch") {
  struct Case {
    StepGeometry saved;
    uint64_t batch, world, asked;
    uint32_t accum;
  };
  const StepGeometry b24{2, 3, 4};  // 24 samples per optimizer step
  const std::vector<Case> cases = {
      {b24, 2, 2, 0, 6},        {b24, 2, 1, 0, 12},      {b24, 2, 3, 0, 4},
      {b24, 2, 4, 0, 3},        {b24, 4, 2, 0, 3},       {b24, 24, 1, 0, 1},
      {b24, 2, 2, 6, 6},        {b24, 1, 24, 0, 1},      {{8, 2, 2}, 8, 1, 0, 4},
      {{8, 2, 2}, 16, 2, 0, 1}, {{5, 1, 1}, 5, 1, 0, 1},
  };
  for (const Case& c : cases) {
    CAPTURE(c.batch);
    CAPTURE(c.world);
    const ElasticPlan p = plan_elastic(c.saved, c.batch, c.world, c.asked);
    CHECK(p.accum_steps == c.accum);
    CHECK(c.batch * p.accum_steps * c.world == c.saved.global_batch());
    const bool same = c.batch == c.saved.batch && c.world == c.saved.world_size;
    CHECK(p.note.empty() == same);  // said only when the geometry changed
  }
}

TEST_CASE("plan_elastic: the note names both geometries once") {
  CHECK(plan_elastic({2, 3, 4}, 2, 2, 0).note ==
        "resuming on 2 ranks (checkpoint: 4): --accum-steps 6 (checkpoint: 3) keeps the global "
        "batch of 24 samples");
  CHECK(plan_elastic({2, 3, 4}, 4, 1, 0).note ==
        "resuming on 1 rank (checkpoint: 4), --batch 4 (checkpoint: 2): --accum-steps 6 "
        "(checkpoint: 3) keeps the global batch of 24 samples");
}

TEST_CASE("plan_elastic: no whole number of steps keeps the global batch: refused with numbers") {
  // 24 / (5 x 3) = 1.6: a --batch dividing 8 (the largest not above 5 is 4), or another W.
  CHECK(refusal({2, 3, 4}, 5, 3, 0) ==
        "--resume: the checkpoint's global batch is 24 samples (--batch 2 x --accum-steps 3 x 4 "
        "ranks); on 3 ranks with --batch 5 that needs 24 / (5 x 3) = 1.6 accumulation steps, not "
        "a whole number: use a --batch dividing 8 (24 / 3 ranks), e.g. --batch 4 (--accum-steps "
        "2), or a world size dividing 12 (24 / --batch 2)");
  // 24 samples do not split over 5 ranks at all: only the world size can change.
  CHECK(refusal({2, 3, 4}, 2, 5, 0) ==
        "--resume: the checkpoint's global batch is 24 samples (--batch 2 x --accum-steps 3 x 4 "
        "ranks); on 5 ranks with --batch 2 that needs 24 / (2 x 5) = 2.4 accumulation steps, not "
        "a whole number: use a world size dividing 12 (24 / --batch 2)");
  // a --batch larger than a rank's share of the step
  const std::string big = refusal({2, 3, 4}, 16, 2, 0);
  CHECK(big.find("a --batch dividing 12 (24 / 2 ranks), e.g. --batch 12 (--accum-steps 1)") !=
        std::string::npos);
  CHECK(big.find("not a whole number") != std::string::npos);
}

TEST_CASE("plan_elastic: an explicit --accum-steps giving another global batch is refused") {
  const std::string m = refusal({2, 3, 4}, 2, 2, 3);
  CHECK(m ==
        "--resume: --accum-steps 3 gives a global batch of 12 samples (--batch 2 x --accum-steps "
        "3 x 2 ranks), but the checkpoint's global batch is 24 samples (--batch 2 x --accum-steps "
        "3 x 4 ranks): a run keeps its global batch; leave --accum-steps out to have it chosen (6 "
        "here)");
  // no whole number fits either: no number suggested
  const std::string none = refusal({2, 3, 4}, 5, 1, 4);
  CHECK(none.find("gives a global batch of 20 samples") != std::string::npos);
  CHECK(none.find("here)") == std::string::npos);
  // the checkpoint's own geometry given explicitly resumes as it is
  CHECK(plan_elastic({2, 3, 4}, 2, 4, 3).accum_steps == 3);
  CHECK(plan_elastic({2, 3, 4}, 2, 4, 3).note.empty());
}
