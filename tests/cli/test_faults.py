#!/usr/bin/python3
"""Fault-injection tests of `dscache build` and `dscache merge`, with real processes: two builds
into one output (the lock), readers during `build --force` (one generation per open), SIGKILL at
seeded points of build and merge (then `--resume` is byte-identical to an uninterrupted run), and
source files that change under a running build. A file size limit and a full filesystem are in
test_disk_full.py.

The windows are hit deterministically through the test hooks of tools/test_hooks.h:
DSCACHE_TEST_CRASH_TRACE lists the named points a run passes, DSCACHE_TEST_CRASH_AT=N SIGKILLs
it at the N-th, DSCACHE_TEST_PAUSE_AT=NAME SIGSTOPs it at the first NAME (the test sends
SIGCONT).

Usage: test_faults.py CASE   (env DSCACHE = the built binary)
"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from cli_helpers import (
    DSCACHE, Failure, TIMEOUT_S, build, check, check_cache, check_eq, compare_caches, load_images,
    load_manifest, main, make_simple_folder, partial_dir, rand_rgb, run, smooth_rgb, write_img,
)

EXIT_LOCKED = 6
EXIT_NO_SPACE = 7
SIZE = 8
OPTS = ["--size", str(SIZE), "--shard-size", str(SIZE * SIZE * 3 * 4), "--threads", "2",
        "--quiet", "--shuffle", "none"]
# `dscache verify` opens the cache directory once and reads every file relative to it, so
# during `build --force` it sees one generation: never a checksum or size mismatch. The old
# generation may be removed while it reads ("no such file"): that is not a mix. Before the
# one-generation reader, 1 of 17 verify runs here saw a mix.
VERIFY_ONE_GENERATION = True
POINTS = 20  # SIGKILL points per command, at least (half in fresh runs, half replacing a cache)


def lock_file(out):
    out = Path(out)
    return out.parent / ("." + out.name + ".lock")


def env_with(extra):
    env = dict(os.environ)
    for k in ("DSCACHE_TEST_KILL_AT", "DSCACHE_TEST_CRASH_AT", "DSCACHE_TEST_CRASH_TRACE",
              "DSCACHE_TEST_PAUSE_AT"):
        env.pop(k, None)
    env.update(extra or {})
    return env


def popen(args, extra=None, **kw):
    return subprocess.Popen([DSCACHE] + [str(a) for a in args], env=env_with(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def finish(p, timeout=TIMEOUT_S):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def wait_stopped(p, timeout=30):
    """Waits until process p is stopped (SIGSTOP from DSCACHE_TEST_PAUSE_AT)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if p.poll() is not None:
            _, out, err = finish(p)
            raise Failure(f"process meant to pause exited {p.returncode}: {err}")
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.01)
    raise Failure("process never reached its pause point")


def stray_temps(root):
    return sorted(str(p) for p in Path(root).rglob("*") if ".tmp" in p.name)


def source_a(tmp):
    src = tmp / "srcA"
    if not src.exists():
        make_simple_folder(src, ["a0", "a1", "a2"], 8, (12, 12), seed=11)
    return src


def source_b(tmp):
    src = tmp / "srcB"
    if not src.exists():
        make_simple_folder(src, ["b0", "b1"], 5, (12, 12), seed=12)
    return src


def trace(args, tmp, setup):
    """The named points one run of dscache ARGS passes (after setup()), in order."""
    path = tmp / "trace.txt"
    path.unlink(missing_ok=True)
    setup()
    run(args, env_extra={"DSCACHE_TEST_CRASH_TRACE": str(path)})
    names = [line.split()[1] for line in path.read_text().splitlines()]
    check(names, "the trace is empty: is the test hook compiled in?")
    return names


def pick_points(names, rng, k):
    """At least k distinct 1-based points: one (at random) of every kind of point the trace
    holds, so each window of the finishing sequence is hit, then random ones to make k."""
    chosen = set()
    for name in sorted(set(names)):
        chosen.add(rng.choice([i for i, n in enumerate(names, 1) if n == name]))
    rest = [i for i in range(1, len(names) + 1) if i not in chosen]
    chosen |= set(rng.sample(rest, max(0, k - len(chosen))))
    return sorted(chosen)


