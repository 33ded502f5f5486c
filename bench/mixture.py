#!/usr/bin/python3
"""Mixture benchmark (issue 39): a Loader over a Mixture of caches against a single Loader
serving the same bytes. Goal: mixture >= 0.9x single.

For each --configs entry SIDE:CHANNELS (default 28:1 and 64:3):
  1. parts   `dscache build IDX WORK/SIDExC/part0 --part 0/2 --size SIDE --channels C` and
             `--part 1/2` (Fashion-MNIST's 60,000 training images from Debian's
             dataset-fashion-mnist, an idx source: real images, no download)
  2. merge   `dscache merge part0 part1 cache`: the same samples, its shards hard links to the
             parts' (the same inodes, so the same page-cache pages serve both Loaders)
  3. bench   `dscache bench cache --mix-with part0 --mix-with part1 --rows mixture --json`,
             --runs times: within one run the single Loader over the cache and the mixture
             Loaders (random, stratified) take turns at 1 and all threads
  4. report  per thread count and batching, the median over the runs of the within-run ratios
             mixture / single in samples/s and single / mixture in CPU time per sample (the
             process's, all threads: steadier than samples/s where other processes share the
             cores), their ranges, and markdown rows for docs/BENCHMARKS.md
  5. split   with --split: build/bench/mixture_split on the same caches, the CPU time of each
             step a mixture Loader adds (view dispatch, transform keys, order building)

Usage: mixture.py [--dscache build/tools/dscache] [--idx FILE] [--work DIR] [--configs 28:1,64:3]
                  [--runs 3] [--seconds 6] [--batch 256] [--threads 0] [--split] [--json F]
Run it with Debian's /usr/bin/python3. About a minute per configuration at the defaults.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from hostinfo import host_info
from programs import built, checked_run

PROG = "mixture"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FMNIST = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
GOAL = 0.9


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def make_caches(dscache, idx, work, side, channels):
    """The two parts and their merge under WORK/SIDExCHANNELS; returns (cache, [parts])."""
    base = os.path.join(work, f"{side}x{channels}")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    parts = [os.path.join(base, f"part{i}") for i in range(2)]
    for i, d in enumerate(parts):
        checked_run(PROG, [dscache, "build", idx, d, "--part", f"{i}/2", "--size", side,
                           "--channels", channels, "--quiet"], f"build --part {i}/2")
    cache = os.path.join(base, "cache")
    checked_run(PROG, [dscache, "merge", *parts, cache, "--quiet"], "merge")
    return cache, parts


def bench(dscache, cache, parts, a):
    cmd = [dscache, "bench", cache, "--mix-with", parts[0], "--mix-with", parts[1], "--rows",
           "mixture", "--seconds", a.seconds, "--batch", a.batch, "--threads", a.threads, "--json"]
    before = loadavg()
    j = json.loads(checked_run(PROG, cmd, "bench"))
    return j, before, loadavg()


def summarize(runs):
    """Per (batching, threads): the single and mixture samples/s and CPU us per sample of every
    run, and the ratios (the bench's own)."""
    out = {}
    for j, _, _ in runs:
        mx = j["mixture"]
        single = {r["threads"]: r for r in mx["rows"] if not r["mixture"]}
        mixed = {(r["batching"], r["threads"]): r for r in mx["rows"] if r["mixture"]}
        for x in mx["ratios"]:
            key = (x["batching"], x["threads"])
            s = out.setdefault(key, {k: [] for k in ("single", "mixture", "single_cpu",
                                                     "mixture_cpu", "ratio", "cpu_ratio")})
            s["single"].append(single[x["threads"]]["samples_per_s"])
            s["mixture"].append(mixed[key]["samples_per_s"])
            s["single_cpu"].append(single[x["threads"]]["cpu_us_per_sample"])
            s["mixture_cpu"].append(mixed[key]["cpu_us_per_sample"])
            s["ratio"].append(x["ratio"])
            s["cpu_ratio"].append(x["cpu_ratio"])
    return out


def report(config, cache_json, stats, loads):
    side, channels = config
    print(f"\n{side}x{side}x{channels} ({cache_json['sample_bytes']} bytes a sample), "
          f"{cache_json['samples']} samples, batch {cache_json['batch']}; load average "
          f"{min(loads):.1f}-{max(loads):.1f}")
    print("| sample | batching | threads | single samples/s | mixture samples/s | "
          "mixture / single (samples/s) | single CPU us | mixture CPU us | "
          "by CPU time per sample |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    med = statistics.median
    rows = []
    for (batching, threads), s in sorted(stats.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        wall, cpu = med(s["ratio"]), med(s["cpu_ratio"])
        print(f"| {side}x{side}x{channels} | {batching} | {threads} | "
              f"{med(s['single']):,.0f} | {med(s['mixture']):,.0f} | "
              f"**{wall:.2f}** [{min(s['ratio']):.2f}-{max(s['ratio']):.2f}] | "
              f"{med(s['single_cpu']):.3f} | {med(s['mixture_cpu']):.3f} | "
              f"**{cpu:.2f}** [{min(s['cpu_ratio']):.2f}-{max(s['cpu_ratio']):.2f}] |")
        rows.append(dict(s, batching=batching, threads=threads, ratio_median=wall,
                         cpu_ratio_median=cpu))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dscache", default=os.path.join(REPO, "build", "tools", "dscache"))
    ap.add_argument("--idx", default=FMNIST, help="idx3 images file (labels: its sibling)")
    ap.add_argument("--work", default="/tmp/dscache-mixture-bench")
    ap.add_argument("--configs", default="28:1,64:3", help="SIDE:CHANNELS,...")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", default="6", help="dscache bench --seconds (per Loader row)")
    ap.add_argument("--batch", default="256")
    ap.add_argument("--threads", default="0", help="dscache bench --threads (0 = all)")
    ap.add_argument("--split", action="store_true", help="run bench/mixture_split too")
    ap.add_argument("--split-binary", default=os.path.join(REPO, "build", "bench", "mixture_split"))
    ap.add_argument("--json", help="write every run's figures here")
    a = ap.parse_args()
    dscache = built(PROG, "", [a.dscache], "build it: ninja -C build tools/dscache")[0]
    if a.split:
        built(PROG, "", [a.split_binary], "build it: ninja -C build bench/mixture_split")
    if not os.path.isfile(a.idx):
        sys.exit(f"{PROG}: {a.idx} is missing (apt-get install dataset-fashion-mnist, or --idx)")
    print("machine:", json.dumps(host_info()))
    results = []
    for config in [tuple(c.split(":")) for c in a.configs.split(",")]:
        cache, parts = make_caches(dscache, a.idx, a.work, *config)
        print(f"+ dscache bench {cache} --mix-with {parts[0]} --mix-with {parts[1]} --rows mixture "
              f"--seconds {a.seconds} --batch {a.batch} --threads {a.threads} --json "
              f"(x{a.runs})", flush=True)
        runs = [bench(dscache, cache, parts, a) for _ in range(a.runs)]
        loads = [x for _, b, e in runs for x in (b, e)]
        rows = report(config, runs[0][0], summarize(runs), loads)
        results.append({"config": "x".join(config), "rows": rows, "loads": loads,
                        "runs": [j for j, _, _ in runs]})
        if a.split:
            split = checked_run(PROG, [a.split_binary, os.path.dirname(cache), 15], "split")
            print(split, end="")
            results[-1]["split"] = split
    for key, what in (("ratio_median", "samples/s"), ("cpu_ratio_median", "CPU time per sample")):
        worst = min(r[key] for res in results for r in res["rows"])
        print(f"worst median mixture / single by {what}: {worst:.2f}x (goal >= {GOAL}x) "
              f"{'PASS' if worst >= GOAL else 'MISS'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": host_info(), "args": vars(a), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
