#!/usr/bin/python3
"""Tests of what `dscache build` does with its OUTPUT: an existing one and --force, --resume after
SIGKILL (npy and HDF5), --threads determinism, usage errors, --shard-size, and the build-time
--shuffle (seeded, resumed, and the default).

Usage: test_build_output.py CASE
(env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import sys
import time
from pathlib import Path

import numpy as np

from cli_helpers import (
    BASE_FILES, build, cache_files, check, check_cache, check_eq, compare_caches, load_images,
    load_labels, load_manifest, load_shard, kept_shards, main, make_mixed_folder, make_simple_folder,
    partial_dir, read_jsonl, run,
)


def snapshot(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in Path(d).iterdir()}


def case_exists_force(tmp):
    src1, src2, out = tmp / "src1", tmp / "src2", tmp / "mycache"
    make_simple_folder(src1, ["a", "b"], 5, (16, 16), seed=1)
    make_simple_folder(src2, ["x"], 3, (16, 16), seed=2)
    shard = str(16 * 16 * 3 * 4)
    build(src1, out, "--size", "16", "--shard-size", shard)
    m1, _, _ = check_cache(out)
    check_eq(len(m1["shards"]), 3, "first build shards")
    before = snapshot(out)
    p = build(src2, out, "--size", "16", expect_rc=4)
    check(p.stderr.strip(), "exit 4 without a message on stderr")
    check(str(out.name) in p.stderr, f"exit 4 message does not name OUTPUT: {p.stderr!r}")
    check_eq(snapshot(out) == before, True, "OUTPUT modified by a refused build")
    check(not partial_dir(out).exists(), "refused build left a partial dir")
    # An existing empty directory is refused too.
    empty = tmp / "empty"
    empty.mkdir()
    build(src2, empty, "--size", "16", expect_rc=4)
    # --force replaces it, with no stale shard left over.
    build(src2, out, "--size", "16", "--shard-size", shard, "--force")
    m2, _, _ = check_cache(out)
    check_eq(m2["count"], 3, "count after --force")
    check_eq(m2["classes"], ["x"], "classes after --force")
    check_eq(cache_files(out), sorted(BASE_FILES | {"images-00000.npy"}), "files after --force")
    check(not partial_dir(out).exists(), "--force left a partial dir")


def _resume(tmp, storage):
    src = tmp / "src"
    if not src.exists():
        make_simple_folder(src, ["c0", "c1", "c2", "c3"], 30, (16, 16), seed=7)
    ext = ".npy" if storage == "npy" else ".h5"
    opts = ["--size", "16", "--storage", storage, "--shard-size", str(16 * 16 * 3 * 10)]
    out, ref = tmp / f"out_{storage}", tmp / f"ref_{storage}"
    p = build(src, out, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:3"})
    part = partial_dir(out)
    inodes = {}
    for f in kept_shards(out, 3, ext):
        imgs, _ = load_shard(f)
        check_eq(imgs.shape, (10, 16, 16, 3), f"partial {f.name} shape")
        inodes[f.name] = f.stat().st_ino
    run(["build", src, out] + opts + ["--shuffle", "none", "--resume"])
    check(not part.exists(), "partial dir left after --resume")
    check_cache(out, storage)
    for name, ino in inodes.items():
        check_eq((out / name).stat().st_ino, ino,
                 f"{name} was rewritten, not resumed (inode changed)")
    time.sleep(1.1)  # so a timestamp inside a file would differ
    build(src, ref, *opts)
    compare_caches(out, ref, f"{storage}: resumed vs uninterrupted build")
    del p


def case_resume_after_sigkill(tmp):
    _resume(tmp, "npy")


def case_resume_after_sigkill_hdf5(tmp):
    _resume(tmp, "hdf5")


def case_threads_identical(tmp):
    src = tmp / "src"
    make_mixed_folder(src, ["k1", "k2", "k3", "k4"], 10, (70, 90))
    for storage in ("npy", "hdf5"):
        opts = ["--size", "24", "--storage", storage, "--shard-size", str(24 * 24 * 3 * 7)]
        outs = []
        for t in (1, 2, 4):
            out = tmp / f"{storage}_t{t}"
            build(src, out, *opts, "--threads", str(t), "--quiet")
            outs.append(out)
            time.sleep(1.05)  # so a timestamp inside a file would differ
        m, _, _ = check_cache(outs[0], storage)
        check_eq((m["count"], m["skipped"]), (40, 1), f"{storage}: count, skipped")
        for o in outs[1:]:
            compare_caches(outs[0], o, f"{storage}: --threads 1 vs {o.name}")


def case_usage_errors(tmp):
    src = tmp / "src"
    make_simple_folder(src, ["a"], 2, (8, 8))
    out = tmp / "out"
    table = [
        (["build", src, out, "--size", "8", "--bogus"], "--bogus"),
        (["build", src, out, "--size", "0"], "--size"),
        (["build", src, out, "--size", "abc"], "--size"),
        (["build", src, out, "--size", "8x"], "--size"),
        (["build", src, out, "--size", "-8"], "--size"),
        (["build", src, out, "--size", "8", "--storage", "foo"],
         "--storage: 'foo' is not one of npy, hdf5"),
        (["build", src, out, "--size", "8", "--layout", "jagged"],
         "--layout: 'jagged' is not one of fixed, ragged"),
        (["build", src, out, "--size", "8", "--channels", "2"], "--channels"),
        (["build", src, out, "--size", "8", "--resize", "wobble"],
         "--resize: 'wobble' is not one of stretch, crop, pad"),
        (["build", src, out, "--size", "8", "--shard-size", "12X"],
         "--shard-size '12X': expected a positive byte count"),
        (["build", src, out, "--size", "8", "--max-pixels", "lots"], "--max-pixels"),
        (["build", src, out, "--size", "8", "--threads", "many"], "--threads"),
        (["build", src, out, "--size", "8", "--field", "score"],
         "--field 'score': expected NAME=KIND"),
        (["build", src, out, "--size", "8", "--field", "score=bool"],
         "KIND one of mask, multi-hot, int, float, text, ignore"),
        (["build", src, out, "--size", "8", "--field", "=int"], "--field '=int'"),
        (["build", src, out, "--size", "8", "--field", "s=int", "--field", "s=text"],
         "column 's' is given twice"),
        (["build", src, out, "--size", "8", "--coco-mask", "instance"], "--coco-mask 'instance'"),
        (["build", src, out], "--size"),  # folder source needs --size
        (["build", src, out, "--size"], "--size"),  # missing value
        (["build"], "source"),
        (["build", src], "output"),
        (["frobnicate"], "frobnicate"),
        ([], None),
        (["inspect", out, "--bogus"], "--bogus"),
        (["verify", out, "--bogus"], "--bogus"),
    ]
    for args, needle in table:
        p = run(args, expect_rc=2)
        check(p.stderr.strip(), f"{args}: exit 2 without a message on stderr")
        if needle:
            check(needle.lower() in p.stderr.lower(),
                  f"dscache {' '.join(map(str, args))}: message does not name {needle!r}: "
                  f"{p.stderr!r}")
        check(not out.exists() and not partial_dir(out).exists(), f"{args}: output created")
    missing = tmp / "no_such_dir"
    p = build(missing, out, "--size", "8", expect_rc=1)
    check(str(missing) in p.stderr or "no_such_dir" in p.stderr,
          f"nonexistent SOURCE: stderr does not name it: {p.stderr!r}")
    check(not out.exists(), "nonexistent SOURCE: output created")
    p = run(["inspect", tmp / "no_cache"], expect_rc=1)
    check("no_cache" in p.stderr, f"inspect of a missing dir: stderr does not name it {p.stderr!r}")
    p = run(["verify", tmp / "no_cache"], expect_rc=1)
    check("no_cache" in p.stderr, f"verify of a missing dir: stderr does not name it {p.stderr!r}")


def case_shard_split(tmp):
    src = tmp / "src"
    make_simple_folder(src, ["p", "q", "r", "s", "t"], 5, (16, 32), seed=17)
    # --size 16x32 --channels 1: 512 bytes/sample; 10 samples = 5K.
    base = ["--size", "16x32", "--channels", "1"]
    single = tmp / "single"
    build(src, single, *base)
    ms, imgs_single, _ = check_cache(single)
    check_eq(len(ms["shards"]), 1, "default shard size: one shard")
    for name, shard in (("k", "5K"), ("floor", "5600")):
        out = tmp / f"split_{name}"
        build(src, out, *base, "--shard-size", shard)
        m, imgs, _ = check_cache(out)
        check_eq(m["recipe"]["shard_bytes"], 5120 if shard == "5K" else 5600, "recipe.shard_bytes")
        check_eq([(s["file"], s["first"], s["count"]) for s in m["shards"]],
                 [("images-00000.npy", 0, 10), ("images-00001.npy", 10, 10),
                  ("images-00002.npy", 20, 5)], f"--shard-size {shard}: shards")
        for s in m["shards"]:
            arr = np.load(out / s["file"], mmap_mode="r")
            check_eq(arr.shape[0], s["count"], f"{s['file']} sample count")
        check(np.array_equal(imgs, imgs_single), "concatenated shards != single-shard build")
        for f in ("labels.npy", "checksums.npy", "sources.jsonl"):
            check_eq((out / f).read_bytes(), (single / f).read_bytes(), f"{f} split vs single")
    # Smaller than one sample: one sample per shard.
    tiny = tmp / "tiny"
    build(src, tiny, *base, "--shard-size", "100", "--quiet")
    mt, imgs_t, _ = check_cache(tiny)
    check_eq(len(mt["shards"]), 25, "--shard-size 100: shards")
    check(np.array_equal(imgs_t, imgs_single), "one-per-shard concat != single")
    # 1M suffix is 1024*1024.
    mm = tmp / "mega"
    build(src, mm, *base, "--shard-size", "1M", "--quiet")
    check_eq(load_manifest(mm)["recipe"]["shard_bytes"], 1 << 20, "--shard-size 1M")


def case_shuffle_build(tmp):
    """--shuffle SEED: a seeded permutation of the source order, the same samples (each still
    named in sources.jsonl), identical for any thread count, resumable, verifiable."""
    src = tmp / "src"
    make_mixed_folder(src, ["k1", "k2", "k3", "k4"], 10, (70, 90))  # 41 files, one bad
    opts = ["--size", "24", "--shard-size", str(24 * 24 * 3 * 7), "--quiet"]
    plain = tmp / "plain"
    build(src, plain, *opts)
    mp = load_manifest(plain)
    check("shuffle_seed" not in mp["recipe"], "an unshuffled build records no shuffle_seed")
    names_p = read_jsonl(plain / "sources.jsonl")
    imgs_p, labs_p = load_images(plain, mp), load_labels(plain)
    by_name = {n: (imgs_p[i], labs_p[i]) for i, n in enumerate(names_p)}

    outs = []
    for t in (1, 2):
        out = tmp / f"shuf_t{t}"
        build(src, out, *opts, "--shuffle", "7", "--threads", str(t))
        outs.append(out)
        time.sleep(1.05)  # so a timestamp inside a file would differ
    compare_caches(outs[0], outs[1], "--shuffle 7: --threads 1 vs 2")
    out = outs[0]
    m, _, _ = check_cache(out)
    check_eq(m["recipe"].get("shuffle_seed"), 7, "recipe.shuffle_seed")
    check_eq((m["count"], m["skipped"]), (mp["count"], mp["skipped"]), "count, skipped")
    check_eq(m["class_counts"], mp["class_counts"], "class_counts")
    names = read_jsonl(out / "sources.jsonl")
    check_eq(sorted(names), sorted(names_p), "the same source files, each once")
    check(names != names_p, "--shuffle 7 stored the samples in source order")
    imgs, labs = load_images(out, m), load_labels(out)
    for i, n in enumerate(names):
        check(np.array_equal(imgs[i], by_name[n][0]), f"sample {i} ({n}): pixels differ")
        check_eq(int(labs[i]), int(by_name[n][1]), f"sample {i} ({n}): label")
    # A class-sorted source no longer comes in runs of one class.
    runs = 1 + sum(1 for a, b in zip(labs, labs[1:]) if a != b)
    check(runs > 10, f"labels still come in {runs} runs of one class")
    other = tmp / "shuf_seed8"
    build(src, other, *opts, "--shuffle", "8")
    check(read_jsonl(other / "sources.jsonl") != names, "seeds 7 and 8 gave the same order")
    p = run(["verify", out, "--source"])
    check("OK" in p.stdout, f"verify --source: {p.stdout!r}")
    r = run(["inspect", out])
    check("--shuffle 7" in r.stdout, f"inspect does not show the shuffle: {r.stdout}")

    # Killed after 2 shards, resumed: identical to the uninterrupted build.
    killed = tmp / "killed"
    build(src, killed, *opts, "--shuffle", "7", expect_rc=-9,
          env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:2"})
    check(partial_dir(killed).is_dir(), "no partial dir after the kill")
    p = build(src, killed, *opts, "--shuffle", "8", "--resume", expect_rc=1)
    check("other options" in p.stderr, f"another seed resumed: {p.stderr}")
    run(["build", src, killed] + opts + ["--shuffle", "7", "--resume"])
    compare_caches(killed, out, "--shuffle 7: resumed vs uninterrupted")

    # Usage: a seed is a non-negative integer.
    for bad in ("-1", "x", "", "18446744073709551616", "1.5"):
        p = build(src, tmp / "bad", *opts, "--shuffle", bad, expect_rc=2)
        check("--shuffle" in p.stderr, f"--shuffle {bad!r}: stderr does not name it: {p.stderr}")


def case_shuffle_default(tmp):
    """Without --shuffle a build stores the samples in build_order(n, 0): byte-identical to
    --shuffle 0, not the source order (--shuffle none), and the manifest says so."""
    src = tmp / "src"
    make_simple_folder(src, ["a", "b", "c"], 12, (8, 8), seed=3)
    default, zero, none = tmp / "default", tmp / "zero", tmp / "none"
    run(["build", src, default, "--size", "8"])
    run(["build", src, zero, "--size", "8", "--shuffle", "0"])
    run(["build", src, none, "--size", "8", "--shuffle", "none"])
    compare_caches(default, zero, "default build vs --shuffle 0")
    check_eq(load_manifest(default)["recipe"].get("shuffle_seed"), 0, "default shuffle_seed")
    check("shuffle_seed" not in load_manifest(none)["recipe"], "--shuffle none wrote a seed")
    d_src = read_jsonl(default / "sources.jsonl")
    n_src = read_jsonl(none / "sources.jsonl")
    check_eq(sorted(d_src), sorted(n_src), "the same samples")
    check(d_src != n_src, "the default build kept the source order")
    check_eq(n_src, sorted(n_src), "--shuffle none keeps the (sorted) source order")
    p = run(["build", src, tmp / "bad", "--size", "8", "--shuffle", "nope"], expect_rc=2)
    check("or none" in p.stderr, f"--shuffle nope: {p.stderr}")


CASES = {
    "exists_force": case_exists_force,
    "resume_after_sigkill": case_resume_after_sigkill,
    "resume_after_sigkill_hdf5": case_resume_after_sigkill_hdf5,
    "threads_identical": case_threads_identical,
    "usage_errors": case_usage_errors,
    "shard_split": case_shard_split,
    "shuffle_build": case_shuffle_build,
    "shuffle_default": case_shuffle_default,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
