#!/usr/bin/python3
"""Shared code of the Python module's tests (tests/python/test_*.py): fixtures built with the
real `dscache build` from real PNGs, and the C++ reference (loader_dump).

Each test file ends with `sys.exit(main(globals()))`: its `test_*` functions are its cases, run
by the runner every Python test shares (tests/testrunner.py: `FILE CASE...` or `FILE --all`,
each case in a fresh temporary directory passed as `tmp`; exit 0 all passed, 1 one failed, 2
usage, 77 all skipped: SKIP for meson).
Environment (set by tests/meson.build): PYTHONPATH = build/python (the built package),
DSCACHE = the dscache binary, LOADER_DUMP = the C++ reference dumper.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "cli"))
import testrunner  # noqa: E402 - tests/testrunner.py, the runner every Python test shares
from xxh64 import xxh64  # noqa: E402 - tests/cli/xxh64.py, pure Python
from testrunner import Skip  # noqa: E402,F401 - the cases raise it

DSCACHE = os.environ.get("DSCACHE", "")
LOADER_DUMP = os.environ.get("LOADER_DUMP", "")


def verify(path):
    """`dscache verify PATH` must pass (Skip when DSCACHE is not set)."""
    if not DSCACHE:
        raise Skip("DSCACHE not set (run through meson test)")
    r = subprocess.run([DSCACHE, "verify", path], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"dscache verify {path}: {r.returncode} {r.stdout} {r.stderr}"


def manifest(path):
    """PATH/manifest.json, parsed."""
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def restamp(path):
    """A damaged cache made consistent with its manifest: rewrites the manifest's bytes and
    xxh64 of every file it names to match the files, so that only a deeper check can tell."""
    mpath = os.path.join(path, "manifest.json")
    with open(mpath) as f:
        m = json.load(f)
    entries = list(m["shards"]) + list(m["files"].values())
    for s in m["shards"]:
        for files in s.get("fields", {}).values():
            entries += list(files.values())
    for e in entries:
        data = Path(path, e["file"]).read_bytes()
        e["bytes"], e["xxh64"] = len(data), f"{xxh64(data):016x}"
    with open(mpath, "w") as f:
        json.dump(m, f, indent=2)


def write_pngs(root, classes=3, per_class=23, seed=0):
    """A class-per-folder tree of random RGB PNGs of varied sizes (20..44 px a side)."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        os.makedirs(f"{root}/c{c}", exist_ok=True)
        for i in range(per_class):
            h, w = (int(x) for x in rng.integers(20, 45, size=2))
            img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            assert cv2.imwrite(f"{root}/c{c}/{i:03d}.png", img)


def build_cache(tmp, name="cache", size="16x12", shard_size="20K", extra=(), **pngs):
    """Writes PNGs and builds a cache from them with the real dscache binary."""
    if not DSCACHE:
        raise Skip("DSCACHE not set (run through meson test)")
    src = os.path.join(tmp, name + "-src")
    write_pngs(src, **pngs)
    out = os.path.join(tmp, name)
    sized = ["--size", size] if size else []  # None for the ragged layout
    testrunner.run_cmd([DSCACHE, "build", src, out, *sized, "--shard-size", shard_size, "--quiet",
                        *extra], timeout=300)
    return out


def cpp_batches(cache, out, seed=0, epoch=0, batch=8, shuffle="global", rank=0, world=1,
                drop_last=False, workers=2, prefetch=3, crop="none", h=0, w=0, flip=False,
                cursor=0):
    """The C++ Loader's batches for these options: a list of (images, labels, indices)."""
    if not LOADER_DUMP:
        raise Skip("LOADER_DUMP not set (run through meson test)")
    args = [LOADER_DUMP, cache, out, seed, epoch, batch, shuffle, rank, world, int(drop_last),
            workers, prefetch, crop, h, w, int(flip), cursor]
    r = testrunner.run_cmd(args, timeout=120)
    images = np.fromfile(out + ".images", dtype=np.uint8)
    labels = np.fromfile(out + ".labels", dtype=np.int64)
    indices = np.fromfile(out + ".indices", dtype=np.uint64)
    batches, pi, ps = [], 0, 0
    for line in r.stdout.split("\n"):
        if not line:
            continue
        _, size, bh, bw, bc = (int(x) for x in line.split())
        n = size * bh * bw * bc
        batches.append((images[pi:pi + n].reshape(size, bh, bw, bc), labels[ps:ps + size],
                        indices[ps:ps + size]))
        pi += n
        ps += size
    return batches


def assert_same_batches(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} batches, C++ gave {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        for part, a, b in zip(("images", "labels", "indices"), g, w):
            assert a.shape == b.shape, f"{what}: batch {k} {part} shape {a.shape} vs {b.shape}"
            assert np.array_equal(a, b), f"{what}: batch {k} {part} differ from the C++ Loader's"


def main(namespace):
    """Runs the `test_*` functions of a test file's globals() named in sys.argv."""
    return testrunner.main(testrunner.test_functions(namespace), sys.argv, prefix="dscache-py-")
