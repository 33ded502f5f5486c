#!/usr/bin/python3
"""Serving benchmark, one run: dscache's C++ serving against the seed's PyTorch recipes.

  1. source   --source DIR (a folder of class folders), or --cache CACHE (an existing cache; its
              manifest's source is used unless --source is given), or by default a folder of
              real-photo JPEGs made by bench/make_photo_folder.py (--count images) in OUT/photos
  2. build    `dscache build SRC OUT/cache --size 64 --quiet` (skipped with --cache)
  3. dscache  `dscache bench CACHE [--source SRC] --json` -> OUT/dscache-bench.json
  4. peers    bench/serve_peers.py on the same cache -> OUT/peers.json (DataLoader recipes)
  5. goals    printed with their ratios and written to OUT/summary.json:
                loader (global shuffle, all threads) GB/s        >= 0.5 x memcpy ceiling GB/s
                dscache loader samples/s                         >= 10 x fastest seed recipe
                anonymous RSS after the loaders                  <= buffers + 64 MiB,
                  judged only when the cache is >= 4 x the loader's buffers
  6. chart    bench/serve_chart.py -> OUT/serve-chart.png

Fails (exit 2, with a message) when the dscache binary is missing or has no `bench` command, and
(exit 1) when a step fails. Goals that are missed are reported; --strict makes them exit 3.
Run it with Debian's /usr/bin/python3 (the peers need python3-torch, the chart python3-matplotlib).

Usage: serve_bench.py [--source DIR | --cache CACHE] [--dscache build/tools/dscache]
                      [--out serve-bench-out] [--count 6000] [--size 64] [--batch 256]
                      [--workers 0,2] [--epochs 2] [--max-seconds 60] [--bench-seconds 2]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from hostinfo import host_info

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GOAL_MEMCPY = 0.5
GOAL_PEERS = 10.0
RSS_SLACK_MIB = 64.0
RSS_CACHE_FACTOR = 4.0


def die(msg, code=1):
    print(f"serve_bench: {msg}", file=sys.stderr)
    sys.exit(code)


def run(cmd, what, capture=False):
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                           stderr=subprocess.PIPE if capture else None, text=True)
    except OSError as e:
        die(f"{what}: cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        if capture:
            sys.stderr.write(p.stderr or "")
        die(f"{what} failed (exit {p.returncode})")
    return p, time.perf_counter() - t0


def machine_info():
    return host_info()


def check_dscache(binary):
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        die(f"dscache binary {binary} not found or not executable (build it: meson setup build "
            "&& ninja -C build tools/dscache, or pass --dscache PATH)", 2)
    try:
        p = subprocess.run([binary, "bench", "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        die(f"cannot run {binary}: {e}", 2)
    if p.returncode != 0:
        err = (p.stderr or p.stdout).strip().splitlines()
        die(f"`{binary} bench` is missing or broken (exit {p.returncode}"
            + (f": {err[0]}" if err else "") + "); this benchmark needs the bench command", 2)


def ratio_line(label, value, goal, unit="x"):
    ok = value is not None and value >= goal
    v = "n/a" if value is None else f"{value:.2f}{unit}"
    return ok, f"  {'PASS' if ok else 'MISS'}  {label}: {v} (goal >= {goal:g}{unit})"


def judge_goals(ds, peers):
    """The goals against dscache bench's JSON (`ds`) and the peers' (`peers`): the loader vs the
    memcpy ceiling and vs the fastest seed recipe, anonymous RSS vs the buffers. Returns
    (results for summary.json, the lines to print)."""
    results = {}
    lines = []
    memcpy = ds.get("memcpy_gbps")
    loader_gbps = ds.get("loader_gbps")
    r1 = loader_gbps / memcpy if memcpy and loader_gbps is not None else None
    ok1, l1 = ratio_line("loader global shuffle / memcpy ceiling (GB/s)", r1, GOAL_MEMCPY)
    lines.append(l1 + f"  [{loader_gbps or 0:.3f} / {memcpy or 0:.3f} GB/s]")
    results["loader_vs_memcpy"] = {"ratio": r1, "goal": GOAL_MEMCPY, "pass": ok1}

    best_peer = max(peers.get("recipes", []), key=lambda r: r["samples_per_s"], default=None)
    loader_sps = ds.get("loader_samples_per_s")
    r2 = (loader_sps / best_peer["samples_per_s"]
          if best_peer and loader_sps is not None and best_peer["samples_per_s"] > 0 else None)
    ok2, l2 = ratio_line("dscache loader / fastest seed recipe (samples/s)", r2, GOAL_PEERS)
    if best_peer:
        l2 += (f"  [{loader_sps:.0f} / {best_peer['samples_per_s']:.0f}: {best_peer['name']} "
               f"workers={best_peer['workers']} epoch {best_peer['epoch']}]")
    lines.append(l2)
    results["loader_vs_fastest_peer"] = {
        "ratio": r2, "goal": GOAL_PEERS, "pass": ok2,
        "fastest_peer": None if not best_peer else
        {k: best_peer[k] for k in ("name", "workers", "epoch", "samples_per_s")}}
    per_recipe = {}
    for r in peers.get("recipes", []):
        key = f"{r['name']} workers={r['workers']}"
        if r["samples_per_s"] > 0 and loader_sps:
            per_recipe[key] = max(per_recipe.get(key, 0), r["samples_per_s"])
    for key, sps in per_recipe.items():
        lines.append(f"        loader / {key}: {loader_sps / sps:.1f}x  [{sps:.0f} samples/s]")
    results["loader_vs_each_peer"] = {k: loader_sps / v for k, v in per_recipe.items()}

    rss = ds.get("rss", {})
    buffers = rss.get("buffers_mib")
    anon_after = rss.get("anon_after_mib")
    cache_mib = (ds.get("samples", 0) * ds.get("sample_bytes", 0)) / 2**20
    if buffers and anon_after is not None:
        factor = cache_mib / buffers
        limit = buffers + RSS_SLACK_MIB
        applies = factor >= RSS_CACHE_FACTOR
        ok3 = anon_after <= limit
        tag = ("PASS" if ok3 else "MISS") if applies else "n/a "
        line = (f"  {tag}  anonymous RSS after the loaders: {anon_after:.1f} MiB (goal <= buffers "
                f"{buffers:.1f} + {RSS_SLACK_MIB:.0f} = {limit:.1f} MiB; at start "
                f"{rss.get('anon_start_mib', float('nan')):.1f}, before loaders "
                f"{rss.get('anon_before_mib', float('nan')):.1f}); cache {cache_mib:.1f} MiB = "
                f"{factor:.1f}x buffers")
        if not applies:
            line += f" (< {RSS_CACHE_FACTOR:g}x: not judged; use a bigger source)"
        lines.append(line)
        results["rss"] = {"anon_after_mib": anon_after, "limit_mib": limit,
                          "cache_mib": cache_mib, "cache_over_buffers": factor,
                          "applies": applies, "pass": ok3 if applies else None}
    else:
        lines.append("  n/a   anonymous RSS: dscache bench reported no rss/buffers")
        results["rss"] = None
    return results, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--cache", help="use this existing cache (no build)")
    ap.add_argument("--source", help="image folder (class sub-folders); with --cache: its source "
                                     "root if it moved")
    ap.add_argument("--dscache", default=os.path.join(REPO, "build", "tools", "dscache"),
                    help="dscache binary (default %(default)s)")
    ap.add_argument("--out", default="serve-bench-out", help="output folder (default %(default)s)")
    ap.add_argument("--count", type=int, default=6000,
                    help="images make_photo_folder.py makes when no source is given (default "
                         "6000: a 64x64 cache of ~70 MiB, over 4x the loader's buffers)")
    ap.add_argument("--size", type=int, default=64, help="cache image size (default 64)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", default="0,2", help="DataLoader num_workers list (default 0,2)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=60.0,
                    help="per-epoch cap for the peers (default 60)")
    ap.add_argument("--bench-seconds", type=float, default=None,
                    help="dscache bench --seconds (default: its own)")
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                    else sys.executable,
                    help="Python with torch/matplotlib for the peers and chart (default %(default)s)")
    ap.add_argument("--strict", action="store_true", help="exit 3 when a goal is missed")
    args = ap.parse_args()

    binary = os.path.abspath(args.dscache)
    check_dscache(binary)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    # 1. source
    src = os.path.abspath(args.source) if args.source else None
    if args.cache:
        cache = os.path.abspath(args.cache)
        if not os.path.exists(os.path.join(cache, "manifest.json")):
            die(f"{cache} is not a cache (no manifest.json)")
        build_s = None
    else:
        if src is None:
            maker = os.path.join(HERE, "make_photo_folder.py")
            if not os.path.exists(maker):
                die("no --source DIR given and bench/make_photo_folder.py is absent; pass "
                    "--source DIR (a folder of class folders) or --cache CACHE", 2)
            src = os.path.join(out, "photos")
            if os.path.isdir(src) and os.listdir(src):
                print(f"reusing the photo folder {src}")
            else:
                run([args.python, maker, src, "--count", str(args.count)], "make_photo_folder.py")
        if not os.path.isdir(src):
            die(f"source {src} is not a folder")
        # 2. build
        cache = os.path.join(out, "cache")
        if os.path.exists(cache):
            shutil.rmtree(cache)
        _, build_s = run([binary, "build", src, cache, "--size", str(args.size), "--quiet"],
                         "dscache build")
        print(f"built {cache} in {build_s:.1f} s")

    # 3. dscache bench
    cmd = [binary, "bench", cache, "--json", "--batch", str(args.batch)]
    if src:
        cmd += ["--source", src]
    if args.bench_seconds:
        cmd += ["--seconds", str(args.bench_seconds)]
    p, _ = run(cmd, "dscache bench", capture=True)
    try:
        ds = json.loads(p.stdout)
    except ValueError as e:
        die(f"dscache bench --json printed no valid JSON ({e}); first 200 chars: "
            f"{p.stdout[:200]!r}")
    ds_path = os.path.join(out, "dscache-bench.json")
    with open(ds_path, "w") as f:
        json.dump(ds, f, indent=2)
        f.write("\n")
    for r in ds.get("rows", []):
        print(f"  {r['name']:<28} {r.get('threads', ''):>3} thr {r['samples_per_s']:>12.0f} "
              f"samples/s {r.get('gbps', 0):>7.3f} GB/s")

    # 4. peers
    peers_path = os.path.join(out, "peers.json")
    cmd = [args.python, os.path.join(HERE, "serve_peers.py"), cache, "--batch", str(args.batch),
           "--workers", args.workers, "--epochs", str(args.epochs), "--max-seconds",
           str(args.max_seconds), "--json", peers_path]
    if src:
        cmd += ["--source", src]
    run(cmd, "serve_peers.py")
    with open(peers_path) as f:
        peers = json.load(f)

    # 5. goals
    results, lines = judge_goals(ds, peers)
    print()
    print("goals:")
    for l in lines:
        print(l)

    summary = {"machine": machine_info(), "dscache": binary, "cache": cache, "source": src,
               "build_seconds": build_s, "files": {"dscache": ds_path, "peers": peers_path},
               "goals": results}
    # 6. chart
    chart = os.path.join(out, "serve-chart.png")
    run([args.python, os.path.join(HERE, "serve_chart.py"), "--dscache", ds_path, "--peers",
         peers_path, "--out", chart], "serve_chart.py")
    summary["files"]["chart"] = chart
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(f"wrote {out}/summary.json, dscache-bench.json, peers.json, serve-chart.png")

    judged = [results["loader_vs_memcpy"]["pass"], results["loader_vs_fastest_peer"]["pass"]]
    if results["rss"] and results["rss"]["applies"]:
        judged.append(results["rss"]["pass"])
    if args.strict and not all(judged):
        sys.exit(3)


if __name__ == "__main__":
    main()
