#!/usr/bin/python3
"""PNG build benchmark (issue 23): `dscache build` against the seed's Python loop on a folder of
large PNGs (Debian's openclipart-png: nested folders, RGBA and palette PNGs, a few of 169-623
Mpx).

  seed     one process: for every file (sorted walk) cv2.imread (IMREAD_COLOR), cv2.resize to
           SIZE x SIZE with INTER_AREA, BGR2RGB, append; np.stack; np.save. Timed from the walk
           to np.save (`import cv2` not counted).
  dscache  `dscache build ROOT OUT --size SIZE --resize stretch --threads T --max-pixels M
           --quiet`, wall seconds of the process.

Rounds are interleaved (seed, dscache, then dscache, seed, ...) so that load from other users of
the machine hits both sides alike; prints each run, the median and range of each side, the
ratio of the medians (seed / dscache, goal >= 1.7), the load average around each run, and a
correctness check: a few samples (the largest sources among them) compared with the seed's
pixels. Install the data for measuring only: apt-get install --no-install-recommends
openclipart-png.

Usage: png_build_bench.py [--data /usr/share/openclipart/png] [--build-dir build] [--rounds 3]
                          [--size 64] [--threads 2] [--max-pixels 1073741824] [--work DIR]
                          [--json FILE]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

from hostinfo import host_info

GOAL = 1.7


def walk(root):
    """Every file under root, sorted by relative path (the order dscache build uses)."""
    out = []
    for d, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def seed_recipe(root, size, out_path):
    images = []
    for rel in walk(root):
        img = cv2.imread(os.path.join(root, rel), cv2.IMREAD_COLOR)
        if img is None:
            continue
        img = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
        images.append(cv2.cvtColor(img, cv2.COLOR_BGR2RGB))
    np.save(out_path, np.stack(images))
    return len(images)


def load():
    return round(os.getloadavg()[0], 2)


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        words = set(f.read().split())
    return sorted(w for w in ("avx2", "avx512f", "avx512_bf16") if w in words)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/openclipart/png")
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-pixels", type=int, default=1073741824)
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        sys.exit(f"{a.data}: not found (apt-get install --no-install-recommends openclipart-png)")
    dscache = os.path.join(a.build_dir, "tools", "dscache")
    work = a.work or tempfile.mkdtemp(prefix="png_bench_")
    os.makedirs(work, exist_ok=True)
    # The tree as one class folder (a symlink: dscache build follows it, and walks it nested).
    root = os.path.join(work, "src")
    os.makedirs(root, exist_ok=True)
    link = os.path.join(root, "clipart")
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(a.data), link)
    cache = os.path.join(work, "cache")
    seed_npy = os.path.join(work, "seed.npy")

    runs = {"seed": [], "dscache": []}
    count = {}

    def cpu(who):
        u = resource.getrusage(who)
        return u.ru_utime + u.ru_stime

    def run_seed():
        l0, c0, t0 = load(), cpu(resource.RUSAGE_SELF), time.perf_counter()
        count["seed"] = seed_recipe(root, a.size, seed_npy)
        return time.perf_counter() - t0, cpu(resource.RUSAGE_SELF) - c0, l0, load()

    def run_dscache():
        shutil.rmtree(cache, ignore_errors=True)
        l0, c0, t0 = load(), cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run([dscache, "build", root, cache, "--size", str(a.size), "--resize", "stretch",
                        "--threads", str(a.threads), "--max-pixels", str(a.max_pixels), "--quiet"],
                       check=True)
        return time.perf_counter() - t0, cpu(resource.RUSAGE_CHILDREN) - c0, l0, load()

    for r in range(a.rounds):
        order = [("seed", run_seed), ("dscache", run_dscache)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            s, c, l0, l1 = fn()
            runs[name].append({"seconds": round(s, 2), "cpu_seconds": round(c, 2),
                               "load_before": l0, "load_after": l1})
            print(f"round {r + 1} {name:8s} {s:7.2f} s  cpu {c:7.2f} s  load {l0} -> {l1}",
                  flush=True)

    # Correctness: samples against the seed's pixels, by source path.
    sources = []
    for line in open(os.path.join(cache, "sources.jsonl")):
        v = json.loads(line)
        sources.append(v["source"] if isinstance(v, dict) else v)
    seed_rel = [r for r in walk(root)]
    seed_imgs = np.load(seed_npy, mmap_mode="r")
    shards = sorted(f for f in os.listdir(cache) if f.startswith("images-") and f.endswith(".npy"))
    ours = np.concatenate([np.load(os.path.join(cache, f), mmap_mode="r") for f in shards])
    sizes = {rel: os.path.getsize(os.path.join(root, rel)) for rel in sources}
    picks = sorted(sources, key=lambda r: -sizes[r])[:4] + sources[:: max(1, len(sources) // 4)]
    seed_index = {}
    i = 0
    for rel in seed_rel:  # the seed skipped what imread could not read: rebuild its index
        seed_index[rel] = i
        i += 1
    mismatch = []
    for rel in dict.fromkeys(picks):
        j = sources.index(rel)
        got = ours[j]
        want = seed_imgs[seed_index[rel]] if count["seed"] == len(seed_rel) else None
        src = cv2.imread(os.path.join(root, rel))
        enlarged = src.shape[0] < a.size or src.shape[1] < a.size
        if want is None or enlarged:
            # dscache enlarges with INTER_LINEAR (INTER_AREA only shrinks; docs/BUILD.md), the
            # seed's recipe with INTER_AREA: compare an enlarged source with what dscache means.
            interp = cv2.INTER_LINEAR if enlarged else cv2.INTER_AREA
            want = cv2.cvtColor(cv2.resize(src, (a.size, a.size), interpolation=interp),
                                cv2.COLOR_BGR2RGB)
        d = int(np.abs(got.astype(int) - want.astype(int)).max())
        print(f"check {rel} ({src.shape[1]}x{src.shape[0]}{', enlarged' if enlarged else ''}):"
              f" max |dscache - reference| = {d}")
        if d:
            mismatch.append(rel)

    med = {k: statistics.median(x["seconds"] for x in v) for k, v in runs.items()}
    rng = {k: (min(x["seconds"] for x in v), max(x["seconds"] for x in v)) for k, v in runs.items()}
    ratio = med["seed"] / med["dscache"]
    print(f"samples: dscache {len(sources)}, seed {count['seed']}")
    for k in ("seed", "dscache"):
        c = statistics.median(x["cpu_seconds"] for x in runs[k])
        print(f"{k:8s} median {med[k]:7.2f} s  range {rng[k][0]:.2f}-{rng[k][1]:.2f}"
              f"  cpu median {c:.2f} s")
    print(f"ratio seed/dscache {ratio:.2f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'MISSED'})")
    print(f"pixels: {'equal' if not mismatch else 'DIFFER: ' + ', '.join(mismatch)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": host_info(cpu_flags=cpu_flags()), "runs": runs, "median": med,
                       "ratio": ratio, "samples": len(sources), "mismatch": mismatch}, f, indent=1)
    return 0 if not mismatch else 1


if __name__ == "__main__":
    sys.exit(main())
