#!/usr/bin/python3
"""Build benchmark: `dscache build` against its decode ceiling and the Python loop it replaces.

One run over one image folder (made by make_photo_folder.py when absent), page cache warm:

  build      `dscache build DIR OUT --size N --threads T --quiet`, T = 1 and all cores;
             images/s = samples / wall seconds of the process, best of --runs
  ceiling    bench/decode_ceiling at T = 1 and all cores: files read into memory first, decode +
             resize only, nothing written; best of --runs
  python     the recipe a PyTorch user writes: one process, for each file cv2.imread, scale to
             cover with INTER_AREA, center crop, BGR2RGB, append; np.stack; np.save; best of --runs
  reduced    `dscache build` (all cores) with and without --no-reduced-decode, images/s of both and
             the pixel difference between the two caches (loaded with numpy)

Prints a table and the ratios against the goals (build/ceiling >= 0.85, build/python >= 1.7) and
writes everything to --json. Run it with Debian's /usr/bin/python3 (numpy + OpenCV).

Usage: build_bench.py [--build-dir build] [--data DIR] [--count 1500] [--sizes 128,64,224]
                      [--runs 3] [--work DIR] [--json FILE]
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

from hostinfo import host_info

HERE = os.path.dirname(os.path.abspath(__file__))
GOAL_CEILING = 0.85
GOAL_PYTHON = 1.7


# ----------------------------------------------------------------------------------------------
# The Python recipe (what dscache build replaces). Kept as a PyTorch user would write it.

def sorted_sources(root):
    """class/name of every file, in the python recipe's order (classes, then names, sorted)."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    return [f"{cls}/{name}" for cls in classes
            for name in sorted(os.listdir(os.path.join(root, cls)))]


def python_recipe(root, size, out_path):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    images, labels = [], []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            img = cv2.imread(os.path.join(root, cls, name))  # BGR, full-size decode
            if img is None:
                continue
            h, w = img.shape[:2]
            s = max(size / h, size / w)
            nw, nh = max(size, round(w * s)), max(size, round(h * s))
            img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA)
            y, x = (nh - size) // 2, (nw - size) // 2
            img = cv2.cvtColor(img[y:y + size, x:x + size], cv2.COLOR_BGR2RGB)
            images.append(img)
            labels.append(label)
    np.save(out_path, np.stack(images))
    np.save(out_path.replace(".npy", "-labels.npy"), np.array(labels, dtype=np.int64))
    return len(images)


# ----------------------------------------------------------------------------------------------

def machine_info():
    return host_info(opencv=cv2.__version__, numpy=np.__version__)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def warm_page_cache(root):
    """Reads every file once (untimed) so no run pays for the disk."""
    n = total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as f:
                total += len(f.read())
            n += 1
    return n, total


def best(samples):
    return max(samples) if samples else 0.0


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_build(dscache, src, out, size, threads, reduced, runs):
    """Best images/s over `runs` builds (wall time of the whole process); the output is removed
    (untimed) before each. cpu_ms_per_image is user+sys of the process, lowest of the runs."""
    rates, cpus, walls, count = [], [], [], 0
    for _ in range(runs):
        shutil.rmtree(out, ignore_errors=True)
        cmd = [dscache, "build", src, out, "--size", str(size), "--threads", str(threads),
               "--quiet"]
        if not reduced:
            cmd.append("--no-reduced-decode")
        c0 = children_cpu()
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        dt = time.perf_counter() - t0
        cpu = children_cpu() - c0
        with open(os.path.join(out, "manifest.json")) as f:
            count = json.load(f)["count"]
        rates.append(count / dt)
        walls.append(dt)
        cpus.append(cpu)
    return {"images_per_s": best(rates), "runs": [round(r, 1) for r in rates], "count": count,
            "best_seconds": round(min(walls), 4),
            "cpu_ms_per_image": round(1000 * min(cpus) / max(1, count), 3)}


