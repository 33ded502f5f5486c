#!/usr/bin/python3
"""Tests of partitioned builds (`dscache build --part I/N`, `--part auto`) and `dscache merge`:
4 parts built as 4 concurrent processes and merged equal a single build (side files byte for
byte, samples pixel for pixel, skip report), for npy and HDF5, fixed and ragged, shuffled and
in source order, raw and JPEG; merge's refusals; an interrupted merge resumed; hard links.
--part auto from Slurm and Kubernetes variables and the docs' Slurm and Kubernetes examples are
in test_merge_auto.py.

Usage: test_merge.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from cli_helpers import (
    DSCACHE, Failure, TIMEOUT_S, build, cache_files, check, check_cache, check_eq, load_images,
    load_manifest, main, make_mixed_folder, partial_dir, rand_rgb, read_jsonl, run, write_bytes,
    write_img,
)
from ragged_helpers import check_ragged_cache

N_PARTS = 4
SIDE_FILES = ["labels.npy", "checksums.npy", "sources.jsonl", "skipped.jsonl"]
INDEX_FILES = ["ragged-index.npy", "jpeg-index.npy"]


def make_source(src, n_per_class=6):
    """PNG and JPEG files of mixed sizes in 3 classes, plus one undecodable file."""
    make_mixed_folder(src, ["k1", "k2", "k3"], n_per_class, (50, 60))


def popen(args, env_extra=None):
    env = dict(os.environ)
    env.pop("DSCACHE_TEST_KILL_AT", None)
    env.update(env_extra or {})
    return subprocess.Popen([str(a) for a in args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def wait_all(procs, expect_rc=0):
    for p in procs:
        out, err = p.communicate(timeout=TIMEOUT_S)
        if p.returncode != expect_rc:
            raise Failure(f"{' '.join(map(str, p.args))}: exit {p.returncode}\n"
                          f"{out.decode()}\n{err.decode()}")


def build_parts(src, base, opts, n=N_PARTS):
    """Builds parts 0..n-1 as n concurrent processes; returns their directories."""
    opts = [str(o) for o in opts]
    if "--shuffle" not in opts:
        opts += ["--shuffle", "none"]
    dirs = [base / f"part{i}" for i in range(n)]
    wait_all([popen([DSCACHE, "build", src, d, "--quiet", "--threads", "1", "--part",
                     f"{i}/{n}"] + opts) for i, d in enumerate(dirs)])
    return dirs


def compare_merged(merged, single, what, parts=None):
    """Merged vs single build: side files byte-identical, manifests equal but for created_utc
    and the shard split, shards covering the same samples; returns the two manifests."""
    ma, mb = load_manifest(merged), load_manifest(single)
    non_shard = lambda d: [f for f in cache_files(d) if not f.startswith("images-")]
    check_eq(non_shard(merged), non_shard(single), f"{what}: side files")
    for name in SIDE_FILES:
        a, b = Path(merged) / name, Path(single) / name
        if b.exists():
            check(a.read_bytes() == b.read_bytes(), f"{what}: {name} differs from a single build")
    for name in INDEX_FILES:
        if (Path(single) / name).exists():
            # Offsets are shard-relative, so they follow the parts' shards; sizes equal.
            a, b = np.load(Path(merged) / name), np.load(Path(single) / name)
            check(np.array_equal(a[:, 1:], b[:, 1:]), f"{what}: {name} sizes differ")
            if parts:
                cat = np.concatenate([np.load(Path(d) / name) for d in parts])
                check(np.array_equal(a, cat), f"{what}: {name} is not the parts' concatenated")
    sa, sb = dict(ma), dict(mb)
    for m in (sa, sb):
        for k in ("created_utc", "shards"):
            m.pop(k)
        m["files"].pop("index", None)  # compared above
    check_eq(sa, sb, f"{what}: manifest (but created_utc and shards)")
    check_eq(sum(s["count"] for s in ma["shards"]), mb["count"], f"{what}: shard counts")
    check("part" not in ma, f"{what}: merged manifest still has a part")
    for i, s in enumerate(ma["shards"]):
        check(re.fullmatch(r"images-%05d\.(npy|h5)" % i, s["file"]), f"{what}: shard {s}")
    run(["verify", merged])
    return ma, mb


def merge_vs_single(tmp, name, opts, ragged=False, storage="npy"):
    src = tmp / "src"
    if not src.exists():
        make_source(src)
    single = tmp / f"{name}_single"
    build(src, single, *opts, "--quiet")
    base = tmp / name
    base.mkdir()
    parts = build_parts(src, base, opts)
    for i, d in enumerate(parts):
        m = load_manifest(d)
        check_eq((m["part"]["index"], m["part"]["count"]), (i, N_PARTS), f"{name}: part key")
        run(["verify", d])
    merged = tmp / f"{name}_merged"
    p = run(["merge"] + parts + [merged])
    check("merged 4 parts" in p.stdout, f"{name}: merge summary {p.stdout!r}")
    ma, mb = compare_merged(merged, single, name, parts)
    check_eq(mb["skipped"], 1, f"{name}: the bad file is skipped")
    check_eq(read_jsonl(merged / "skipped.jsonl"), read_jsonl(single / "skipped.jsonl"),
             f"{name}: skip report")
    if ragged:
        _, a, la, _ = check_ragged_cache(merged, storage)
        _, b, lb, _ = check_ragged_cache(single, storage)
        check_eq(len(a), len(b), f"{name}: samples")
        for k, (x, y) in enumerate(zip(a, b)):
            check(np.array_equal(x, y), f"{name}: sample {k} pixels differ")
    elif "--codec" not in opts:
        check_cache(single, storage)  # merged shards split otherwise; verify checked them
        a, b = load_images(merged), load_images(single)
        check_eq(a.shape, b.shape, f"{name}: images shape")
        for k in range(len(b)):
            check(np.array_equal(a[k], b[k]), f"{name}: sample {k} pixels differ")
    return merged, parts


def case_merge_fixed_npy(tmp):
    opts = ["--size", "24", "--shard-size", str(24 * 24 * 3 * 4)]
    merge_vs_single(tmp, "none", opts)
    merge_vs_single(tmp, "seed0", opts + ["--shuffle", "0"])  # the default shuffle


def case_merge_fixed_hdf5(tmp):
    opts = ["--size", "24", "--storage", "hdf5", "--shard-size", str(24 * 24 * 3 * 4)]
    merge_vs_single(tmp, "none", opts, storage="hdf5")
    merge_vs_single(tmp, "seed3", opts + ["--shuffle", "3"], storage="hdf5")


def case_merge_ragged(tmp):
    for storage in ("npy", "hdf5"):
        opts = ["--layout", "ragged", "--max-side", "20", "--storage", storage,
                "--shard-size", "4000"]
        merge_vs_single(tmp, f"{storage}_none", opts, ragged=True, storage=storage)
        merge_vs_single(tmp, f"{storage}_seed0", opts + ["--shuffle", "0"], ragged=True,
                        storage=storage)


def case_merge_jpeg(tmp):
    merged, _ = merge_vs_single(tmp, "jpeg", ["--size", "24", "--codec", "jpeg",
                                              "--shard-size", "3000", "--shuffle", "5"])
    single = tmp / "jpeg_single"
    # Stored bytes: each sample's JPEG stream, found through the index, equals the single build's.
    def streams(d):
        m = load_manifest(d)
        idx = np.load(d / "jpeg-index.npy")
        out = []
        for s in m["shards"]:
            data = (d / s["file"]).read_bytes()
            out += [(s["file"], int(o), int(n)) for o, n in idx[s["first"]:s["first"] + s["count"], :2]]
        return out
    check_eq(len(streams(merged)), len(streams(single)), "jpeg: sample count")
    run(["verify", merged])  # every stored JPEG stream's XXH64 vs checksums.npy (== single's)


def expect_refusal(args, rc, pattern, out, what):
    p = run(["merge"] + args + [out], expect_rc=rc)
    check(re.search(pattern, p.stderr), f"{what}: stderr {p.stderr!r} lacks {pattern!r}")
    check(not out.exists() and not partial_dir(out).exists(), f"{what}: something left at OUT")


def case_merge_refusals(tmp):
    src, other = tmp / "src", tmp / "other"
    make_source(src)
    make_source(other, n_per_class=5)
    opts = ["--size", "16"]
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    parts = build_parts(src, tmp / "a", opts)
    out = tmp / "out"
    expect_refusal(parts[:3], 2, r"missing part 3/4", out, "missing part")
    expect_refusal(parts + [parts[1]], 2, r"part1.*part 1/4 given twice", out, "twice")
    build(other, tmp / "b" / "o2", *opts, "--part", "2/4", "--quiet")
    expect_refusal(parts[:2] + [tmp / "b" / "o2", parts[3]], 2,
                   r"o2: part from another listing", out, "other listing")
    build(src, tmp / "b" / "s2", "--size", "20", "--part", "2/4", "--quiet")
    expect_refusal(parts[:2] + [tmp / "b" / "s2", parts[3]], 2,
                   r"s2: options differ: size is 20x20 here, 16x16", out, "other options")
    build(src, tmp / "b" / "whole", *opts, "--quiet")
    expect_refusal(parts + [tmp / "b" / "whole"], 2, r"whole: not a part", out, "not a part")
    p = run(["merge", "--strict"] + parts + [out], expect_rc=3)
    check("--strict" in p.stderr and "zz_bad.jpg" in p.stderr, f"--strict: {p.stderr!r}")
    check(not out.exists(), "--strict: OUT exists")
    run(["merge"] + parts + [out])
    p = run(["merge"] + parts + [out], expect_rc=4)
    check("--force" in p.stderr, f"OUT exists: {p.stderr!r}")
    run(["merge", "--force"] + parts + [out])
    run(["merge", parts[0]], expect_rc=2)


def case_merge_empty_part(tmp):
    """A part whose entries all fail to decode, and a part with no entries (N above the
    listing's size), are valid parts (0 samples, their skips recorded): the merge equals a single
    build. A whole build with nothing decoded is still refused, with the right count."""
    src = tmp / "src"
    for k in range(3):
        write_img(src / "a" / f"f{k}.png", rand_rgb(k, 20 + k, 30))
        write_bytes(src / "b" / f"bad{k}.png", b"not a png")
    opts = ["--size", "16"]
    single = tmp / "single"
    build(src, single, *opts, "--quiet")
    check_eq(load_manifest(single)["skipped"], 3, "single build skips")
    (tmp / "two").mkdir()
    parts = build_parts(src, tmp / "two", opts, n=2)  # part 1/2 is b/bad0..2: all skipped
    m = load_manifest(parts[1])
    check_eq((m["count"], m["skipped"], len(m["shards"])), (0, 3, 0), "all-skipped part")
    check_eq(len(read_jsonl(parts[1] / "skipped.jsonl")), 3, "all-skipped part: skip report")
    run(["verify", parts[1]])
    run(["merge"] + parts + [tmp / "m2"])
    compare_merged(tmp / "m2", single, "2 parts, one all skipped")
    check_eq(read_jsonl(tmp / "m2" / "skipped.jsonl"), read_jsonl(single / "skipped.jsonl"),
             "skip report")
    (tmp / "eight").mkdir()
    parts = build_parts(src, tmp / "eight", opts, n=8)  # 6 entries: parts 0 and 4 are empty
    check_eq(load_manifest(parts[0])["part"]["entries"], 0, "empty part")
    run(["merge"] + parts + [tmp / "m8"])
    compare_merged(tmp / "m8", single, "8 parts of 6 entries")
    shuffled = tmp / "single_shuffled"
    build(src, shuffled, *opts, "--shuffle", "7", "--quiet")
    (tmp / "shuf").mkdir()
    parts = build_parts(src, tmp / "shuf", opts + ["--shuffle", "7"], n=4)
    run(["merge"] + parts + [tmp / "ms"])
    compare_merged(tmp / "ms", shuffled, "4 shuffled parts")
    bad = tmp / "allbad"
    for k in range(2):
        write_bytes(bad / "x" / f"bad{k}.png", b"not a png")
    p = build(bad, tmp / "none", *opts, "--quiet", expect_rc=1)
    check("all 2 of 2 entries were skipped" in p.stderr, f"nothing decoded: {p.stderr!r}")
    check(not (tmp / "none").exists() and not partial_dir(tmp / "none").exists(),
          "nothing decoded: output left")
    # Parts that are all empty are valid parts, but their merge is refused as the build is.
    (tmp / "allbad_parts").mkdir()
    parts = build_parts(bad, tmp / "allbad_parts", opts, n=2)
    p = run(["merge"] + parts + [tmp / "none"], expect_rc=1)
    check("all 2 of 2 entries were skipped" in p.stderr, f"merge, nothing decoded: {p.stderr!r}")
    check(not (tmp / "none").exists() and not partial_dir(tmp / "none").exists(),
          "merge, nothing decoded: output left")


def case_merge_refusal_leaves_nothing(tmp):
    """A merge refused for a bad part (a shard that is a symlink, a shard of the wrong size, a
    side file that fails its checksum: exit 5) creates nothing at OUTPUT, no partial directory,
    so the corrected merge then runs without --force or --resume (before: .OUT.partial was left
    and the next merge exited 4)."""
    src = tmp / "src"
    make_source(src)
    opts = ["--size", "16", "--shard-size", str(16 * 16 * 3 * 2)]
    (tmp / "p").mkdir()
    parts = build_parts(src, tmp / "p", opts)
    out = tmp / "out"
    bad = tmp / "bad"

    def variant(name, change):
        if bad.exists():
            subprocess.run(["rm", "-rf", str(bad)], check=True)
        subprocess.run(["cp", "-a", str(parts[2]), str(bad)], check=True)
        change(bad / name)
        return parts[:2] + [bad, parts[3]]

    def symlink(f):
        f.unlink()
        f.symlink_to(parts[2] / f.name)

    def shorten(f):
        f.write_bytes(f.read_bytes()[:-1])

    def flip(f):
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 1
        f.write_bytes(bytes(data))

    last_shard = load_manifest(parts[2])["shards"][-1]["file"]
    for what, name, change, pattern in [
        ("symlinked shard", last_shard, symlink, r"symlink|symbolic link"),
        ("short shard", last_shard, shorten, r"bytes, (its )?manifest says"),
        ("flipped sources.jsonl", "sources.jsonl", flip, r"sources.jsonl.*does not match"),
    ]:
        given = variant(name, change)
        expect_refusal(given, 5, pattern, out, what)
        check_eq(sorted(x.name for x in tmp.iterdir() if "out" in x.name), [],
                 f"{what}: files left beside OUTPUT")
    run(["merge"] + parts + [out])
    run(["verify", out])


def case_merge_resume_hardlinks(tmp):
    src = tmp / "src"
    make_source(src)
    opts = ["--size", "16", "--shard-size", str(16 * 16 * 3 * 2)]
    parts = build_parts(src, tmp, opts)
    out = tmp / "out"
    run(["merge"] + parts + [out], expect_rc=-9,
        env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:3"})
    check(not out.exists() and partial_dir(out).is_dir(), "killed merge: partial dir expected")
    p = run(["merge"] + parts + [out], expect_rc=4)
    check("--resume" in p.stderr, f"interrupted merge without --resume: {p.stderr!r}")
    run(["merge", "--resume"] + parts + [out])
    ref = tmp / "ref"
    run(["merge"] + parts + [ref])
    for name in cache_files(ref):
        if name != "manifest.json":
            check((out / name).read_bytes() == (ref / name).read_bytes(), f"resumed: {name}")
    m = load_manifest(out)
    m.pop("created_utc")
    mr = load_manifest(ref)
    mr.pop("created_utc")
    check_eq(m, mr, "resumed manifest")
    # Shards are hard links of the parts' shards (same inode), never copies on one filesystem.
    g = 0
    for d in parts:
        for s in load_manifest(d)["shards"]:
            a, b = os.stat(d / s["file"]), os.stat(out / m["shards"][g]["file"])
            check(a.st_ino == b.st_ino and b.st_nlink >= 3, f"shard {g} is not a hard link")
            g += 1
    check_eq(g, len(m["shards"]), "shards renumbered")
    single = tmp / "single"
    build(src, single, *opts, "--quiet")
    compare_merged(out, single, "resumed")
    # A resumed merge must join the same parts.
    run(["merge"] + parts + [tmp / "k2"], expect_rc=-9,
        env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:1"})
    time.sleep(1.1)  # a rebuilt part 3 records another created_utc
    build(src, tmp / "other3", *opts, "--part", "3/4", "--quiet")
    p = run(["merge", "--resume"] + parts[:3] + [tmp / "other3", tmp / "k2"], expect_rc=1)
    check("interrupted" in p.stderr, f"resume with other parts: {p.stderr!r}")


CASES = {
    "merge_fixed_npy": case_merge_fixed_npy,
    "merge_fixed_hdf5": case_merge_fixed_hdf5,
    "merge_ragged": case_merge_ragged,
    "merge_jpeg": case_merge_jpeg,
    "merge_refusals": case_merge_refusals,
    "merge_empty_part": case_merge_empty_part,
    "merge_refusal_leaves_nothing": case_merge_refusal_leaves_nothing,
    "merge_resume_hardlinks": case_merge_resume_hardlinks,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
