#!/usr/bin/python3
"""bf16 against fp32 per model: dscache-train and the same model in PyTorch, CPU ms per sample.

For each model (cnn and resnet18 on a classify cache, unet-small on a segment cache) and each
round, in turn: dscache-train bf16, dscache-train fp32, PyTorch bf16, PyTorch fp32. dscache-train
runs `--precision P --threads T --max-steps S --batch 64 --optimizer adamw` on the cache; the
PyTorch rows run dscache.models' mirror of the same model (when this checkout has one) for the same
steps on random inputs of the cache's shape, AdamW, torch.autocast("cpu", bfloat16) around forward
and loss. Each row's figure is the CPU time (user + system) of its whole process over the samples
trained, start-up included, so the load of a shared machine disturbs it less than wall time; a
ratio is bf16's speed over fp32's (fp32 ms / bf16 ms) from the same round. Prints the median per
row and the medians of the ratios. Run with /usr/bin/python3 (python3-torch).

Usage: precision_bench.py --dscache-train EXE --classify-cache DIR --segment-cache DIR
                          [--models cnn,resnet18,unet-small] [--threads 1] [--steps 20]
                          [--rounds 3] [--json FILE]
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

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 64
TORCH_LOOP = r"""
import importlib.util, sys, torch, torch.nn.functional as F
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
kind, prec, threads, steps, side = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads); torch.manual_seed(0)
seg = kind == "unet-small"
model = m.build_model(kind, "segment" if seg else "classify", 1, 11 if seg else 10, side, side)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64, 1, side, side)
y = torch.randint(0, 11, (64, side, side)) if seg else torch.randint(0, 10, (64,))
for _ in range(steps):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
        loss = F.cross_entropy(model(x).float(), y, reduction="sum") / 64
    loss.backward(); opt.step(); opt.zero_grad()
"""


def cpu_of(cmd):
    """Runs cmd; returns the CPU seconds (user + system) it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def dscache_cmd(a, kind, prec, out):
    seg = kind == "unet-small"
    cmd = [a.dscache_train, "--train", a.segment_cache if seg else a.classify_cache,
           "--model", kind, "--batch", str(BATCH), "--optimizer", "adamw", "--precision", prec,
           "--threads", str(a.threads), "--max-steps", str(a.steps), "--epochs", "100",
           "--output", out, "--force", "--no-progress", "--log-every", "0"]
    return cmd + (["--task", "segment", "--targets", "mask"] if seg else [])


def torch_cmd(a, kind, prec):
    side = 56 if kind == "unet-small" else 28
    models = os.path.join(os.path.dirname(HERE), "python", "dscache", "models.py")
    return [sys.executable, "-c", TORCH_LOOP, models, kind, prec, str(a.threads), str(a.steps),
            str(side)]


def has_mirror(kind):
    with open(os.path.join(os.path.dirname(HERE), "python", "dscache", "models.py")) as f:
        return '"%s"' % kind in f.read().split("KINDS =", 1)[1].split("\n", 1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dscache-train", required=True)
    ap.add_argument("--classify-cache", required=True, help="28x28 grey, 10 classes")
    ap.add_argument("--segment-cache", required=True, help="56x56 grey, field mask, 11 classes")
    ap.add_argument("--models", default="cnn,resnet18,unet-small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = {}
    out = tempfile.mkdtemp(prefix="precision_bench.")
    for rnd in range(a.rounds):
        for kind in a.models.split(","):
            for impl in ("dscache-train", "pytorch"):
                if impl == "pytorch" and not has_mirror(kind):
                    continue
                for prec in ("bf16", "fp32"):
                    cmd = (dscache_cmd(a, kind, prec, os.path.join(out, "run"))
                           if impl == "dscache-train" else torch_cmd(a, kind, prec))
                    ms = 1000 * cpu_of(cmd) / (a.steps * BATCH)
                    rows.setdefault((kind, impl, prec), []).append(round(ms, 3))
                    print("round %d %s %s %s: %.2f CPU ms/sample (load %.1f)" % (
                        rnd + 1, kind, impl, prec, ms, os.getloadavg()[0]), flush=True)
    shutil.rmtree(out, ignore_errors=True)
    print("\n| model | run | bf16 CPU ms/sample | fp32 CPU ms/sample | bf16 speed / fp32 |")
    print("|---|---|---:|---:|---:|")
    result = []
    for (kind, impl, prec), v in rows.items():
        if prec != "bf16":
            continue
        f = rows[(kind, impl, "fp32")]
        ratio = statistics.median(x / y for x, y in zip(f, v))
        result.append({"model": kind, "impl": impl, "bf16_ms": v, "fp32_ms": f,
                       "ratio_median": round(ratio, 2)})
        print("| %s | %s | %.2f | %.2f | %.2fx |" % (kind, impl, statistics.median(v),
                                                    statistics.median(f), ratio))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"threads": a.threads, "steps": a.steps, "rounds": a.rounds,
                       "rows": result}, fh, indent=1)


if __name__ == "__main__":
    main()