def run_startup(dscache, runs):
    """Wall seconds of `dscache --version` (process start, dynamic linking), best of runs."""
    walls = []
    for _ in range(max(3, runs)):
        t0 = time.perf_counter()
        subprocess.run([dscache, "--version"], check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    return round(min(walls), 4)


def make_subset(src, dst, every):
    """A folder of hard links to every `every`-th file of `src` (sorted), same class folders."""
    shutil.rmtree(dst, ignore_errors=True)
    files = []
    for dirpath, _, names in os.walk(src):
        files += [os.path.join(dirpath, n) for n in names]
    files.sort()
    for f in files[::every]:
        rel = os.path.relpath(f, src)
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        try:
            os.link(f, os.path.join(dst, rel))
        except OSError:
            shutil.copyfile(f, os.path.join(dst, rel))
    return len(files[::every])


def run_ceiling(exe, src, size, threads, reduced, runs):
    rates, cpus, last = [], [], {}
    for _ in range(runs):
        cmd = [exe, src, "--size", str(size), "--threads", str(threads)]
        if not reduced:
            cmd.append("--no-reduced-decode")
        res = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
        last = json.loads(res.stdout)
        rates.append(last["images_per_s"])
        cpus.append(last["cpu_seconds"])
    n = max(1, last.get("ok", 1))
    return {"images_per_s": best(rates), "runs": [round(r, 1) for r in rates],
            "count": last.get("ok", 0), "reduced_share": round(last.get("reduced", 0) / n, 4),
            "cpu_ms_per_image": round(1000 * min(cpus) / n, 3)}


def run_python(src, size, work, runs):
    """Timed in this process from the listing to np.save; `import cv2` is not counted."""
    rates, cpus, count = [], [], 0
    out = os.path.join(work, f"python-{size}.npy")
    for _ in range(runs):
        c0 = time.process_time()
        t0 = time.perf_counter()
        count = python_recipe(src, size, out)
        dt = time.perf_counter() - t0
        cpus.append(time.process_time() - c0)
        rates.append(count / dt)
    return {"images_per_s": best(rates), "runs": [round(r, 1) for r in rates], "count": count,
            "cpu_ms_per_image": round(1000 * min(cpus) / max(1, count), 3), "output": out}


def load_cache(cache):
    """All samples of an npy cache as one (N, H, W, C) uint8 array, in cache order."""
    with open(os.path.join(cache, "manifest.json")) as f:
        manifest = json.load(f)
    parts = [np.load(os.path.join(cache, s["file"]), mmap_mode="r") for s in manifest["shards"]]
    return np.concatenate(parts) if len(parts) > 1 else np.asarray(parts[0])


def pixel_diff(a, b):
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return {"mean_abs": round(float(d.mean()), 3), "max_abs": int(d.max()),
            "share_gt8": round(float((d > 8).mean()), 5)}


def merge(samples):
    """One figure from several single runs: best rate, lowest time and CPU."""
    out = dict(samples[-1])
    out["runs"] = [x for s in samples for x in s["runs"]]
    out["images_per_s"] = best([s["images_per_s"] for s in samples])
    for key in ("best_seconds", "cpu_ms_per_image"):
        if key in out:
            out[key] = min(s[key] for s in samples)
    return out


def bench_size(args, exes, size, work):
    """All figures at one size. Runs are interleaved (round 1 of everything, then round 2...) so
    that load from other processes, if any, falls on every figure alike."""
    all_t = os.cpu_count() or 1
    r = {"size": size}
    cache_red = os.path.join(work, f"cache-{size}-reduced")
    cache_full = os.path.join(work, f"cache-{size}-full")
    cache_t1 = os.path.join(work, f"cache-{size}-t1")
    cache_small = os.path.join(work, f"cache-{size}-small")
    dsc, ceil = exes["dscache"], exes["ceiling"]
    configs = [
        ("build_t1", lambda: run_build(dsc, args.data, cache_t1, size, 1, True, 1)),
        ("build_all", lambda: run_build(dsc, args.data, cache_red, size, all_t, True, 1)),
        ("build_all_subset", lambda: run_build(dsc, args.subset, cache_small, size, all_t, True, 1)),
        ("build_all_full", lambda: run_build(dsc, args.data, cache_full, size, all_t, False, 1)),
        ("ceiling_t1", lambda: run_ceiling(ceil, args.data, size, 1, True, 1)),
        ("ceiling_all", lambda: run_ceiling(ceil, args.data, size, all_t, True, 1)),
    ]
    if not args.no_python:
        configs.append(("python", lambda: run_python(args.data, size, work, 1)))
    samples = {name: [] for name, _ in configs}
    for round_ in range(args.runs):
        say(f"size {size}: round {round_ + 1}/{args.runs}")
        for name, fn in configs:
            samples[name].append(fn())
    for name in samples:
        r[name] = merge(samples[name])
    for c in (cache_t1, cache_small):
        shutil.rmtree(c, ignore_errors=True)
    # Steady-state rate: the extra images over the extra time, fixed costs cancelling out.
    dn = r["build_all"]["count"] - r["build_all_subset"]["count"]
    dt = r["build_all"]["best_seconds"] - r["build_all_subset"]["best_seconds"]
    r["build_all_marginal"] = {"images_per_s": round(dn / dt, 1) if dt > 0 else 0.0,
                               "fixed_seconds": round(r["build_all"]["best_seconds"] -
                                                      r["build_all"]["count"] * dt / dn, 4)}

    red, full = load_cache(cache_red), load_cache(cache_full)
    r["reduced_vs_full"] = pixel_diff(red, full)
    if "python" in r:
        py = np.load(r["python"]["output"], mmap_mode="r")
        if py.shape == full.shape:
            # The python recipe walks the folder sorted; the build shuffles by default, and
            # sources.jsonl gives each sample's source in cache order.
            order = {rel: i for i, rel in enumerate(sorted_sources(args.data))}
            with open(os.path.join(cache_full, "sources.jsonl")) as f:
                cache_order = [order[json.loads(line)] for line in f]
            r["python_vs_full"] = pixel_diff(py[cache_order], full)
        os.remove(r["python"].pop("output"))
    for c in (cache_red, cache_full):
        shutil.rmtree(c, ignore_errors=True)

    b = r["build_all"]["images_per_s"]
    r["ratios"] = {
        "build_all_over_ceiling_all": round(b / r["ceiling_all"]["images_per_s"], 3),
        "build_all_marginal_over_ceiling_all": round(
            r["build_all_marginal"]["images_per_s"] / r["ceiling_all"]["images_per_s"], 3),
        "build_t1_over_ceiling_t1": round(r["build_t1"]["images_per_s"] /
                                          r["ceiling_t1"]["images_per_s"], 3),
        "build_scaling_all_over_t1": round(b / r["build_t1"]["images_per_s"], 3),
        "reduced_speedup": round(b / r["build_all_full"]["images_per_s"], 3),
    }
    if "python" in r:
        r["ratios"]["build_all_over_python"] = round(b / r["python"]["images_per_s"], 3)
    return r


def say(msg):
    print(f"[build_bench] {msg}", file=sys.stderr, flush=True)


def print_table(results, all_t):
    rows = [("dscache build, 1 thread", "build_t1"),
            (f"dscache build, {all_t} threads", "build_all"),
            (f"dscache build, {all_t} threads, steady state (*)", "build_all_marginal"),
            (f"dscache build, {all_t} threads, --no-reduced-decode", "build_all_full"),
            ("decode ceiling, 1 thread", "ceiling_t1"),
            (f"decode ceiling, {all_t} threads", "ceiling_all"),
            ("python recipe (cv2.imread loop), 1 process", "python")]
    sizes = [r["size"] for r in results]
    print(f"{'images/s (best of runs)':52s}" + "".join(f"{'size ' + str(s):>12s}" for s in sizes))
    for label, key in rows:
        cells = "".join(f"{r[key]['images_per_s']:12.0f}" if key in r else f"{'-':>12s}"
                        for r in results)
        print(f"{label:52s}{cells}")
    print()
    ratio_rows = [("build(all) / ceiling(all)   goal >= 0.85", "build_all_over_ceiling_all"),
                  ("build(all) steady state / ceiling(all)", "build_all_marginal_over_ceiling_all"),
                  ("build(1) / ceiling(1)", "build_t1_over_ceiling_t1"),
                  ("build(all) / python recipe goal >= 1.7", "build_all_over_python"),
                  ("build(all) / build(1)", "build_scaling_all_over_t1"),
                  ("reduced / full decode speedup", "reduced_speedup")]
    for label, key in ratio_rows:
        cells = "".join(f"{r['ratios'][key]:12.2f}" if key in r["ratios"] else f"{'-':>12s}"
                        for r in results)
        print(f"{label:52s}{cells}")
    print()
    cpu_rows = [("dscache build, 1 thread", "build_t1"), (f"dscache build, {all_t} threads", "build_all"),
                ("decode ceiling, 1 thread", "ceiling_t1"),
                (f"decode ceiling, {all_t} threads", "ceiling_all"), ("python recipe", "python")]
    print(f"{'CPU ms per image (user+sys, lowest run)':52s}" +
          "".join(f"{'size ' + str(r['size']):>12s}" for r in results))
    for label, key in cpu_rows:
        cells = "".join(f"{r[key]['cpu_ms_per_image']:12.3f}" if key in r else f"{'-':>12s}"
                        for r in results)
        print(f"{label:52s}{cells}")
    print()
    for r in results:
        m = r["build_all_marginal"]
        print(f"(*) size {r['size']}: {r['build_all_subset']['count']}-file subset built in "
              f"{r['build_all_subset']['best_seconds']:.3f} s; fixed cost per build "
              f"{m['fixed_seconds']:.3f} s")
    for r in results:
        d = r["reduced_vs_full"]
        line = (f"size {r['size']}: reduced vs full decode: mean |diff| {d['mean_abs']:.2f}, "
                f"max {d['max_abs']}, share > 8: {100 * d['share_gt8']:.2f} %")
        if "python_vs_full" in r:
            p = r["python_vs_full"]
            line += (f"; python vs dscache full: mean {p['mean_abs']:.3f}, max {p['max_abs']}")
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build", help="meson build dir (default build)")
    ap.add_argument("--data", default=None,
                    help="image folder; made with make_photo_folder.py if absent "
                         "(default WORK/photos)")
    ap.add_argument("--count", type=int, default=1500, help="images when making --data")
    ap.add_argument("--seed", type=int, default=0, help="seed when making --data")
    ap.add_argument("--sizes", default="128",
                    help="comma-separated target sizes; the first is the primary (default 128)")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure, best kept (default 3)")
    ap.add_argument("--work", default=None, help="scratch dir for caches (default: a temp dir)")
    ap.add_argument("--subset-every", type=int, default=15,
                    help="fixed-cost subset: every Nth file of --data (default 15)")
    ap.add_argument("--no-python", action="store_true", help="skip the Python recipe")
    ap.add_argument("--json", default=None, help="write all figures to this JSON file")
    args = ap.parse_args()

    exes = {"dscache": os.path.join(args.build_dir, "tools", "dscache"),
            "ceiling": os.path.join(args.build_dir, "bench", "decode_ceiling")}
    for name, path in exes.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"build_bench: {path} not found; build with meson/ninja first")
    sizes = [int(s) for s in args.sizes.split(",") if s]

    own_work = args.work is None
    work = args.work or tempfile.mkdtemp(prefix="dscache-bench-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    if args.data is None:
        args.data = os.path.join(work, "photos")
    dataset = None
    if not os.path.isdir(args.data):
        say(f"making {args.count} photos in {args.data}")
        res = subprocess.run([sys.executable, os.path.join(HERE, "make_photo_folder.py"),
                              args.data, "--count", str(args.count), "--seed", str(args.seed)],
                             check=True, stdout=subprocess.PIPE, text=True)
        dataset = json.loads(res.stdout)
    n, nbytes = warm_page_cache(args.data)
    say(f"page cache warm: {n} files, {nbytes / 2**20:.1f} MiB")
    args.subset = os.path.join(work, "subset")
    args.subset_files = make_subset(args.data, args.subset, args.subset_every)

    out = {"machine": machine_info(), "data": {"dir": os.path.abspath(args.data), "files": n,
                                               "bytes": nbytes, "made": dataset},
           "runs": args.runs, "loadavg_start": loadavg(),
           "startup_seconds": run_startup(exes["dscache"], args.runs), "sizes": []}
    t0 = time.perf_counter()
    try:
        for size in sizes:
            out["sizes"].append(bench_size(args, exes, size, work))
    finally:
        shutil.rmtree(args.subset, ignore_errors=True)
        if own_work and args.data != os.path.join(work, "photos"):
            shutil.rmtree(work, ignore_errors=True)
        elif own_work:
            say(f"kept the generated photos: reuse them with --data {args.data}")
    out["loadavg_end"] = loadavg()
    out["seconds"] = round(time.perf_counter() - t0, 1)

    print(f"{n} files, {nbytes / 2**20:.1f} MiB, {out['machine'].get('cpu', '?')}, "
          f"{out['machine']['nproc']} cores; best of {args.runs}; load average "
          f"{out['loadavg_start'][0]:.2f} -> {out['loadavg_end'][0]:.2f}; "
          f"{out['seconds']:.0f} s; `dscache --version` takes {out['startup_seconds']:.3f} s\n")
    print_table(out["sizes"], os.cpu_count() or 1)
    primary = out["sizes"][0]["ratios"]
    print()
    print(f"goal build/ceiling >= {GOAL_CEILING}: "
          f"{'met' if primary['build_all_over_ceiling_all'] >= GOAL_CEILING else 'MISSED'} "
          f"({primary['build_all_over_ceiling_all']:.2f} at size {sizes[0]})")
    if "build_all_over_python" in primary:
        print(f"goal build/python >= {GOAL_PYTHON}: "
              f"{'met' if primary['build_all_over_python'] >= GOAL_PYTHON else 'MISSED'} "
              f"({primary['build_all_over_python']:.2f} at size {sizes[0]})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
