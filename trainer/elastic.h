// Elastic resume of dscache-train: the accumulation steps that keep a checkpoint's global batch
// (batch x accum-steps x world size) on another number of ranks or another --batch. Pure; no
// LibTorch. docs/TRAINER.md "Changing the number of ranks".
#pragma once

#include <cstdint>
#include <string>

namespace dscache {
namespace train {

// How the samples of one optimizer step are split: per rank `batch` samples per micro-batch,
// `accum_steps` micro-batches, over `world_size` ranks.
struct StepGeometry {
  uint64_t batch = 1;        // --batch: samples per micro-batch on one rank
  uint64_t accum_steps = 1;  // --accum-steps: micro-batches per optimizer step
  uint64_t world_size = 1;   // WORLD_SIZE: ranks
  uint64_t global_batch() const { return batch * accum_steps * world_size; }
};

struct ElasticPlan {
  uint32_t accum_steps = 1;  // this run's --accum-steps
  // One line for the user when the geometry differs from the checkpoint's ("resuming on 2 ranks
  // (checkpoint: 4): --accum-steps 6 (checkpoint: 3) keeps the global batch of 24 samples");
  // empty when it is the checkpoint's.
  std::string note;
};

// The --accum-steps of a resume with `batch` and `world_size` from a checkpoint made with `saved`.
// `asked_accum`: the --accum-steps the user gave (or --effective-batch / --batch); 0 when neither
// was given, then the one keeping saved.global_batch() is chosen. Throws UsageError (exit 2) with
// the numbers when no whole number of steps keeps it, or when the one asked gives another global
// batch.
ElasticPlan plan_elastic(const StepGeometry& saved, uint64_t batch, uint64_t world_size,
                         uint64_t asked_accum);

}  // namespace train
}  // namespace dscache
