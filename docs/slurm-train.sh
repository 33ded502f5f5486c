#!/bin/bash
# Train with dscache-train on a Slurm cluster: one task per rank, started by srun, which the
# trainer reads its rank, world size, local rank and master from (SLURM_PROCID, SLURM_NTASKS,
# SLURM_LOCALID, the first node of the step). Preemption- and retry-safe:
#
#   export CACHE=/scratch/$USER/train.dscache RUN=/scratch/$USER/run
#   sbatch docs/slurm-train.sh --epochs 10 --batch 64      # extra arguments go to dscache-train
#
# --signal=TERM@120: 120 s before the time limit Slurm sends SIGTERM to the job step's tasks (the
#   trainers; without `B:`, which would signal only the batch shell). Each trainer finishes its
#   optimizer step, rank 0 writes RUN/checkpoint.pt, and they exit 143. `scancel --signal=TERM`
#   and preemption (PreemptMode=REQUEUE) stop it the same way. 120 s must cover one step and one
#   checkpoint write; Slurm's KillWait (30 s by default) then SIGKILLs what is left.
# --requeue: the job may be requeued (preemption, node failure, `scontrol requeue JOBID`); it
#   starts again with the same arguments and `--resume` continues from the checkpoint (on a
#   fresh RUN it starts afresh), so the finished model is the one an uninterrupted run makes.
# --open-mode=append: the requeued run appends to the same slurm-JOBID.out.
# `exec srun`: srun replaces the batch shell, so a signal to the batch step (`--signal=B:TERM`,
#   `scancel --batch`) reaches srun, which forwards it to the trainers, instead of killing a
#   shell and leaving the trainers running without a checkpoint.
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

exec srun dscache-train --train "$CACHE" --output "$RUN" --resume \
  --threads "$SLURM_CPUS_PER_TASK" "$@"
