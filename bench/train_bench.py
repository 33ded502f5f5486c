#!/usr/bin/python3
"""Training benchmark: `dscache-train` against the PyTorch recipe it replaces.

One run on Fashion-MNIST (/usr/share/datasets/fashion-mnist), CPU, cnn, batch 64, accumulation 2:

  folder     the first --count training images written as PNG into WORK/png/<label>/<i>.png
             (cv2), then `dscache build WORK/png WORK/cache --size 28 --channels 1 --quiet`
  seed       what a PyTorch user writes: a Dataset whose __getitem__ cv2.imread(IMREAD_GRAYSCALE)s
             one PNG and returns ((x/255 - mean)/std as a 1x28x28 float tensor, label), a
             DataLoader (batch 64, shuffle, num_workers 0 and 2), the same cnn as dscache-train,
             SGD (lr 0.05, momentum 0.9), 2 micro-batches per optimizer step (loss/2),
             torch.set_num_threads(2); fp32 and bf16 (torch.autocast("cpu", bfloat16) around
             forward + loss). samples/s over --seed-batches micro-batches after --warmup
             micro-batches (stopped early at --seed-cap seconds, saying so); data wait = time
             blocked in next(iterator) / wall
  dscache    `dscache-train --train CACHE --model cnn --batch 64 --accum-steps 2 --precision P
             --threads 2 --max-steps N --output TMP --log-every 10`; samples/s = mean of the
             step lines' samples_per_s after the first (warm-up) line, also the epoch lines'
             samples_per_s; data wait = the epoch lines' data_wait (seconds-weighted)

Prints a table of medians and the ratios against the goals (dscache bf16 >= 2.5x seed fp32,
dscache bf16 >= 1.1x seed bf16, dscache data wait <= 5%) with the load average around the runs,
and writes every run to --json. Run it with Debian's /usr/bin/python3 (python3-torch, numpy, OpenCV).
Two processes sharing two cores slow each other down many times over: run it on an idle machine
and read the recorded load average before trusting a figure.

Every configuration runs once per round, --rounds times interleaved (seed fp32, seed bf16, ...,
dscache-train fp32, dscache-train bf16, then again), and each figure is the median over the
rounds, shown with its min–max: a shared machine slows whatever runs at a bad moment, and
interleaving spreads that over every configuration.

Usage: train_bench.py [--dscache-train PATH] [--dscache PATH] [--count 6000] [--steps 150]
                      [--seed-batches 300] [--warmup 10] [--seed-cap 45] [--rounds 3] [--no-workers2]
                      [--seed-ftz] [--work DIR] [--json FILE]

--seed-ftz adds the seed (workers 0) with torch.set_flush_denormal(True): dscache-train flushes
denormals by default and Debian's generic BLAS is several times slower on them, so this row shows
how much of the gap a one-line change to the seed closes. It is not used for the goals.
Caveat: torch.set_flush_denormal sets the flag of the calling thread only, so intra-op
(OpenMP) threads may still see denormals; a flat fp32 figure here does not rule them out.
"""
import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FMNIST = "/usr/share/datasets/fashion-mnist"
GOAL_VS_SEED_FP32 = 2.5
GOAL_VS_SEED_BF16 = 1.1
GOAL_DATA_WAIT = 0.05
BATCH = 64
ACCUM = 2
THREADS = 2
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training set, x/255


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


# ----------------------------------------------------------------------------------------------
# Data

def read_idx(images_path, labels_path, count):
    with gzip.open(images_path, "rb") as f:
        raw = f.read()
    n, h, w = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    images = np.frombuffer(raw, np.uint8, offset=16).reshape(n, h, w)
    with gzip.open(labels_path, "rb") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    count = min(count, n)
    return images[:count], labels[:count]


def make_folder(folder, count):
    images, labels = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"),
                              os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"), count)
    for c in range(10):
        os.makedirs(os.path.join(folder, str(c)), exist_ok=True)
    paths = []
    for i, (img, lab) in enumerate(zip(images, labels)):
        p = os.path.join(folder, str(int(lab)), "%d.png" % i)
        if not cv2.imwrite(p, img):
            sys.exit("cannot write %s" % p)
        paths.append((p, int(lab)))
    return paths


# ----------------------------------------------------------------------------------------------
# Seed recipe (plain PyTorch)

