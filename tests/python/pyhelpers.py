#!/usr/bin/python3
"""Shared code of the Python module's tests (tests/python/test_*.py): a tiny runner (pytest is
not a dependency), fixtures built with the real `dscache build` from real PNGs, and the C++
reference (loader_dump).

Each test file ends with `sys.exit(run(globals()))`: it runs every `test_*` function (or the
ones named on the command line) in a fresh temporary directory passed as `tmp`, prints one line
per test and exits 0 (all passed), 1 (one failed) or 77 (all skipped: SKIP for meson).
Environment (set by tests/meson.build): PYTHONPATH = build/python (the built package),
DSCACHE = the dscache binary, LOADER_DUMP = the C++ reference dumper.
"""
import inspect
import os
import subprocess
import sys
import tempfile
import time
import traceback

import cv2
import numpy as np

DSCACHE = os.environ.get("DSCACHE", "")
LOADER_DUMP = os.environ.get("LOADER_DUMP", "")


class Skip(Exception):
    pass


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
    r = subprocess.run([DSCACHE, "build", src, out, *sized, "--shard-size", shard_size,
                        "--quiet", *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"dscache build failed ({r.returncode}): {r.stderr}"
    return out


def cpp_batches(cache, out, seed=0, epoch=0, batch=8, shuffle="global", rank=0, world=1,
                drop_last=False, workers=2, prefetch=3, crop="none", h=0, w=0, flip=False,
                cursor=0):
    """The C++ Loader's batches for these options: a list of (images, labels, indices)."""
    if not LOADER_DUMP:
        raise Skip("LOADER_DUMP not set (run through meson test)")
    args = [LOADER_DUMP, cache, out, seed, epoch, batch, shuffle, rank, world, int(drop_last),
            workers, prefetch, crop, h, w, int(flip), cursor]
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"loader_dump failed: {r.stderr}"
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


def run(namespace):
    tests = {n: f for n, f in namespace.items() if n.startswith("test_") and callable(f)}
    wanted = sys.argv[1:] or sorted(tests)
    failed = skipped = 0
    for name in wanted:
        if name not in tests:
            print(f"unknown test {name}; have: {', '.join(sorted(tests))}")
            return 2
        f = tests[name]
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="dscache-py-") as tmp:
            try:
                if "tmp" in inspect.signature(f).parameters:
                    f(tmp=tmp)
                else:
                    f()
                print(f"PASS {name} ({time.monotonic() - t0:.1f} s)", flush=True)
            except Skip as e:
                skipped += 1
                print(f"SKIP {name}: {e}", flush=True)
            except Exception:
                failed += 1
                print(f"FAIL {name}", flush=True)
                traceback.print_exc()
    if failed:
        return 1
    return 77 if skipped == len(wanted) else 0
