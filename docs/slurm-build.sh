#!/bin/bash
# Build a dscache cache on a Slurm cluster: 4 array tasks each build one part of the cache
# order (dscache build --part auto reads SLURM_ARRAY_TASK_ID / _COUNT / _MIN), then a merge
# job that starts when every task succeeded joins them into the cache a single build makes.
#
#   SRC=/data/imagenet/train PARTS=/scratch/$USER/parts OUT=/scratch/$USER/train.dscache \
#     sbatch docs/slurm-build.sh
#
# The parts and OUT should share a filesystem: merge then hard-links the shards (else copies).
# Tested by tests/cli/test_merge.py (doc_examples), which runs the build line below.
#SBATCH --job-name=dscache-build
#SBATCH --array=0-3
#SBATCH --cpus-per-task=16
#SBATCH --time=04:00:00
set -euo pipefail

# Every part must use the same options (merge refuses parts whose options differ).
dscache build "$SRC" "$PARTS/part-$SLURM_ARRAY_TASK_ID" --size 24 --shard-size 1G --part auto --quiet

# Task 0 queues the merge once, to run after the whole array succeeded.
if [ "$SLURM_ARRAY_TASK_ID" = "$SLURM_ARRAY_TASK_MIN" ]; then
  sbatch --dependency=afterok:"$SLURM_ARRAY_JOB_ID" --job-name=dscache-merge \
    --wrap "dscache merge $PARTS/part-* $OUT --resume"
fi
