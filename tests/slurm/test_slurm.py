#!/usr/bin/python3
"""The `slurm` suite: the documented Slurm scripts (docs/slurm-build.sh, docs/slurm-train.sh),
run unchanged on a private single-node Slurm cluster (cluster.py) started in the case's temp dir.

Cases (one meson test each, `slurm_<case>`):
  build_array     sbatch docs/slurm-build.sh: a 4-task array on Fashion-MNIST + the merge job it
                  queues equal a single `dscache build` with the same options;
  build_repair    one array task cancelled mid-build (scancel JOB_TASK): the merge fails naming
                  the part and the repair command; that command (sbatch --array=2 ...) resumes
                  the part and its merge makes the same cache;
  train_srun      srun --ntasks=2 dscache-train = dscache-train --nproc-per-node 2 (same model.pt);
  train_requeue   sbatch docs/slurm-train.sh stopped by scancel --signal=TERM writes a checkpoint
                  (exit 143), `scontrol requeue` resumes it to an uninterrupted run's model.pt.

Usage: test_slurm.py CASE   (env DSCACHE, DSCACHE_TRAIN (empty: no trainer built; the train cases
SKIP), DSCACHE_SOURCE_ROOT). SKIP (77) only where the Slurm daemons are missing or cannot start.
"""

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # testrunner.py
sys.path.insert(0, str(HERE.parent / "cli"))  # cli_helpers.py, test_merge.py

import numpy as np  # noqa: E402

import testrunner  # noqa: E402
from cli_helpers import check, check_eq, load_images, load_manifest, run  # noqa: E402
from cluster import Cluster  # noqa: E402
from test_merge import compare_merged  # noqa: E402
from testrunner import Failure, Skip  # noqa: E402

ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", HERE.parent.parent))
BUILD_SH = ROOT / "docs" / "slurm-build.sh"
TRAIN_SH = ROOT / "docs" / "slurm-train.sh"
FASHION = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
# The options docs/slurm-build.sh gives every part: a single build with them is the reference.
DOC_BUILD_OPTS = ["--size", "24", "--shard-size", "1G"]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def dscache_bin(tmp, pause_task=None):
    """A directory for the jobs' PATH holding `dscache` and `dscache-train`: links to the built
    binaries. pause_task=I: `dscache` is instead a two-line shell wrapper that makes the first
    `dscache build` of array task I stop itself after its first shard (the SIGSTOP test hook
    DSCACHE_TEST_PAUSE_AT), writing its pid to tmp/paused/pid, then execs the real binary."""
    b = tmp / "bin"
    b.mkdir()
    real = Path(os.environ["DSCACHE"]).resolve()
    if pause_task is None:
        (b / "dscache").symlink_to(real)
    else:
        mark = tmp / "paused"
        (b / "dscache").write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = build ] && [ "$SLURM_ARRAY_TASK_ID" = {pause_task} ] && '
            f'mkdir {mark} 2>/dev/null; then\n'
            f"  echo $$ > {mark}/pid; export DSCACHE_TEST_PAUSE_AT=shard-committed\nfi\n"
            f'exec {real} "$@"\n')
        os.chmod(b / "dscache", 0o755)
    train = os.environ.get("DSCACHE_TRAIN", "")
    if train:
        (b / "dscache-train").symlink_to(Path(train).resolve())
    return b


