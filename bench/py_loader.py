#!/usr/bin/python3
"""The Python module's serving speed, in one run on one cache:

  cpp        bench/loader_iter: the C++ Loader iterated over whole epochs, nothing else done
  dscache    dscache.Loader(copy=False) from Python: zero-copy numpy views of the ring
  copy       dscache.Loader(copy=True): every batch copied into a fresh numpy array
  torch      dscache.Loader(copy=False).torch(): torch.Tensors through torch.from_numpy
  paired     one dscache.Loader whose epochs alternate between a C++ drain (no Python per
             batch) and the Python loop, same epoch numbers: the ratio least hit by a shared
             machine's changing load (median over --pairs pairs)
  mmap       the seed's recipe (bench/serve_peers.py MmapDataset): np.load(mmap_mode="r") of the
             cache's shards in a torch.utils.data.DataLoader, shuffle, at each --peer-workers

All use batch --batch and a global shuffle; the dscache rows use --workers threads and prefetch
4, as the C++ row does. An epoch is timed from creating its iterator to its last batch; the best
of --epochs epochs over --rounds rounds is reported (the first may still fault pages in). Each
round runs the C++ row and then the Python rows back to back, so that the load of a shared
machine hits both alike. Goals (issue 12): dscache >= 5x the best
mmap recipe and >= 0.8x the C++ Loader.

Usage: py_loader.py CACHE [--build build] [--batch 256] [--workers 2] [--epochs 3]
                    [--peer-workers 0,2] [--max-seconds 30] [--rounds 3] [--pairs 20]
                    [--json OUT]
Run with /usr/bin/python3 and PYTHONPATH=BUILD/python (the built package).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostinfo import host_info  # noqa: E402


def cpp_row(build, cache, batch, workers, epochs, seed):
    exe = os.path.join(build, "bench", "loader_iter")
    r = subprocess.run([exe, cache, str(batch), str(workers), "4", str(epochs), str(seed)],
                       capture_output=True, text=True, check=True)
    j = json.loads(r.stdout)
    return {"name": "cpp", "workers": workers, "epochs": j["epochs"],
            "samples_per_s": j["samples_per_s"]}


def dscache_row(name, cache, batch, workers, epochs, seed):
    import dscache
    kw = {"copy": name == "copy"}
    loader = dscache.Loader(dscache.Cache(cache), batch_size=batch, shuffle=True, seed=seed,
                            workers=workers, prefetch=4, **kw)
    rates = []
    for e in range(epochs):
        loader.set_epoch(e)
        t0 = time.perf_counter()
        n = 0
        it = loader.torch() if name == "torch" else loader
        for images, labels in it:
            n += len(labels)
            images[0, 0, 0, 0]  # touch the batch, as the C++ loop does
        rates.append(n / (time.perf_counter() - t0))
    return {"name": name, "workers": workers, "epochs": [round(r) for r in rates],
            "samples_per_s": round(max(rates))}


def paired_rows(cache, batch, workers, pairs, seed):
    """One dscache.Loader, epochs alternating between a C++ drain (Loader._impl.drain(): the
    batches taken in C++ without the GIL, one byte read from each) and the Python loop, on the
    same epoch number (the same order); each pair in the opposite order of the previous one.
    Paired epochs share the machine's load, so their ratio is what a shared machine measures
    best."""
    import dscache
    loader = dscache.Loader(dscache.Cache(cache), batch_size=batch, shuffle=True, seed=seed,
                            workers=workers, prefetch=4, copy=False)
    cpp, py, ratios = [], [], []

    def c_epoch(e):
        t0 = time.perf_counter()
        loader._impl.start_epoch(seed, e)
        n = loader._impl.drain()
        return n / (time.perf_counter() - t0)

    def p_epoch(e):
        loader.set_epoch(e)
        t0 = time.perf_counter()
        n = 0
        for images, labels in loader:
            n += len(labels)
            images[0, 0, 0, 0]
        return n / (time.perf_counter() - t0)

    for k in range(pairs):
        if k % 2 == 0:
            c, p = c_epoch(k), p_epoch(k)
        else:
            p, c = p_epoch(k), c_epoch(k)
        cpp.append(round(c))
        py.append(round(p))
        ratios.append(p / c)
    return ([{"name": "cpp-inproc", "workers": workers, "epochs": cpp,
              "samples_per_s": max(cpp)},
             {"name": "dscache-paired", "workers": workers, "epochs": py,
              "samples_per_s": max(py)}], sorted(ratios))


def mmap_rows(cache, batch, peer_workers, epochs, seed, max_seconds):
    import serve_peers
    info = serve_peers.CacheInfo(cache)
    rows = []
    for w in peer_workers:
        ds = serve_peers.MmapDataset(info.shards, info.labels)
        got = serve_peers.time_epochs("mmap", ds, w, batch, epochs, max_seconds, seed,
                                      log=lambda *_: None)
        rows.append({"name": "mmap", "workers": w,
                     "epochs": [round(r["samples_per_s"]) for r in got],
                     "samples_per_s": round(max(r["samples_per_s"] for r in got)),
                     "extrapolated": any(r["extrapolated"] for r in got)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache")
    ap.add_argument("--build", default="build")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--peer-workers", default="0,2")
    ap.add_argument("--max-seconds", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    import dscache
    cache = os.path.abspath(a.cache)
    c = dscache.Cache(cache)
    mach = host_info(numpy=np.__version__, loadavg_start=list(os.getloadavg()))
    print(f"cache {cache}: {len(c)} samples of {c.shape}, batch {a.batch}, "
          f"dscache workers {a.workers}, epochs {a.epochs}")
    print(f"{'row':<14} {'workers':>7} {'best samples/s':>15}  epochs (samples/s)")
    rows = []

    def add(r):
        rows.append(r)
        print(f"{r['name']:<14} {r['workers']:>7} {r['samples_per_s']:>15,}  {r['epochs']}",
              flush=True)

    # Rounds: every row once per round, C++ and Python back to back, so that a change of load on
    # a shared machine hits both; each row's figure is its best epoch over all rounds.
    for rnd in range(a.rounds):
        add(dict(cpp_row(a.build, cache, a.batch, a.workers, a.epochs, a.seed), round=rnd))
        for name in ("dscache", "copy", "torch"):
            add(dict(dscache_row(name, cache, a.batch, a.workers, a.epochs, a.seed), round=rnd))
    paired, ratios = paired_rows(cache, a.batch, a.workers, a.pairs, a.seed)
    for r in paired:
        add(r)
    for r in mmap_rows(cache, a.batch, [int(w) for w in a.peer_workers.split(",") if w],
                       a.epochs, a.seed, a.max_seconds):
        add(r)
    mach["loadavg_end"] = list(os.getloadavg())

    best = lambda name: max(r["samples_per_s"] for r in rows if r["name"] == name)  # noqa: E731
    py, cpp, mm = best("dscache"), best("cpp"), best("mmap")
    print("\nbest over all rounds (samples/s): " + ", ".join(
        f"{n} {best(n):,}" for n in ("cpp", "dscache", "copy", "torch")))
    print(f"\ndscache.Loader / best mmap DataLoader recipe: {py:,} / {mm:,} = {py / mm:.1f}x "
          f"(goal >= 5x: {'met' if py >= 5 * mm else 'missed'})")
    print(f"dscache.Loader / C++ Loader: {py:,} / {cpp:,} = {py / cpp:.2f}x "
          f"(goal >= 0.8x: {'met' if py >= 0.8 * cpp else 'missed'})")
    per_round = sorted(
        next(r for r in rows if r["name"] == "dscache" and r.get("round") == k)["samples_per_s"]
        / next(r for r in rows if r["name"] == "cpp" and r.get("round") == k)["samples_per_s"]
        for k in range(a.rounds))
    print(f"dscache.Loader / C++ Loader within each round: "
          f"{', '.join(f'{x:.2f}' for x in per_round)} (median {per_round[len(per_round) // 2]:.2f})")
    med = ratios[len(ratios) // 2]
    print(f"paired epochs in one process, Python loop / C++ drain over {len(ratios)} pairs: "
          f"median {med:.2f}, quartiles {ratios[len(ratios) // 4]:.2f}.."
          f"{ratios[3 * len(ratios) // 4]:.2f} (goal >= 0.8x: {'met' if med >= 0.8 else 'missed'})")
    print(f"load average (1/5/15 min) at start {mach['loadavg_start']}, at end "
          f"{mach['loadavg_end']} on {mach['nproc']} cores")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cache": cache, "samples": len(c), "shape": list(c.shape),
                       "batch": a.batch, "workers": a.workers, "epochs": a.epochs,
                       "machine": mach, "rows": rows,
                       "ratio_vs_mmap": py / mm, "ratio_vs_cpp": py / cpp,
                       "ratio_vs_cpp_per_round": per_round,
                       "paired_ratios": ratios, "paired_ratio_median": med}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