def sigkill_trials(tmp, label, cmd, resume_cmd, ref, out, old_template, seed):
    """Kills `cmd` at POINTS seeded points (half on a fresh OUTPUT, half replacing a copy of
    old_template with --force), resumes, and compares with ref. Returns the failures."""
    rng = random.Random(seed)
    failures = []
    trials = 0

    def fresh():
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(partial_dir(out), ignore_errors=True)

    def with_old():
        fresh()
        shutil.copytree(old_template, out)

    for force, setup in ((False, fresh), (True, with_old)):
        extra = ["--force"] if force else []
        names = trace(cmd + extra, tmp, setup)
        points = pick_points(names, rng, POINTS // 2)
        print(f"{label}{' --force' if force else ''}: {len(names)} points in a run; killing at "
              + ", ".join(f"{i} {names[i - 1]}" for i in points))
        for point in points:
            trials += 1
            what = f"{label}{' --force' if force else ''} killed at point {point} " \
                   f"({names[point - 1]})"
            setup()
            p = run(cmd + extra, expect_rc=None, env_extra={"DSCACHE_TEST_CRASH_AT": str(point)})
            try:
                check_eq(p.returncode, -9, f"{what}: exit status (the point must be reached)")
                r = run(resume_cmd + extra, expect_rc=None)
                check_eq(r.returncode, 0, f"{what}: --resume exit status ({r.stderr.strip()})")
                compare_caches(out, ref, f"{what}, then --resume")
                check(not partial_dir(out).exists(), f"{what}: partial dir left after --resume")
                check_eq(stray_temps(out.parent), [], f"{what}: temp files left")
            except Failure as e:
                failures.append(str(e).splitlines()[0])
    print(f"{label}: {trials} SIGKILL points (seed {seed}), {len(failures)} failed")
    for f in failures:
        print("  ", f)
    return failures


# --------------------------------------------------------------------------------------------

def case_sigkill_build(tmp):
    src, out, ref, old = source_a(tmp), tmp / "out" / "cache", tmp / "ref", tmp / "old"
    out.parent.mkdir()
    build(src, ref, *OPTS)
    build(source_b(tmp), old, *OPTS)
    cmd = ["build", src, out] + OPTS
    failures = sigkill_trials(tmp, "build", cmd, cmd + ["--resume"], ref, out, old, seed=2024)
    check(not failures, f"{len(failures)} SIGKILL points not resumed exactly")
    # --resume reports a finished build complete only when OUTPUT is that very build.
    p = run(["build", source_b(tmp), out] + OPTS + ["--resume"], expect_rc=4)
    check("--force" in p.stderr, f"--resume over another cache: {p.stderr!r}")
    compare_caches(out, ref, "OUTPUT after a refused --resume")


def case_sigkill_merge(tmp):
    src, out, ref, old = source_a(tmp), tmp / "out" / "merged", tmp / "ref", tmp / "old"
    out.parent.mkdir()
    parts = [tmp / f"part{i}" for i in range(3)]
    for i, d in enumerate(parts):
        build(src, d, *OPTS, "--part", f"{i}/3")
    run(["merge"] + parts + [ref])
    build(source_b(tmp), old, *OPTS)
    cmd = ["merge"] + parts + [out]
    failures = sigkill_trials(tmp, "merge", cmd, ["merge", "--resume"] + parts + [out], ref, out,
                              old, seed=4048)
    check(not failures, f"{len(failures)} SIGKILL points not resumed exactly")


def case_lock_two_builds(tmp):
    src_a, src_b = source_a(tmp), source_b(tmp)
    ref_a, ref_b = tmp / "refA", tmp / "refB"
    build(src_a, ref_a, *OPTS)
    build(src_b, ref_b, *OPTS)
    out = tmp / "out"

    # Deterministic: A stopped after its first shard; B (with and without --force) and a merge
    # into the same OUTPUT must fail at once, naming A; A then finishes undisturbed.
    a = popen(["build", src_a, out] + OPTS, {"DSCACHE_TEST_PAUSE_AT": "sidecar-written"})
    try:
        wait_stopped(a)
        for extra in (["--force"], [], ["--resume"]):
            t0 = time.monotonic()
            p = run(["build", src_b, out] + OPTS + extra, expect_rc=None)
            check_eq(p.returncode, EXIT_LOCKED, f"second build {extra}: exit status "
                     f"({p.stderr.strip()})")
            check(time.monotonic() - t0 < 10, "the second build waited instead of failing")
            check(f"pid {a.pid}" in p.stderr and "dscache build" in p.stderr,
                  f"the lock error does not name the holder: {p.stderr!r}")
        p = run(["merge", ref_a, ref_b, out], expect_rc=None)
        check_eq(p.returncode, EXIT_LOCKED, f"merge into a locked OUTPUT ({p.stderr.strip()})")
        holder = lock_file(out).read_text()
        check(str(a.pid) in holder and "build" in holder, f"lock file content: {holder!r}")
    finally:
        a.send_signal(signal.SIGCONT)
        rc, _, err = finish(a)
    check_eq(rc, 0, f"the first build after the refused ones: {err}")
    compare_caches(out, ref_a, "the first build's cache")
    check(not lock_file(out).exists(), "lock file left after the build")

    # Racing: A and B --force started together, 10 times. One wins or they run one after the
    # other; never a mixed cache.
    bad = []
    for trial in range(10):
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(partial_dir(out), ignore_errors=True)
        a = popen(["build", src_a, out] + OPTS)
        b = popen(["build", src_b, out] + OPTS + ["--force"])
        (rca, _, ea), (rcb, _, eb) = finish(a), finish(b)
        try:
            check(rca in (0, 4, EXIT_LOCKED) and rcb in (0, EXIT_LOCKED),
                  f"exit statuses {rca}, {rcb}: {ea.strip()} | {eb.strip()}")
            check(0 in (rca, rcb), f"neither build succeeded: {ea.strip()} | {eb.strip()}")
            winner = ref_a if (rca == 0 and rcb != 0) else ref_b
            if rca == 0 and rcb == 0:  # one after the other: B --force replaced A, or A ... B
                winner = ref_b if load_manifest(out)["classes"] == ["b0", "b1"] else ref_a
            compare_caches(out, winner, "the winner's cache")
            check(not partial_dir(out).exists(), "partial dir left")
        except Failure as e:
            bad.append(f"trial {trial}: " + str(e).splitlines()[0])
    print(f"racing builds: 10 trials, {len(bad)} bad")
    for line in bad:
        print("  ", line)
    check(not bad, f"{len(bad)} of 10 racing trials went wrong")

    # A lock file left by a killed holder (flock died with it) does not block.
    a = popen(["build", src_a, out] + OPTS + ["--force"],
              {"DSCACHE_TEST_PAUSE_AT": "sidecar-written"})
    wait_stopped(a)
    a.kill()
    finish(a)
    check(lock_file(out).exists(), "no lock file while a build was running")
    run(["build", src_a, out] + OPTS + ["--force", "--resume"])
    compare_caches(out, ref_a, "after a killed holder")
    lock_file(out).write_text('{"pid": 999999, "host": "gone", "command": "dscache build"}\n')
    run(["build", src_b, out] + OPTS + ["--force"])
    compare_caches(out, ref_b, "with a stale lock file")


def _consistent(out):
    """Opens OUTPUT once and reads manifest.json and every file it lists relative to that
    descriptor. Returns ("ok", classes), ("vanished", None) or ("mixed", reason)."""
    try:
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return "vanished", None
    try:
        def read(name):
            f = os.open(name, os.O_RDONLY, dir_fd=fd)
            with os.fdopen(f, "rb") as fh:
                return fh.read()
        try:
            m = json.loads(read("manifest.json"))
            files = list(m["files"].values()) + m["shards"]
            for e in files:
                data = read(e["file"])
                if len(data) != e["bytes"] or hashlib.sha1(data).hexdigest() != \
                        _SHA1.get((e["file"], e["xxh64"]), "?"):
                    return "mixed", f"{e['file']} does not match the manifest read with it"
        except FileNotFoundError:
            return "vanished", None  # the old generation being removed under an old descriptor
        return "ok", tuple(m["classes"])
    finally:
        os.close(fd)


_SHA1 = {}  # (file, xxh64 in a manifest) -> sha1 of those bytes, for both generations


def case_force_readers(tmp):
    src_a, src_b, out = source_a(tmp), source_b(tmp), tmp / "out"
    opts_b = [o for o in OPTS]
    opts_b[3] = str(SIZE * SIZE * 3 * 3)  # another shard split: a mix also shows as files
    for src, opts, ref in ((src_a, OPTS, tmp / "refA"), (src_b, opts_b, tmp / "refB")):
        build(src, ref, *opts)
        m = load_manifest(ref)
        for e in list(m["files"].values()) + m["shards"]:
            _SHA1[(e["file"], e["xxh64"])] = hashlib.sha1((ref / e["file"]).read_bytes()).hexdigest()
    build(src_a, out, *OPTS)
    stop = threading.Event()
    seen = {"ok": 0, "vanished": 0, "mixed": 0}
    gens, mixes = set(), []
    verify = {"ok": 0, "vanished": 0, "corrupt": 0, "other": 0}
    verify_lines = []

    def reader():
        while not stop.is_set():
            what, info = _consistent(out)
            seen[what] += 1
            if what == "ok":
                gens.add(info)
            elif what == "mixed":
                mixes.append(info)

    def verifier():
        while not stop.is_set():
            p = run(["verify", out], expect_rc=None)
            key = {0: "ok", 5: "corrupt"}.get(p.returncode, "other")
            problems = [ln for ln in (p.stdout + p.stderr).splitlines()
                        if ": " in ln and not ln.startswith("CORRUPT")]
            if key == "corrupt" and problems and all("no such file" in ln for ln in problems):
                key = "vanished"  # the generation it opened was removed under it
            verify[key] += 1
            if key != "ok" and len(verify_lines) < 5:
                verify_lines.append((p.stdout + p.stderr).strip().splitlines()[0:2])

    threads = [threading.Thread(target=reader), threading.Thread(target=verifier)]
    for t in threads:
        t.start()
    try:
        for k in range(12):
            src, opts = (src_b, opts_b) if k % 2 == 0 else (src_a, OPTS)
            build(src, out, *opts, "--force")
    finally:
        stop.set()
        for t in threads:
            t.join()
    print(f"dirfd reader: {seen}; generations seen: {len(gens)}")
    print(f"dscache verify during --force: {verify}")
    for line in verify_lines:
        print("   verify said:", line)
    check_eq(mixes, [], "readers saw a mixed cache")
    check(seen["ok"] > 20 and len(gens) == 2, f"the readers saw too little: {seen}, {gens}")
    if VERIFY_ONE_GENERATION:
        check_eq(verify["corrupt"] + verify["other"], 0, "verify runs that saw a mix")
    elif verify["corrupt"] or verify["other"]:
        print("NOTE: dscache verify opens files by path, so it can still see two generations "
              "(the reader side's one-generation open is changed elsewhere)")


def case_source_changes(tmp):
    """Source files deleted, truncated or rewritten after the listing: recorded skips, never a
    sample other than the one the listing (recorded in the manifest) names."""
    src, pristine = tmp / "src", tmp / "pristine"
    for k in range(12):
        if k % 4 == 0:
            write_img(src / f"c{k % 2}" / f"f{k:02d}.jpg", smooth_rgb(k, 40, 40))
        else:
            write_img(src / f"c{k % 2}" / f"f{k:02d}.png", rand_rgb(k, 12, 12))
    shutil.copytree(src, pristine)
    ref = tmp / "ref"
    build(pristine, ref, *OPTS)
    out = tmp / "out"
    p = popen(["build", src, out] + OPTS,
              {"DSCACHE_TEST_PAUSE_AT": "partial-open"})
    try:
        wait_stopped(p)
        (src / "c0" / "f02.png").unlink()                                    # deleted
        data = (src / "c1" / "f03.png").read_bytes()
        (src / "c1" / "f03.png").write_bytes(data[: len(data) // 2])         # truncated PNG
        data = (src / "c0" / "f04.jpg").read_bytes()
        (src / "c0" / "f04.jpg").write_bytes(data[: len(data) - 40])         # truncated JPEG
        write_img(src / "c1" / "f05.png", rand_rgb(999, 12, 12))             # rewritten
        write_img(src / "c0" / "f06.png", rand_rgb(998, 20, 20))             # rewritten, resized
    finally:
        p.send_signal(signal.SIGCONT)
        rc, _, err = finish(p)
    check_eq(rc, 0, f"build with changed sources: {err}")
    m, images, _ = check_cache(out)
    names = [json.loads(line) for line in (out / "sources.jsonl").read_text().splitlines()]
    ref_names = [json.loads(line) for line in (ref / "sources.jsonl").read_text().splitlines()]
    ref_images = load_images(ref)
    ref_by_name = {n: ref_images[i] for i, n in enumerate(ref_names)}
    wrong = [n for i, n in enumerate(names) if not np.array_equal(images[i], ref_by_name[n])]
    skipped = {json.loads(line)["source"]: json.loads(line)["reason"]
               for line in (out / "skipped.jsonl").read_text().splitlines()}
    print(f"changed sources: {len(names)} stored, skipped {skipped}, wrong {wrong}")
    check_eq(wrong, [], "samples whose pixels are not those of the listed source")
    for name in ("c0/f02.png", "c1/f03.png", "c0/f04.jpg"):
        check(name in skipped, f"{name} (deleted/truncated) not recorded as skipped: {skipped}")


CASES = {
    "lock_two_builds": case_lock_two_builds,
    "force_readers": case_force_readers,
    "sigkill_build": case_sigkill_build,
    "sigkill_merge": case_sigkill_merge,
    "source_changes": case_source_changes,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
