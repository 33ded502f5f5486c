#!/bin/bash
# Train with dscache-train on a Slurm cluster: one task per rank, started by srun, which the
# trainer reads its rank, world size, local rank and master from (SLURM_PROCID,
# SLURM_STEP_NUM_TASKS, SLURM_LOCALID, the first node of the step, a port from the job id).
# Preemption- and retry-safe:
#
#   export CACHE=/scratch/$USER/train.dscache RUN=/scratch/$USER/run
#   sbatch docs/slurm-train.sh --epochs 10 --batch 64      # extra arguments go to dscache-train
#
# --signal=TERM@120: 120 s before the time limit Slurm sends SIGTERM to the job step's tasks (the
#   trainers). Each finishes its optimizer step, rank 0 writes RUN/checkpoint.pt, and they exit
#   143. `scancel --signal=TERM JOBID` stops it the same way, and so does a plain `scancel` or
#   preemption, whose SIGTERM is followed by SIGKILL after KillWait (30 s by default): a step and
#   a checkpoint write must fit in that. Not `--signal=B:TERM@120` (nor `scancel --batch`): that
#   signals only the batch step, here srun, and srun answers SIGTERM by killing the job step
#   (the trainers get SIGKILL, no checkpoint; seen on Slurm 22.05).
# --requeue: the job may be requeued (preemption, node failure, `scontrol requeue JOBID`); it
#   starts again with the same arguments and `--resume` continues from the checkpoint (on a
#   fresh RUN it starts afresh), so the finished model is the one an uninterrupted run makes.
# --open-mode=append: the requeued run appends to the same slurm-JOBID.out.
# `exec srun`: no shell stays between Slurm and srun, so the job's exit code is srun's (143
#   after a clean stop).
#
# RUN must be on a filesystem every node sees (every rank reads the checkpoint on resume).
# Tested on a real single-node Slurm by tests/slurm/test_slurm.py (run unchanged: stopped with
# scancel --signal=TERM, requeued, and compared with an uninterrupted run).
#SBATCH --job-name=dscache-train
#SBATCH --ntasks=2
# CPUs per rank: the trainer's intra-op threads (--threads below). Small so the job starts on a
# 2-CPU node; give each rank the cores it can use (e.g. 8) on real nodes.
#SBATCH --cpus-per-task=1
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --time=04:00:00
set -euo pipefail
: "${CACHE:?set CACHE (the training cache) before sbatch}" "${RUN:?set RUN (the run directory)}"

exec srun dscache-train --train "$CACHE" --output "$RUN" --resume \
  --threads "$SLURM_CPUS_PER_TASK" "$@"