def job_env(bin_dir, **extra):
    env = {"PATH": f"{bin_dir}:{Cluster._sbin_path()}"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def jobs_named(cluster, name):
    """Ids of every job called `name` that scontrol still lists, in submission order."""
    p = cluster.run(["scontrol", "--oneliner", "show", "job"], expect_rc=None)
    ids = set()
    for line in p.stdout.splitlines():
        f = dict(re.findall(r"(\w+)=(\S*)", line))
        if f.get("JobName") == name:
            ids.add(int(f.get("ArrayJobId") or f["JobId"]))
    return [str(i) for i in sorted(ids)]


def wait_job_named(cluster, name, count, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = jobs_named(cluster, name)
        if len(ids) >= count:
            return ids
        time.sleep(0.5)
    raise Failure(f"no {count} job(s) named {name} after {timeout}s (seen {jobs_named(cluster, name)})"
                  f"\n{cluster.logs()}")


def job_output(tmp, job_id, task=None):
    """The job's slurm-%j.out (or, for an array task, slurm-%A_%a.out) in the submit dir."""
    name = f"slurm-{job_id}.out" if task is None else f"slurm-{job_id}_{task}.out"
    path = tmp / name
    return path.read_text(errors="replace") if path.exists() else f"({name} not written)"


def check_states(states, want, what, tmp=None):
    if states != want:
        outs = ""
        if tmp is not None:
            outs = "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')}"
                             for p in sorted(tmp.glob("slurm-*.out")))
        raise Failure(f"{what}: states {states}, expected {want}\n{outs}")


def single_build(tmp, src):
    single = tmp / "single"
    run(["build", src, single] + DOC_BUILD_OPTS + ["--threads", "2", "--quiet"])
    return single


def check_same_cache(out, single, parts, what):
    """The merged cache equals the single build: compare_merged (side files byte for byte,
    manifests but for created_utc and the shard split, `dscache verify`) and every image."""
    compare_merged(out, single, what, parts)
    a, b = load_images(out), load_images(single)
    check_eq(a.shape, b.shape, f"{what}: images shape")
    check(np.array_equal(a, b), f"{what}: images differ from a single build")
    check_eq(len(load_manifest(out)["shards"]), len(parts), f"{what}: one shard per part")


def start(tmp):
    if not FASHION.exists():
        raise Failure(f"{FASHION} missing: install dataset-fashion-mnist (scripts/setup-deps)")
    return Cluster(tmp / "cluster")


# --------------------------------------------------------------------------------------------
# Builds.

def case_build_array(tmp):
    bin_dir = dscache_bin(tmp)
    parts, out = tmp / "parts", tmp / "out.dscache"
    with start(tmp) as c:
        env = job_env(bin_dir, SRC=FASHION, PARTS=parts, OUT=out)
        t0 = time.monotonic()
        job = c.sbatch([BUILD_SH], env=env, cwd=tmp)
        states = c.wait_jobs(job, lambda s: len(s) == 4 and all(v in FINAL for v in s.values()),
                             "the build array", timeout=300)
        check_states(states, {f"{job}_{i}": "COMPLETED" for i in range(4)}, "build array", tmp)
        for i in range(4):
            m = load_manifest(parts / f"part-{i}")
            check_eq((m["part"]["index"], m["part"]["count"]), (i, 4), f"part-{i}: part key")
        merges = wait_job_named(c, "dscache-merge", 1)
        check_eq(len(merges), 1, "merge jobs queued by the array (one, by its first task)")
        dep_states = c.wait_finished(merges[0], "the merge job", timeout=120)
        check_states(dep_states, {f"{merges[0]}_0": "COMPLETED"}, "merge job", tmp)
        print(f"array + merge took {time.monotonic() - t0:.1f}s")
        # A wrong re-run fails fast: a task id outside the parts, before any merge is queued.
        bad = c.sbatch(["--array=4", BUILD_SH], env=env, cwd=tmp)
        check_states(c.wait_finished(bad, "--array=4"), {f"{bad}_4": "FAILED"}, "--array=4", tmp)
        check_eq(c.job_field(f"{bad}_4", "ExitCode"), "2:0", "--array=4: exit code")
        check("there are only 4 parts" in job_output(tmp, bad, 4),
              "--array=4: message " + job_output(tmp, bad, 4))
        check_eq(jobs_named(c, "dscache-merge"), merges, "--array=4 queued no merge")
    single = single_build(tmp, FASHION)
    check_same_cache(out, single, [parts / f"part-{i}" for i in range(4)], "slurm array")


def process_state(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def case_build_repair(tmp):
    bin_dir = dscache_bin(tmp, pause_task=2)
    parts, out = tmp / "parts", tmp / "out.dscache"
    with start(tmp) as c:
        env = job_env(bin_dir, SRC=FASHION, PARTS=parts, OUT=out)
        job = c.sbatch([BUILD_SH], env=env, cwd=tmp)
        # Task 2 stops itself after committing its first shard: cancel it there, mid-build.
        pid_file = tmp / "paused" / "pid"
        deadline = time.monotonic() + 300
        while not (pid_file.exists() and pid_file.read_text().strip()
                   and process_state(pid_file.read_text().strip()) == "T"):
            if time.monotonic() > deadline:
                raise Failure(f"task 2 never paused: {c.job_states(job)}\n{c.logs()}")
            time.sleep(0.2)
        c.run(["scancel", f"{job}_2"])
        states = c.wait_jobs(job, lambda s: len(s) == 4 and all(v in FINAL for v in s.values()),
                             "the build array", timeout=300)
        want = {f"{job}_{i}": "COMPLETED" for i in range(4)}
        want[f"{job}_2"] = "CANCELLED"
        check_states(states, want, "array with task 2 cancelled", tmp)
        check(not (parts / "part-2" / "manifest.json").exists(), "cancelled part 2 has a manifest")
        check((parts / ".part-2.partial").is_dir(), "the cancelled part left no partial build "
              f"to resume: {sorted(p.name for p in parts.iterdir())}")
        merges = wait_job_named(c, "dscache-merge", 1)
        check_states(c.wait_finished(merges[0], "the first merge"), {f"{merges[0]}_0": "FAILED"},
                     "merge with part 2 missing", tmp)
        text = job_output(tmp, merges[0], 0)
        check("part 2 of 4 did not finish: part 2 unfinished" in text and
              "sbatch --array=2 docs/slurm-build.sh" in text, f"merge's message: {text!r}")
        check(not out.exists(), "a failed merge left OUT")

        # The documented repair: re-run task 2 alone; it resumes and queues its own merge.
        repair = c.sbatch(["--array=2", BUILD_SH], env=env, cwd=tmp)
        check_states(c.wait_finished(repair, "the repair task"), {f"{repair}_2": "COMPLETED"},
                     "repair", tmp)
        merges = wait_job_named(c, "dscache-merge", 2)
        check_states(c.wait_finished(merges[1], "the repair's merge"),
                     {f"{merges[1]}_0": "COMPLETED"}, "merge after the repair", tmp)
    single = single_build(tmp, FASHION)
    check_same_cache(out, single, [parts / f"part-{i}" for i in range(4)], "repaired array")


# --------------------------------------------------------------------------------------------
# Training.

def train_setup(tmp):
    if not os.environ.get("DSCACHE_TRAIN"):
        raise Skip("dscache-train is not built (-Dtrainer=disabled or no LibTorch)")
    cache = tmp / "fm.dscache"
    run(["build", FASHION, cache, "--size", "28", "--threads", "2", "--quiet"])
    return cache


def train_flags(cache, steps):
    return ["--train", cache, "--batch", "32", "--max-steps", steps, "--precision", "fp32",
            "--seed", "3", "--log-every", "10", "--no-progress"]


def nproc_reference(tmp, cache, steps, threads):
    """dscache-train --nproc-per-node 2, outside Slurm: the reference model.pt."""
    ref = tmp / "ref"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    testrunner.run_cmd([os.environ["DSCACHE_TRAIN"], "--nproc-per-node", "2", "--threads",
                        threads, "--output", ref] + train_flags(cache, steps), env=env,
                       timeout=600)
    return ref


def losses(run_dir):
    lines = [l for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r.get("kind") == "step"]


def case_train_srun(tmp):
    cache = train_setup(tmp)
    bin_dir = dscache_bin(tmp)
    ref = nproc_reference(tmp, cache, 40, 1)
    with start(tmp) as c:
        p = c.run(["srun", "--ntasks=2", "--cpus-per-task=1", "dscache-train", "--threads", "1",
                   "--output", tmp / "srun"] + train_flags(cache, 40),
                  env=job_env(bin_dir), cwd=tmp, timeout=600)
    check("2 ranks from Slurm (SLURM_PROCID" in p.stderr,
          f"srun --ntasks=2 did not train as 2 ranks taken from Slurm: {p.stderr}")
    check_eq(losses(tmp / "srun"), losses(ref), "metrics: srun vs --nproc-per-node 2")
    check((tmp / "srun" / "model.pt").read_bytes() == (ref / "model.pt").read_bytes(),
          "model.pt of srun --ntasks=2 differs from --nproc-per-node 2")


def case_train_requeue(tmp):
    cache = train_setup(tmp)
    bin_dir = dscache_bin(tmp)
    steps = 300
    ref = nproc_reference(tmp, cache, steps, 1)  # docs/slurm-train.sh: --cpus-per-task=1
    run_dir = tmp / "run"
    with start(tmp) as c:
        env = job_env(bin_dir, CACHE=cache, RUN=run_dir)
        flags = [str(f) for f in train_flags(cache, steps)[2:]]  # the script gives --train
        job = c.sbatch([TRAIN_SH] + flags, env=env, cwd=tmp)
        # Once training is under way (a step line in metrics.jsonl), stop it as preemption does.
        deadline = time.monotonic() + 300
        while not (run_dir / "metrics.jsonl").exists() or not losses(run_dir):
            if time.monotonic() > deadline or c.job_states(job).get(job) in FINAL:
                raise Failure(f"training never logged a step: {c.job_states(job)}\n"
                              f"{job_output(tmp, job)}")
            time.sleep(0.1)
        c.run(["scancel", "--signal=TERM", job])
        check_states(c.wait_finished(job, "the stopped training", timeout=300), {job: "FAILED"},
                     "training stopped by SIGTERM", tmp)
        check_eq(c.job_field(job, "ExitCode"), "143:0", "exit code of the stopped job")
        log = job_output(tmp, job)
        m = re.search(r"stopped by SIGTERM at epoch \d+ step (\d+); checkpoint written", log)
        check(m is not None, f"no checkpoint message in the job's output:\n{log}")
        stopped_at = int(m.group(1))
        check(0 < stopped_at < steps, f"stopped at step {stopped_at}, not mid-run")
        check((run_dir / "checkpoint.pt").exists(), "no checkpoint.pt after the stop")
        check(not (run_dir / "model.pt").exists(), "a stopped run wrote model.pt")

        c.run(["scontrol", "requeue", job])
        states = c.wait_jobs(job, lambda s: s.get(job) == "COMPLETED" or (
            s.get(job) in FINAL and c.job_field(job, "Restarts") not in (None, "0")),
            "the requeued training", timeout=600)
        check_states(states, {job: "COMPLETED"}, "requeued training", tmp)
        check_eq(c.job_field(job, "Restarts"), "1", "restarts of the requeued job")
    log = job_output(tmp, job)
    check("resuming from" in log and log.index("resuming from") > log.index("stopped by SIGTERM"),
          f"the appended log shows no resume after the stop:\n{log}")
    # Every step line, also the first after the resume, carries the uninterrupted run's running
    # mean (the resumed run's line wins where both runs logged a step).
    check_eq(dict(losses(run_dir)), dict(losses(ref)), "step losses of the stopped + resumed run")
    check((run_dir / "model.pt").read_bytes() == (ref / "model.pt").read_bytes(),
          "model.pt after stop + requeue differs from an uninterrupted run")


CASES = {
    "build_array": case_build_array,
    "build_repair": case_build_repair,
    "train_srun": case_train_srun,
    "train_requeue": case_train_requeue,
}

def stop_on_sigterm(signum, frame):
    # meson's timeout sends SIGTERM: unwind, so that the `with Cluster` blocks stop the daemons.
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    sys.exit(testrunner.main(CASES, sys.argv, prefix="dscache-slurm-"))
