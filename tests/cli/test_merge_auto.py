#!/usr/bin/python3
"""Tests of `dscache build --part auto` and the docs' partitioned builds: the part and count taken
from Slurm array variables (a step included) and Kubernetes indexed-job variables, ids off the
step and bad counts refused; the build lines of docs/slurm-build.sh and docs/k8s-build-job.yaml
run as written, each merged result equal to the single build (test_merge.py's compare_merged).

Usage: test_merge_auto.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo
root)
"""

import os
import re
import shlex
import sys
from pathlib import Path

from cli_helpers import DSCACHE, Failure, build, check, check_eq, load_manifest, main, run
from test_merge import compare_merged, make_source, popen, wait_all


def case_part_auto(tmp):
    src = tmp / "src"
    make_source(src)
    opts = ["--size", "16", "--quiet"]
    (tmp / "p").mkdir()
    slurm = {"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "10"}
    for i in range(4):
        env = dict(slurm, SLURM_ARRAY_TASK_ID=str(10 + i))
        p = build(src, tmp / "p" / f"s{i}", *opts, "--part", "auto", env_extra=env)
        check(f"part {i} of 4" in p.stderr and "SLURM_ARRAY_TASK_ID" in p.stderr,
              f"slurm stderr {p.stderr!r}")
        check_eq(load_manifest(tmp / "p" / f"s{i}")["part"]["index"], i, "slurm part index")
        p = build(src, tmp / "p" / f"k{i}", *opts, "--part", "auto", "--parts", "4",
                  env_extra={"JOB_COMPLETION_INDEX": str(i)})
        check(f"part {i} of 4" in p.stderr and "JOB_COMPLETION_INDEX" in p.stderr,
              f"k8s stderr {p.stderr!r}")
    run(["merge"] + [tmp / "p" / f"s{i}" for i in range(4)] + [tmp / "ms"])
    run(["merge"] + [tmp / "p" / f"k{i}" for i in range(4)] + [tmp / "mk"])
    build(src, tmp / "single", *opts)
    compare_merged(tmp / "ms", tmp / "single", "slurm")
    compare_merged(tmp / "mk", tmp / "single", "k8s")
    bad = [
        (["--part", "4/4"], {}, r"not below"),
        (["--part", "1/0"], {}, r"at least 1"),
        (["--part", "x"], {}, r"expected I/N"),
        (["--part", "-1/4"], {}, r"--part"),
        (["--part", "1/4", "--parts", "4"], {}, r"--parts applies to --part auto"),
        (["--parts", "4"], {}, r"--parts needs --part auto"),
        (["--part", "auto"], {}, r"neither SLURM_ARRAY_TASK_ID"),
        (["--part", "auto"], {"JOB_COMPLETION_INDEX": "1"}, r"pass --parts"),
        (["--part", "auto", "--parts", "4"], {"JOB_COMPLETION_INDEX": "4"}, r"not below"),
        (["--part", "auto"], {"SLURM_ARRAY_TASK_ID": "1"}, r"SLURM_ARRAY_TASK_COUNT is not"),
        (["--part", "auto"], {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4"},
         r"not below"),
        (["--part", "auto", "--parts", "3"],
         {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, r"disagrees"),
        (["--part", "auto"], {"SLURM_ARRAY_TASK_ID": "a", "SLURM_ARRAY_TASK_COUNT": "4"},
         r"SLURM_ARRAY_TASK_ID 'a'"),
    ]
    for args, env, pattern in bad:
        env = dict(env)
        for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                  "JOB_COMPLETION_INDEX"):
            if k not in env and k in os.environ:
                raise Failure(f"the test environment sets {k}")
        p = build(src, tmp / "bad", *opts, *args, expect_rc=2, env_extra=env)
        check(re.search(pattern, p.stderr), f"{args} {env}: stderr {p.stderr!r} lacks {pattern}")
        check(not (tmp / "bad").exists(), f"{args}: output created")


def case_part_auto_step(tmp):
    """Slurm `--array=0-10:2` (ids 0, 2, ..., 10; COUNT 6, MIN 0, MAX 10, STEP 2, as Slurm sets
    them) builds parts 0..5 of 6 and merges to the single build; ids off the step and arrays
    that are not a range are refused. Negative or too large counts are usage errors (exit 2)
    naming the option, on the Kubernetes path as on the others."""
    src = tmp / "src"
    make_source(src)
    opts = ["--size", "16", "--quiet"]
    (tmp / "p").mkdir()
    slurm = {"SLURM_ARRAY_TASK_COUNT": "6", "SLURM_ARRAY_TASK_MIN": "0",
             "SLURM_ARRAY_TASK_MAX": "10", "SLURM_ARRAY_TASK_STEP": "2"}
    for task in range(0, 11, 2):
        env = dict(slurm, SLURM_ARRAY_TASK_ID=str(task))
        p = build(src, tmp / "p" / f"s{task}", *opts, "--part", "auto", env_extra=env)
        check(f"part {task // 2} of 6" in p.stderr and "SLURM_ARRAY_TASK_STEP=2" in p.stderr,
              f"slurm id {task}: stderr {p.stderr!r}")
    run(["merge"] + [tmp / "p" / f"s{t}" for t in range(0, 11, 2)] + [tmp / "ms"])
    build(src, tmp / "single", *opts)
    compare_merged(tmp / "ms", tmp / "single", "slurm step 2")
    bad = [
        (["--part", "auto"], dict(slurm, SLURM_ARRAY_TASK_ID="3"), r"not MIN \+ k \* STEP"),
        # --array=1,3,7: COUNT 3, MIN 1, MAX 7, whatever STEP Slurm reports
        (["--part", "auto"], {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "3",
                              "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "7",
                              "SLURM_ARRAY_TASK_STEP": "1"}, r"not the range"),
        (["--part", "auto"], dict(slurm, SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_TASK_STEP="0"),
         r"step must be at least 1"),
        (["--part", "auto", "--parts", "-1"], {"JOB_COMPLETION_INDEX": "0"},
         r"--parts '-1': expected a non-negative integer"),
        (["--part", "auto", "--parts=-1"], {"JOB_COMPLETION_INDEX": "0"},
         r"--parts '-1': expected a non-negative integer"),
        (["--part", "auto", "--parts", "2000000"], {"JOB_COMPLETION_INDEX": "0"},
         r"--parts 2000000: expected an integer 1..1000000"),
        (["--channels", "-1"], {}, r"--channels '-1'"),
        (["--max-pixels", "-5"], {}, r"--max-pixels '-5'"),
        (["--layout", "ragged", "--max-side", "-1"], {}, r"--max-side '-1'"),
    ]
    for args, env, pattern in bad:
        if "--size" in args or "--layout" in args:
            base = ["--quiet"]
        else:
            base = opts
        p = build(src, tmp / "bad", *base, *args, expect_rc=2, env_extra=env)
        check(re.search(pattern, p.stderr), f"{args} {env}: stderr {p.stderr!r} lacks {pattern}")
        check(not (tmp / "bad").exists(), f"{args}: output created")
    run(["build"], expect_rc=2)
    # The commands that take one CACHE (inspect, verify, bench) parse the same way.
    p = run(["bench", tmp / "single", "--batch", "-1"], expect_rc=2)
    check("--batch '-1'" in p.stderr, f"bench --batch -1: {p.stderr!r}")


def doc_command(path, marker):
    """The `dscache build ...` command line of a doc file (the line holding `marker`),
    with shell variables and continuations resolved by the caller's substitutions."""
    text = Path(path).read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if marker in line and "dscache build" in line and not line.lstrip().startswith("#"):
            return line
    raise Failure(f"{path}: no line with 'dscache build' and {marker!r}")


def run_doc_parts(cmd_line, envs, src, out_base):
    """Runs the doc's build line as 4 concurrent processes, $VARS expanded from each process's
    environment (SRC and PARTS point into the test's temp dir)."""
    procs = []
    for env in envs:
        env = dict(env, SRC=str(src), PARTS=str(out_base))
        line = re.sub(r"\$\{?(\w+)\}?", lambda mt: env.get(mt.group(1), mt.group(0)), cmd_line)
        args = shlex.split(line)
        args = args[args.index("dscache") + 1:]
        procs.append(popen([DSCACHE] + args, env))
    wait_all(procs)


def case_doc_examples(tmp):
    root = Path(os.environ["DSCACHE_SOURCE_ROOT"])
    src = tmp / "src"
    make_source(src)
    slurm = root / "docs" / "slurm-build.sh"
    k8s = root / "docs" / "k8s-build-job.yaml"
    text = slurm.read_text()
    check("#SBATCH --array=0-3" in text, "slurm-build.sh: #SBATCH --array=0-3")
    for want in ("dscache merge", "--dependency=afterany", "--resume", "--threads", "parts=4",
                 '--part "$SLURM_ARRAY_TASK_ID/$parts"'):
        check(want in text, f"slurm-build.sh lacks {want!r}")
    ytext = k8s.read_text()
    for want in ("completionMode: Indexed", "completions: 4", "parallelism: 4",
                 "--part", "auto", "--parts", "dscache merge", "exec dscache build", "--resume",
                 "ReadWriteMany"):
        check(want in ytext, f"k8s-build-job.yaml lacks {want!r}")
    for name, path, envs in [
        ("slurm", slurm, [{"SLURM_ARRAY_TASK_ID": str(i), "SLURM_CPUS_PER_TASK": "2",
                           "parts": "4"} for i in range(4)]),
        ("k8s", k8s, [{"JOB_COMPLETION_INDEX": str(i)} for i in range(4)]),
    ]:
        base = tmp / name
        base.mkdir()
        line = doc_command(path, "--part")
        run_doc_parts(line, envs, src, base)
        parts = sorted(base.iterdir())
        check_eq(len(parts), 4, f"{name}: parts built")
        run(["merge"] + parts + [tmp / f"{name}_merged"])
        m = load_manifest(parts[0])
        opts = ["--size", str(m["shape"][0]), "--shuffle", str(m["recipe"].get("shuffle_seed", 0)),
                "--shard-size", str(m["recipe"]["shard_bytes"]), "--quiet"]
        single = tmp / f"{name}_single"
        if not single.exists():
            build(src, single, *opts)
        compare_merged(tmp / f"{name}_merged", single, name)


CASES = {
    "part_auto": case_part_auto,
    "part_auto_step": case_part_auto_step,
    "doc_examples": case_doc_examples,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