class PngDataset(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        img = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
        x = torch.from_numpy(img).float().div_(255).sub_(MEAN).div_(STD).unsqueeze(0)
        return x, label


class Cnn(nn.Module):
    def __init__(self, channels=1, classes=10, side=28):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * (side // 4) * (side // 4), 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def run_seed(items, precision, workers, warmup, batches, cap_s, ftz=False):
    torch.set_num_threads(THREADS)
    torch.set_flush_denormal(ftz)
    torch.manual_seed(0)
    model = Cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = torch.utils.data.DataLoader(PngDataset(items), batch_size=BATCH, shuffle=True,
                                         num_workers=workers,
                                         persistent_workers=workers > 0)
    bf16 = precision == "bf16"
    it = iter(loader)
    load_before = loadavg()
    done = 0           # micro-batches measured
    seen = 0           # micro-batches overall
    samples = 0
    wait = 0.0
    t0 = None
    losses = []
    stopped_early = False
    while done < batches:
        if seen == warmup:
            t0 = time.perf_counter()
            wait = 0.0
        w0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        wait += time.perf_counter() - w0
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            loss = F.cross_entropy(out, y)
        (loss / ACCUM).backward()
        seen += 1
        if seen % ACCUM == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
        if t0 is not None:
            done += 1
            samples += x.shape[0]
            if time.perf_counter() - t0 > cap_s:
                stopped_early = True
                break
    wall = time.perf_counter() - t0
    del it, loader
    torch.set_flush_denormal(False)
    return {
        "impl": "seed+ftz" if ftz else "seed", "precision": precision, "workers": workers,
        "micro_batches": done, "samples": samples, "seconds": round(wall, 3),
        "samples_per_s": round(samples / wall, 1),
        "data_wait": round(wait / wall, 4),
        "loss_first": round(float(np.mean(losses[:5])), 4),
        "loss_last": round(float(np.mean(losses[-5:])), 4),
        "stopped_early": stopped_early,
        "load_before": load_before, "load_after": loadavg(),
    }


# ----------------------------------------------------------------------------------------------
# dscache-train

def run_dscache(exe, cache, precision, steps, count, out_dir):
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    epochs = max(1, -(-steps * ACCUM * BATCH // count) + 1)
    cmd = [exe, "--train", cache, "--model", "cnn", "--batch", str(BATCH),
           "--accum-steps", str(ACCUM), "--precision", precision, "--threads", str(THREADS),
           "--max-steps", str(steps), "--epochs", str(epochs), "--output", out_dir,
           "--log-every", "10", "--no-progress"]
    load_before = loadavg()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit("dscache-train failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr))
    lines = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if l.strip()]
    step_lines = [l for l in lines if l.get("kind") == "step"]
    epoch_lines = [l for l in lines if l.get("kind") == "epoch"]
    after_warm = step_lines[1:] if len(step_lines) > 1 else step_lines
    sps_steps = float(np.mean([l["samples_per_s"] for l in after_warm])) if after_warm else None
    ep_seconds = sum(l["seconds"] for l in epoch_lines)
    ep_samples = sum(l["samples_per_s"] * l["seconds"] for l in epoch_lines)
    data_wait = (sum(l["data_wait"] * l["seconds"] for l in epoch_lines) / ep_seconds
                 if ep_seconds > 0 else None)
    return {
        "impl": "dscache-train", "precision": precision, "workers": 2,
        "command": " ".join(cmd), "steps": steps,
        "micro_batches": steps * ACCUM, "seconds": round(wall, 3),
        "samples_per_s": round(sps_steps, 1) if sps_steps else None,
        "samples_per_s_epochs": round(ep_samples / ep_seconds, 1) if ep_seconds > 0 else None,
        "data_wait": round(data_wait, 4) if data_wait is not None else None,
        "loss_first": step_lines[0]["loss"] if step_lines else None,
        "loss_last": step_lines[-1]["loss"] if step_lines else None,
        "step_samples_per_s": [l["samples_per_s"] for l in step_lines],
        "epoch_lines": epoch_lines,
        "load_before": load_before, "load_after": loadavg(),
    }


# ----------------------------------------------------------------------------------------------

def fmt(v, pct=False):
    if v is None:
        return "-"
    return "%.1f%%" % (100 * v) if pct else "%.1f" % v


def median_rows(runs):
    """One row per configuration: the median samples/s and data wait over its rounds, with the
    spread and the load averages seen."""
    rows = []
    keys = []
    for r in runs:
        k = (r["impl"], r["precision"], r["workers"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        rs = [r for r in runs if (r["impl"], r["precision"], r["workers"]) == k]
        sps = [r["samples_per_s"] for r in rs if r["samples_per_s"] is not None]
        dw = [r["data_wait"] for r in rs if r["data_wait"] is not None]
        row = dict(rs[0])
        row.update({
            "rounds": len(rs),
            "samples_per_s": round(float(np.median(sps)), 1) if sps else None,
            "samples_per_s_all": sps,
            "data_wait": round(float(np.median(dw)), 4) if dw else None,
            "micro_batches": int(np.median([r["micro_batches"] for r in rs])),
            "seconds": float(np.median([r["seconds"] for r in rs])),
            "load_before": [min(r["load_before"][0] for r in rs)],
            "load_after": [max(r["load_after"][0] for r in rs)],
        })
        rows.append(row)
    return rows


def report_goals(results):
    """Prints the goals' ratios (dscache-train bf16 against the best seed rows, data wait)
    and returns them as a dict for the JSON."""
    def find(impl, prec, workers=None):
        for r in results:
            if r["impl"] == impl and r["precision"] == prec and (workers is None or r["workers"] == workers):
                return r
        return None

    def best_seed(prec):
        c = [r for r in results if r["impl"] == "seed" and r["precision"] == prec]
        return max(c, key=lambda r: r["samples_per_s"])

    d_bf16 = find("dscache-train", "bf16")
    s_fp32, s_bf16 = best_seed("fp32"), best_seed("bf16")
    goals = {
        "vs_seed_fp32": {"ratio": round(d_bf16["samples_per_s"] / s_fp32["samples_per_s"], 2),
                         "goal": GOAL_VS_SEED_FP32, "seed_workers": s_fp32["workers"]},
        "vs_seed_bf16": {"ratio": round(d_bf16["samples_per_s"] / s_bf16["samples_per_s"], 2),
                         "goal": GOAL_VS_SEED_BF16, "seed_workers": s_bf16["workers"]},
        "data_wait": {"value": d_bf16["data_wait"], "goal": GOAL_DATA_WAIT},
    }
    for k in ("vs_seed_fp32", "vs_seed_bf16"):
        goals[k]["met"] = goals[k]["ratio"] >= goals[k]["goal"]
    dw = [r["data_wait"] for r in results if r["impl"] == "dscache-train" and r["data_wait"] is not None]
    goals["data_wait"]["max_dscache"] = max(dw) if dw else None
    goals["data_wait"]["met"] = bool(dw) and max(dw) <= GOAL_DATA_WAIT
    print()
    print("dscache-train bf16 / seed fp32 (best, workers=%d): %.2fx (goal >= %.1fx) %s" % (
        s_fp32["workers"], goals["vs_seed_fp32"]["ratio"], GOAL_VS_SEED_FP32,
        "met" if goals["vs_seed_fp32"]["met"] else "NOT met"))
    print("dscache-train bf16 / seed bf16 (best, workers=%d): %.2fx (goal >= %.1fx) %s" % (
        s_bf16["workers"], goals["vs_seed_bf16"]["ratio"], GOAL_VS_SEED_BF16,
        "met" if goals["vs_seed_bf16"]["met"] else "NOT met"))
    print("dscache-train data wait (worst of fp32/bf16): %s (goal <= %.0f%%) %s" % (
        fmt(goals["data_wait"]["max_dscache"], True), 100 * GOAL_DATA_WAIT,
        "met" if goals["data_wait"]["met"] else "NOT met"))
    for prec in ("fp32", "bf16"):
        f = find("seed+ftz", prec)
        if f:
            goals["vs_seed_ftz_" + prec] = round(d_bf16["samples_per_s"] / f["samples_per_s"], 2)
            print("(informational) dscache-train bf16 / seed+ftz %s (workers=0): %.2fx" % (
                prec, goals["vs_seed_ftz_" + prec]))
    return goals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dscache-train", default=os.path.join(ROOT, "build", "trainer", "dscache-train"))
    ap.add_argument("--dscache", default=os.path.join(ROOT, "build", "tools", "dscache"))
    ap.add_argument("--count", type=int, default=6000)
    ap.add_argument("--steps", type=int, default=150, help="dscache-train optimizer steps")
    ap.add_argument("--seed-batches", type=int, default=300, help="seed micro-batches measured")
    ap.add_argument("--warmup", type=int, default=10, help="seed warm-up micro-batches")
    ap.add_argument("--seed-cap", type=float, default=45.0, help="seed: stop measuring after S s")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds of every configuration; figures are medians")
    ap.add_argument("--no-workers2", action="store_true", help="skip the num_workers=2 seed runs")
    ap.add_argument("--seed-ftz", action="store_true",
                    help="also run the seed (workers 0) with torch.set_flush_denormal(True), as "
                         "dscache-train flushes denormals; informational, not used for the goals")
    ap.add_argument("--work", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    for exe in (args.dscache_train, args.dscache):
        if not os.access(exe, os.X_OK):
            sys.exit("not executable: %s" % exe)

    work = args.work or tempfile.mkdtemp(prefix="train_bench.")
    runs = []
    os.makedirs(work, exist_ok=True)
    try:
        folder = os.path.join(work, "png")
        cache = os.path.join(work, "cache")
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        items = make_folder(folder, args.count)
        print("folder: %d PNGs in %.1f s" % (len(items), time.perf_counter() - t), flush=True)
        t = time.perf_counter()
        subprocess.run([args.dscache, "build", folder, cache, "--size", "28", "--channels", "1",
                        "--quiet", "--force"], check=True)
        print("cache: built in %.1f s" % (time.perf_counter() - t), flush=True)

        # Interleaved rounds: every configuration once per round, so a slow patch of a shared
        # machine hits all of them alike; each figure below is the median over the rounds.
        seeds = [("fp32", 0, False), ("bf16", 0, False)]
        if not args.no_workers2:
            seeds += [("fp32", 2, False), ("bf16", 2, False)]
        if args.seed_ftz:
            seeds += [("fp32", 0, True), ("bf16", 0, True)]
        for rnd in range(args.rounds):
            for prec, workers, ftz in seeds:
                r = run_seed(items, prec, workers, args.warmup, args.seed_batches, args.seed_cap,
                             ftz)
                r["round"] = rnd
                print("round %d: %s %s workers=%d: %.1f samples/s, data wait %.1f%%, %d "
                      "micro-batches, load %s" % (rnd + 1, r["impl"], prec, workers,
                                                  r["samples_per_s"], 100 * r["data_wait"],
                                                  r["micro_batches"], r["load_after"]), flush=True)
                runs.append(r)
            for prec in ("fp32", "bf16"):
                r = run_dscache(args.dscache_train, cache, prec, args.steps, len(items),
                                os.path.join(work, "out-" + prec))
                r["round"] = rnd
                print("round %d: dscache-train %s: %s samples/s (epoch lines %s), data wait %s, "
                      "load %s" % (rnd + 1, prec, fmt(r["samples_per_s"]),
                                   fmt(r["samples_per_s_epochs"]), fmt(r["data_wait"], True),
                                   r["load_after"]), flush=True)
                runs.append(r)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    results = median_rows(runs)
    print()
    print("medians over %d round(s):" % args.rounds)
    print("| run | precision | workers | samples/s (median) | min–max | data wait | micro-batches | load avg (1 min) lowest → highest |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for r in results:
        print("| %s | %s | %d | %s | %s–%s | %s | %d | %.2f → %.2f |" % (
            r["impl"], r["precision"], r["workers"], fmt(r["samples_per_s"]),
            fmt(min(r["samples_per_s_all"])), fmt(max(r["samples_per_s_all"])),
            fmt(r["data_wait"], True), r["micro_batches"],
            r["load_before"][0], r["load_after"][0]))

    goals = report_goals(results)
    print("load average at the end: %s on %d cores" % (loadavg(), os.cpu_count()))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "host": platform.node(), "cpus": os.cpu_count(), "torch": torch.__version__,
                "count": args.count, "batch": BATCH, "accum": ACCUM, "threads": THREADS,
                "rounds": args.rounds, "results": results, "runs": runs, "goals": goals, "load_end": loadavg(),
            }, f, indent=1)


if __name__ == "__main__":
    main()
