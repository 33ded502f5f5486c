#!/bin/bash
# Build a dscache cache on a Slurm cluster: a 4-task job array, each task builds one part of the
# cache order, and a merge job that joins the parts into the cache a single build makes.
#
#   export SRC=/data/imagenet/train PARTS=/scratch/$USER/parts OUT=/scratch/$USER/train.dscache
#   sbatch docs/slurm-build.sh
#
# The first task of the array queues the merge (`--dependency=afterany`: it runs when every task
# has ended, whether or not they succeeded). The merge checks that every part finished; if one
# did not (a task failed, was cancelled or hit its time limit) it names the missing parts, prints
# the command that rebuilds them and fails. Repair, e.g. part 2:
#
#   sbatch --array=2 docs/slurm-build.sh
#
# The re-run task resumes part 2 from its finished shards (`--resume`; a fresh part is just
# built) and, being the first task of its array, queues a new merge after it. Retries are safe:
# a task requeued by Slurm (preemption, a node failure) resumes the same way.
#
# PARTS and OUT should share a filesystem: merge then hard-links the shards (else copies).
# Tested on a real single-node Slurm by tests/slurm/test_slurm.py (run unchanged) and, for the
# build line, by tests/cli/test_merge.py (doc_examples).
#SBATCH --job-name=dscache-build
#SBATCH --array=0-3
# CPUs per task: dscache build decodes with this many threads (--threads below). Kept small so
# the job starts on any node; raise it (e.g. 16) where nodes have the cores: a value larger than
# every node of the partition leaves the job PENDING forever (Reason=PartitionConfig).
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
set -euo pipefail

# The number of parts: part I is array task I, so a re-run of some tasks (--array=2) still builds
# "part 2 of 4". Must equal the size of the #SBATCH --array range above; a task id outside
# 0..parts-1 is refused at once (exit 2).
parts=4
: "${PARTS:?set PARTS (the directory of the parts) before sbatch}" "${OUT:?set OUT (the merged cache)}"

if [ "${1:-}" = "--merge" ]; then
  # The merge job. `dscache merge --parts` takes the part directories in part order and first
  # checks that every part finished (its manifest.json, written last, exists); else it names
  # each missing or unfinished part, writes nothing and exits 1. Its list of part numbers is
  # what the repair command re-runs.
  dirs=()
  for ((i = 0; i < parts; i++)); do dirs+=("$PARTS/part-$i"); done
  log=$(mktemp)
  rc=0
  dscache merge --parts "$parts" "${dirs[@]}" "$OUT" --resume 2>"$log" || rc=$?
  cat "$log" >&2
  list=$(sed -n 's/.*parts\{0,1\} \([0-9,]*\) of [0-9]* did not finish.*/\1/p' "$log")
  rm -f "$log"
  if [ -n "$list" ]; then
    echo "dscache-merge: rebuild them with: sbatch --array=$list docs/slurm-build.sh" >&2
  fi
  exit "$rc"
fi

: "${SRC:?set SRC (the dataset) before sbatch}" "${SLURM_ARRAY_TASK_ID:?submit with sbatch}"
if [ "$SLURM_ARRAY_TASK_ID" -ge "$parts" ]; then
  echo "dscache-build: array task $SLURM_ARRAY_TASK_ID: there are only $parts parts (0..$((parts - 1)))" >&2
  exit 2
fi

# The first task of this array (and only its first run, not a requeue) queues the merge, before
# building, so a task that fails later still leaves a merge that reports it.
if [ "$SLURM_ARRAY_TASK_ID" = "$SLURM_ARRAY_TASK_MIN" ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  # --array=0: one merge task (the #SBATCH --array above would start 4). "$0" is Slurm's copy of
  # this script, read by sbatch now.
  sbatch --dependency=afterany:"$SLURM_ARRAY_JOB_ID" --job-name=dscache-merge --array=0 \
    --cpus-per-task=1 "$0" --merge
fi

# Every part must use the same options (merge refuses parts whose options differ).
dscache build "$SRC" "$PARTS/part-$SLURM_ARRAY_TASK_ID" --size 24 --shard-size 1G \
  --part "$SLURM_ARRAY_TASK_ID/$parts" --threads "$SLURM_CPUS_PER_TASK" --resume --quiet
