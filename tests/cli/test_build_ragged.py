#!/usr/bin/python3
"""Tests of `dscache build --layout ragged`: the samples' sizes and shard splits, HDF5 storage,
usage errors, and --resume and --threads.

Usage: test_build_ragged.py CASE
(env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import sys
import time

import cv2
import h5py
import numpy as np

from cli_helpers import (
    build, check, check_cache, check_eq, check_pixels_equal, compare_caches, imread_grey,
    imread_rgb, kept_shards, main, make_simple_folder, partial_dir, read_jsonl, run, smooth_rgb,
    write_img,
)
from ragged_helpers import check_ragged_cache, make_ragged_folder


def ragged_size(h, w, s):
    """Expected (h, w) of a ragged sample: shorter side shrunk to s (round half up), never grown."""
    shorter, longer = min(h, w), max(h, w)
    if shorter <= s:
        return h, w
    big = (2 * longer * s + shorter) // (2 * shorter)
    return (s, big) if h <= w else (big, s)


def ragged_split(sizes, cap):
    """Expected [(first, count)] of ragged shards for sample byte sizes and --shard-size cap."""
    out, first, cur, n = [], 0, 0, 0
    for i, b in enumerate(sizes):
        if n > 0 and cur + b > cap:
            out.append((first, n))
            first, cur, n = i, 0, 0
        cur += b
        n += 1
    if n:
        out.append((first, n))
    return out


def ragged_reference(path, s, grey=False):
    ref = imread_grey(path)[..., None] if grey else imread_rgb(path)
    h, w = ref.shape[:2]
    eh, ew = ragged_size(h, w, s)
    if (eh, ew) != (h, w):
        ref = cv2.resize(ref, (ew, eh), interpolation=cv2.INTER_AREA)
        if grey:
            ref = ref[..., None]
    return ref


def case_ragged_build(tmp):
    src = tmp / "src"
    S = 24
    made = make_ragged_folder(src)
    order = sorted(made, key=lambda r: (r.split("/")[0].encode(), r.encode()))
    cap = 6000
    out = tmp / "out"
    build(src, out, "--layout", "ragged", "--max-side", str(S), "--shard-size", str(cap))
    m, samples, labels, idx = check_ragged_cache(out, "npy", S)
    check_eq(m["count"], len(made), "count")
    check_eq(m["recipe"]["shard_bytes"], cap, "recipe.shard_bytes")
    sources = read_jsonl(out / "sources.jsonl")
    check_eq(sources, order, "sources.jsonl order")
    check_eq(labels.tolist(), ["abc".index(r[0]) for r in order], "labels")
    for i, rel in enumerate(order):
        h, w = made[rel]
        want_hw = ragged_size(h, w, S)
        check_eq(tuple(idx[i, 1:].tolist()), want_hw, f"sample {i} ({rel} {h}x{w}) index h, w")
        check_eq(samples[i].shape, want_hw + (3,), f"sample {i} ({rel}) shape")
        ref = ragged_reference(src / rel, S)
        if rel.endswith(".png"):
            check(np.array_equal(samples[i], ref),
                  f"sample {i} ({rel} {h}x{w} -> {want_hw}) != cv2 decode + INTER_AREA: max abs "
                  f"diff {np.abs(samples[i].astype(int) - ref).max()}")
            if want_hw == (h, w):
                check(np.array_equal(samples[i], imread_rgb(src / rel)),
                      f"sample {i} ({rel}) smaller than S was not stored unchanged")
        else:  # JPEG: reduced-scale decode (largest 1/f keeping the shorter side >= S)
            f = next((f for f in (8, 4, 2) if -(-min(h, w) // f) >= S), 1)
            check_eq(f, 8, f"fixture: reduction factor for {rel}")
            red = cv2.cvtColor(cv2.imread(str(src / rel), cv2.IMREAD_REDUCED_COLOR_8),
                               cv2.COLOR_BGR2RGB)
            rh, rw = red.shape[:2]
            ref = cv2.resize(red, ragged_size(rh, rw, S)[::-1], interpolation=cv2.INTER_AREA)
            check_pixels_equal(samples[i], ref,
                               f"sample {i} ({rel}): != IMREAD_REDUCED_COLOR_8 + INTER_AREA")
    # Shards split by byte cap; the 155x24 sample (11160 bytes > cap) is alone.
    sizes = [int(h * w * 3) for h, w in idx[:, 1:].tolist()]
    check(max(sizes) > cap, "fixture: no sample larger than the cap")
    want_split = ragged_split(sizes, cap)
    check_eq([(s["first"], s["count"]) for s in m["shards"]], want_split,
             f"shards (first, count) for cap {cap} and sample sizes {sizes}")
    check(len(want_split) >= 4, f"fixture: too few shards {want_split}")
    big = sizes.index(max(sizes))
    check(any(s["first"] == big and s["count"] == 1 for s in m["shards"]),
          f"sample {big} ({max(sizes)} bytes > cap) does not have a shard of its own")
    for s in m["shards"]:
        if s["count"] > 1:
            b = sum(sizes[s["first"]:s["first"] + s["count"]])
            check(b <= cap, f"{s['file']}: {b} image bytes > cap {cap}")
    # A cap equal to the first two samples' bytes: they share a shard (the cap is inclusive).
    exact = sizes[0] + sizes[1]
    ex = tmp / "exact"
    build(src, ex, "--layout", "ragged", "--max-side", str(S), "--shard-size", str(exact),
          "--quiet")
    mx, sx, _, _ = check_ragged_cache(ex, "npy", S)
    check_eq([(s["first"], s["count"]) for s in mx["shards"]], ragged_split(sizes, exact),
             f"shards for cap {exact}")
    check_eq((mx["shards"][0]["first"], mx["shards"][0]["count"]), (0, 2),
             f"cap {exact} == bytes of samples 0+1: first shard")
    check(all(np.array_equal(a, b) for a, b in zip(samples, sx)), "cap-exact build: samples")
    # The default cap: one shard holding the same bytes; side files identical.
    one = tmp / "one"
    build(src, one, "--layout", "ragged", "--max-side", str(S), "--quiet")
    m1, s1, _, idx1 = check_ragged_cache(one, "npy", S)
    check_eq(len(m1["shards"]), 1, "default cap: shards")
    check(all(np.array_equal(a, b) for a, b in zip(samples, s1)), "split vs single: samples")
    check_eq(idx1[:, 1:].tolist(), idx[:, 1:].tolist(), "split vs single: index h, w")
    for f in ("labels.npy", "checksums.npy", "sources.jsonl"):
        check_eq((out / f).read_bytes(), (one / f).read_bytes(), f"{f} split vs single")
    # --no-reduced-decode: the JPEG equals a full decode + INTER_AREA exactly.
    nored = tmp / "nored"
    build(src, nored, "--layout", "ragged", "--max-side", str(S), "--no-reduced-decode", "--quiet")
    mn, sn, _, _ = check_ragged_cache(nored, "npy", S)
    check_eq(mn["recipe"]["reduced_decode"], False, "recipe.reduced_decode")
    j = order.index("b/zphoto.jpg")
    ref = ragged_reference(src / "b/zphoto.jpg", S)
    check_pixels_equal(sn[j], ref, "--no-reduced-decode ragged JPEG != full decode + INTER_AREA")
    run(["verify", nored, "--source"])
    # Grey ragged: --channels 1 equals IMREAD_GRAYSCALE + INTER_AREA.
    grey = tmp / "grey"
    build(src, grey, "--layout", "ragged", "--max-side", "16", "--channels", "1", "--quiet")
    mg, sg, _, _ = check_ragged_cache(grey, "npy", 16, channels=1)
    for i, rel in enumerate(read_jsonl(grey / "sources.jsonl")):
        if rel.endswith(".png"):
            ref = ragged_reference(src / rel, 16, grey=True)
            check(np.array_equal(sg[i], ref), f"grey ragged sample {i} ({rel}) != reference")


def case_ragged_hdf5(tmp):
    src = tmp / "src"
    make_ragged_folder(src, seed=3)
    opts = ["--layout", "ragged", "--max-side", "20", "--shard-size", "4000"]
    out_n, out_h = tmp / "npy", tmp / "h5"
    build(src, out_n, *opts, "--quiet")
    build(src, out_h, *opts, "--storage", "hdf5", "--quiet")
    mn, sn, ln, idn = check_ragged_cache(out_n, "npy", 20)
    mh, sh, lh, idh = check_ragged_cache(out_h, "hdf5", 20)
    check_eq([(s["first"], s["count"]) for s in mh["shards"]],
             [(s["first"], s["count"]) for s in mn["shards"]], "hdf5 vs npy shard ranges")
    check(len(mh["shards"]) >= 3, f"fixture: few hdf5 shards {len(mh['shards'])}")
    check_eq(len(sh), len(sn), "sample count hdf5 vs npy")
    for i, (a, b) in enumerate(zip(sn, sh)):
        check(np.array_equal(a, b), f"sample {i}: hdf5 bytes differ from the npy build")
    for f in ("labels.npy", "checksums.npy", "sources.jsonl", "ragged-index.npy"):
        check_eq((out_n / f).read_bytes(), (out_h / f).read_bytes(), f"{f} npy vs hdf5")
    for s_n, s_h in zip(mn["shards"], mh["shards"]):
        with h5py.File(out_h / s_h["file"], "r") as f:
            ds = f["images"]
            check_eq(ds.ndim, 1, f"{s_h['file']} images is 1-d")
            check(ds.chunks is None and ds.compression is None,
                  f"{s_h['file']}: images chunked/compressed")
            off = ds.id.get_offset()
            check(off is not None, f"{s_h['file']}: images has no file offset")
            n = ds.shape[0]
            mm = np.memmap(out_h / s_h["file"], np.uint8, "r", offset=off, shape=(n,))
            check(np.array_equal(mm, np.load(out_n / s_n["file"], mmap_mode="r")),
                  f"{s_h['file']}: raw data at get_offset() != npy shard data")
    run(["verify", out_h])


def case_ragged_usage(tmp):
    src = tmp / "src"
    make_simple_folder(src, ["a"], 2, (8, 8))
    out = tmp / "out"
    table = [
        (["build", src, out, "--layout", "ragged"], "--max-side"),
        (["build", src, out, "--layout", "ragged", "--max-side", "0"], "--max-side"),
        (["build", src, out, "--layout", "ragged", "--max-side", "8", "--size", "8"], "--size"),
        (["build", src, out, "--size", "8", "--max-side", "8"], "--max-side"),
        (["build", src, out, "--layout", "fixed", "--size", "8", "--max-side", "8"], "--max-side"),
        (["build", src, out, "--layout", "foo", "--size", "8"], "--layout"),
        (["build", src, out, "--layout", "ragged", "--max-side", "abc"], "--max-side"),
        (["build", src, out, "--layout"], "--layout"),
    ]
    for args, needle in table:
        p = run(args, expect_rc=2)
        check(needle.lower() in p.stderr.lower(),
              f"dscache {' '.join(map(str, args))}: message does not name {needle!r}: "
              f"{p.stderr!r}")
        check(not out.exists() and not partial_dir(out).exists(), f"{args}: output created")
    # The valid spelling works and is recorded.
    build(src, out, "--layout", "ragged", "--max-side", "8", "--quiet")
    check_ragged_cache(out, "npy", 8)
    fixed = tmp / "fixed"
    build(src, fixed, "--layout", "fixed", "--size", "8", "--quiet")
    m, _, _ = check_cache(fixed)
    check_eq(m["recipe"].get("max_side"), 0, "fixed: recipe.max_side")
    check("index" not in m["files"], f"fixed manifest has files.index: {m['files']}")


def case_ragged_resume_threads(tmp):
    src = tmp / "src"
    rng = np.random.default_rng(77)
    sizes = [(int(rng.integers(10, 90)), int(rng.integers(10, 90))) for _ in range(36)]
    make_ragged_folder(src, sizes, seed=5, jpeg=False)
    for k in range(4):  # JPEGs too (reduced decode path)
        write_img(src / f"c/j{k}.jpg", smooth_rgb(500 + k, 100 + 20 * k, 180 - 15 * k))
    opts = ["--layout", "ragged", "--max-side", "24", "--shard-size", "5000"]
    t1, t2 = tmp / "t1", tmp / "t2"
    build(src, t1, *opts, "--threads", "1", "--quiet")
    time.sleep(1.05)
    build(src, t2, *opts, "--threads", "2", "--quiet")
    m, _, _, _ = check_ragged_cache(t1, "npy", 24)
    check_eq(m["count"], 40, "count")
    check(len(m["shards"]) >= 5, f"fixture: only {len(m['shards'])} shards")
    compare_caches(t1, t2, "ragged: --threads 1 vs 2")
    # SIGKILL after 2 shards, then --resume: identical to the uninterrupted build.
    out = tmp / "out"
    build(src, out, *opts, "--threads", "2", expect_rc=-9,
          env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:2"})
    part = partial_dir(out)
    inodes = {}
    for f in kept_shards(out, 2):
        check_eq(f.read_bytes(), (t1 / f.name).read_bytes(), f"partial {f.name} vs full build")
        inodes[f.name] = f.stat().st_ino
    build(src, out, *opts, "--threads", "2", "--resume", "--quiet")
    check(not part.exists(), "partial dir left after --resume")
    check_ragged_cache(out, "npy", 24)
    for name, ino in inodes.items():
        check_eq((out / name).stat().st_ino, ino, f"{name} was rewritten, not resumed")
    compare_caches(t1, out, "ragged: resumed vs uninterrupted build")
    # A resume with another --max-side is refused.
    out2 = tmp / "out2"
    build(src, out2, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:1"})
    other = ["--layout", "ragged", "--max-side", "20", "--shard-size", "5000"]
    p = build(src, out2, *other, "--resume", expect_rc=None)
    check(p.returncode not in (0, -9), f"--resume with another --max-side: exit {p.returncode}")
    check(not out2.exists(), "--resume with another --max-side produced a cache")


CASES = {
    "ragged_build": case_ragged_build,
    "ragged_hdf5": case_ragged_hdf5,
    "ragged_usage": case_ragged_usage,
    "ragged_resume_threads": case_ragged_resume_threads,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
