#!/usr/bin/python3
"""What dscache.Loader's safe default costs: samples/s of copy=True (every batch's images a
fresh array, made in C++ without the GIL) against copy=False (zero-copy views of the ring),
batch 256, global shuffle, on raw caches of 64x64x3 and 224x224x3 samples written here with
dscache.Writer (random pixels; --work DIR keeps them for a rerun).

A third row, copy=False plus images.copy() per batch, is what keeping batches cost before
(a numpy copy, GIL held). Each round runs one epoch per mode on the same epoch number (the
same order), in rotating order, so that a shared machine's load hits all alike; an epoch is
timed from its iter() to its last batch, each batch touched (one byte read) as a training step
would start. Reported per shape and mode: the median samples/s over --pairs rounds and the
median of the per-round ratios to copy=False (with quartiles), the figure to read.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/py_copy_bench.py [--work DIR]
           [--pairs 7] [--workers 2] [--batch 256] [--mib 256] [--json OUT]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostinfo import host_info  # noqa: E402

import dscache  # noqa: E402

SHAPES = [(64, 64, 3), (224, 224, 3)]


def make_cache(work, shape, mib):
    """A raw cache of about `mib` MiB of `shape` samples (reused when already there)."""
    h, w, c = shape
    n = max(512, (mib << 20) // (h * w * c))
    path = os.path.join(work, f"raw{h}x{w}x{c}-{n}")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        rng = np.random.default_rng(0)
        tiles = rng.integers(0, 256, size=(64, h, w, c), dtype=np.uint8)
        with dscache.Writer(path, shape=(h, w), classes=[str(k) for k in range(10)],
                            force=True) as wr:
            for i in range(n):
                wr.write(tiles[i % 64] ^ np.uint8(i // 64 % 256), i % 10)
    return path


def epoch_rate(loader, epoch, copy_each=False):
    loader.set_epoch(epoch)
    t0 = time.perf_counter()
    n = 0
    for images, labels in loader:
        if copy_each:
            images = images.copy()
        images[0, 0, 0, 0]  # touch the batch
        n += len(labels)
    return n / (time.perf_counter() - t0)


def quartiles(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[1], q[2]


# (row, Loader copy=, images.copy() per batch): the default, the reused ring, and what a user
# of the old default had to write to keep batches (a numpy copy with the GIL held)
MODES = [("copy=True", True, False), ("copy=False", False, False),
         ("copy=False + images.copy()", False, True)]


def run_shape(path, a):
    cache = dscache.Cache(path)
    loaders = {name: dscache.Loader(cache, batch_size=a.batch, shuffle=True, seed=1,
                                    workers=a.workers, prefetch=4, copy=copy)
               for name, copy, _ in MODES}
    each = {name: copy_each for name, _, copy_each in MODES}
    for name in loaders:  # warm-up: pages faulted in, buffers allocated
        epoch_rate(loaders[name], 0, each[name])
    rates = {name: [] for name in loaders}
    ratios = {name: [] for name in loaders}
    for p in range(a.pairs):
        names = list(loaders)
        order = names[p % len(names):] + names[:p % len(names)]  # rotate who goes first
        got = {name: epoch_rate(loaders[name], p + 1, each[name]) for name in order}
        for name in names:
            rates[name].append(got[name])
            ratios[name].append(got[name] / got["copy=False"])
    rows = []
    for name in loaders:
        lo, med, hi = quartiles(ratios[name])
        rows.append({"mode": name, "samples_per_s": round(statistics.median(rates[name])),
                     "ratio_to_views": round(med, 3), "ratio_q1": round(lo, 3),
                     "ratio_q3": round(hi, 3), "epochs": [round(r) for r in rates[name]]})
    return {"cache": os.path.basename(path), "shape": list(cache.shape), "count": len(cache),
            "modes": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=None, help="where the caches are written (default: a "
                    "temporary directory, removed)")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--mib", type=int, default=256, help="size of each cache, MiB")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    tmp = None
    if a.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="py-copy-bench-")
        a.work = tmp.name
    os.makedirs(a.work, exist_ok=True)
    rows = []
    for shape in SHAPES:
        row = run_shape(make_cache(a.work, shape, a.mib), a)
        rows.append(row)
        for m in row["modes"]:
            print(f"{row['cache']}: {m['mode']:27s} {m['samples_per_s']:>10,} samples/s, "
                  f"/ copy=False = {m['ratio_to_views']:.2f} (quartiles {m['ratio_q1']:.2f}-"
                  f"{m['ratio_q3']:.2f}, {a.pairs} rounds)", flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    out = {"host": host_info(load_avg=load), "batch": a.batch, "workers": a.workers,
           "pairs": a.pairs, "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out["host"]))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
