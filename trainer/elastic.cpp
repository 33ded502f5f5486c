// plan_elastic (elastic.h): the accumulation steps that keep a checkpoint's global batch.
#include "elastic.h"

#include <cstdio>
#include <string>

#include "dscache/exit_codes.h"

namespace dscache {
namespace train {

namespace {

std::string ranks(uint64_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

// "--batch 2 x --accum-steps 3 x 4 ranks"
std::string product(uint64_t batch, uint64_t accum, uint64_t world) {
  return "--batch " + std::to_string(batch) + " x --accum-steps " + std::to_string(accum) + " x " +
         ranks(world);
}

std::string saved_text(const StepGeometry& s) {
  return "the checkpoint's global batch is " + std::to_string(s.global_batch()) + " samples (" +
         product(s.batch, s.accum_steps, s.world_size) + ")";
}

// What to change when `global` samples do not split into whole steps of `batch` x `world`.
std::string suggestion(const StepGeometry& saved, uint64_t batch, uint64_t world) {
  const uint64_t global = saved.global_batch();
  std::string s;
  if (global % world == 0) {
    const uint64_t per_rank = global / world;
    uint64_t b = batch < per_rank ? batch : per_rank;  // the largest divisor not above --batch
    while (per_rank % b != 0) --b;
    s = "a --batch dividing " + std::to_string(per_rank) + " (" + std::to_string(global) + " / " +
        ranks(world) + "), e.g. --batch " + std::to_string(b) + " (--accum-steps " +
        std::to_string(per_rank / b) + "), or ";
  }
  const uint64_t base = global % batch == 0 ? batch : saved.batch;
  return "use " + s + "a world size dividing " + std::to_string(global / base) + " (" +
         std::to_string(global) + " / --batch " + std::to_string(base) + ")";
}

}  // namespace

ElasticPlan plan_elastic(const StepGeometry& saved, uint64_t batch, uint64_t world_size,
                         uint64_t asked_accum) {
  const uint64_t global = saved.global_batch();
  const uint64_t per_step = batch * world_size;  // samples of one micro-batch on every rank
  ElasticPlan plan;
  if (asked_accum > 0) {
    if (per_step * asked_accum != global) {
      std::string hint = "; leave --accum-steps out to have it chosen";
      if (global % per_step == 0) hint += " (" + std::to_string(global / per_step) + " here)";
      throw UsageError("--resume: --accum-steps " + std::to_string(asked_accum) +
                       " gives a global batch of " + std::to_string(per_step * asked_accum) +
                       " samples (" + product(batch, asked_accum, world_size) + "), but " +
                       saved_text(saved) + ": a run keeps its global batch" + hint);
    }
    plan.accum_steps = static_cast<uint32_t>(asked_accum);
  } else if (global % per_step != 0) {
    char needs[64];
    std::snprintf(needs, sizeof needs, "%.4g",
                  static_cast<double>(global) / static_cast<double>(per_step));
    throw UsageError(
        "--resume: " + saved_text(saved) + "; on " + ranks(world_size) + " with --batch " +
        std::to_string(batch) + " that needs " + std::to_string(global) + " / (" +
        std::to_string(batch) + " x " + std::to_string(world_size) + ") = " + needs +
        " accumulation steps, not a whole number: " + suggestion(saved, batch, world_size));
  } else {
    plan.accum_steps = static_cast<uint32_t>(global / per_step);
  }
  if (batch != saved.batch || world_size != saved.world_size ||
      plan.accum_steps != saved.accum_steps) {
    plan.note = "resuming on " + ranks(world_size) +
                " (checkpoint: " + std::to_string(saved.world_size) + ")";
    if (batch != saved.batch) {
      plan.note += ", --batch " + std::to_string(batch) +
                   " (checkpoint: " + std::to_string(saved.batch) + ")";
    }
    plan.note += ": --accum-steps " + std::to_string(plan.accum_steps) +
                 " (checkpoint: " + std::to_string(saved.accum_steps) +
                 ") keeps the global batch of " + std::to_string(global) + " samples";
  }
  return plan;
}

}  // namespace train
}  // namespace dscache
