#!/usr/bin/python3
"""Task benchmark (issue 20): multi-label and segmentation training, dscache-train against the
same model and loop written in PyTorch from Python.

Data: scripts/make-mosaics (2x2 mosaics of Debian's Fashion-MNIST, 56x56 grey; 10 0/1 class
columns and a mask: 0 background, class + 1, 255 on the ignored rim), built into caches with
`dscache build TABLE CACHE --size 56 --channels 1 --field mask=mask`. One dataset per task, each
with its own sizes (the defaults are the same: README's 4000 / 1000 mosaics, 3 epochs).

Rows, per task, in one run on the same data:
  seed        PyTorch: a Dataset whose __getitem__ cv2.imread()s the PNG listed in the table (and
              the mask PNG), normalises it, and returns tensors; a DataLoader (shuffle,
              num_workers --workers, persistent workers)
  loader      PyTorch: the same loop, batches from dscache.Loader over the cache (shuffle, seed 0,
              --workers threads; the targets as fields), converted and normalised in the loop
  dscache-train fp32 / auto   `dscache-train --task T --precision P` (auto: the fastest native
              precision, which it names)
The PyTorch rows run dscache.models' mirror of the trainer's model (cnn for multilabel,
unet-small for segment) with the trainer's recipe: AdamW (lr 1e-3, weight decay 0.01), batch
--batch, --threads intra-op threads, (x/255 - mean)/std with the training cache's mean/std, loss
= BCE-with-logits summed over the classes per sample (multilabel) or cross entropy per labelled
pixel, ignore index 255 (segment), in fp32 and in bf16 (torch.autocast("cpu") around forward and
loss, as dscache-train does; the first seed row is the baseline). Validation after the last
epoch, same metrics as the trainer: val_map (macro AP) and micro-F1 at logit 0; val_miou (mean
over classes present in the prediction or the truth, background included) and pixel accuracy.

samples/s: training samples over training time (validation excluded), over all epochs. Data
wait: the share of training time spent blocked waiting for the next batch (PyTorch rows: in
next(); dscache-train: its epoch lines' data_wait). Ratios are against the seed row of the same
run. CPU ms/sample: user + system CPU time of the whole row (workers, validation and start-up
included) per training sample; other load disturbs it far less than samples/s. The machine is
shared: the load average around each row is recorded; read it before
trusting a figure.

Usage: task_bench.py [--build build] [--dscache-train PATH] [--tasks multilabel,segment]
                     [--ml-train 4000] [--ml-val 1000] [--ml-epochs 3]
                     [--seg-train 4000] [--seg-val 1000] [--seg-epochs 3]
                     [--batch 64] [--workers 2] [--threads 2] [--torch-precisions fp32,bf16]
                     [--work DIR] [--json FILE]
A dscache-train without --task segment (older builds) gets its segment rows skipped, saying so.
Run with Debian's /usr/bin/python3 (python3-torch, numpy, OpenCV).
"""
import argparse
import csv
import gc
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
import torch
import torch.nn.functional as F

from hostinfo import host_info
from programs import checked_run
from train_bench import fmt, loadavg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IGNORE = 255
TASKS = {  # task: (model, the trainer's main val metric and its second one)
    "multilabel": ("cnn", "val_map", "val_micro_f1"),
    "segment": ("unet-small", "val_miou", "val_pixel_acc"),
}


# ----------------------------------------------------------------------------------------------
# Data

def make_data(dscache, work, n_train, n_val):
    """Mosaics and their caches under WORK; returns {split: (table rows, table dir, cache)}."""
    out = os.path.join(work, "mosaics")
    checked_run("task_bench", [sys.executable, os.path.join(ROOT, "scripts", "make-mosaics"),
                               "--out", out, "--train", n_train, "--val", n_val, "--seed", 0],
                "make-mosaics")
    data = {}
    for split in ("train", "val"):
        cache = os.path.join(work, split + "-cache")
        checked_run("task_bench", [dscache, "build", os.path.join(out, split + ".csv"), cache,
                                   "--size", 56, "--channels", 1, "--field", "mask=mask",
                                   "--quiet", "--force"], "dscache build " + split)
        with open(os.path.join(out, split + ".csv"), newline="") as f:
            data[split] = (list(csv.DictReader(f)), out, cache)
    return data


def normalization(cache, max_samples=8192):
    """(mean, std) of x/255 over up to MAX_SAMPLES samples spread evenly, as dscache-train
    measures it (trainer/data.cpp measure_normalization)."""
    n = len(cache)
    m = min(n, max_samples)
    px = np.concatenate([np.asarray(cache[j * n // m][0], np.float64).ravel() for j in range(m)])
    return px.mean() / 255, max(1e-3, px.std() / 255)


class MosaicDataset(torch.utils.data.Dataset):
    """The seed's recipe: each item decoded from its PNG files in __getitem__."""

    def __init__(self, rows, root, task, targets, mean, std):
        self.rows, self.root, self.task, self.targets = rows, root, task, targets
        self.mean, self.std = mean, std

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        img = cv2.imread(os.path.join(self.root, row["image_path"]), cv2.IMREAD_GRAYSCALE)
        x = torch.from_numpy(img).float().div_(255).sub_(self.mean).div_(self.std).unsqueeze(0)
        if self.task == "segment":
            mask = cv2.imread(os.path.join(self.root, row["mask"]), cv2.IMREAD_UNCHANGED)
            return x, torch.from_numpy(mask.astype(np.int64))
        return x, torch.tensor([float(row[t]) for t in self.targets])


def seed_batches(rows, root, task, targets, norm, batch, workers, shuffle):
    ds = MosaicDataset(rows, root, task, targets, *norm)
    return torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=shuffle,
                                       num_workers=workers, persistent_workers=workers > 0,
                                       generator=torch.Generator().manual_seed(0))


class LoaderBatches:
    """dscache.Loader's dict batches as (normalised NCHW float, target) tensors, one epoch per
    iteration."""

    def __init__(self, dscache, cache, task, targets, norm, batch, workers, shuffle):
        fields = ["mask"] if task == "segment" else list(targets)
        self.loader = dscache.Loader(cache, batch_size=batch, shuffle=shuffle, seed=0,
                                     workers=workers, fields=fields, copy=False)
        self.task, self.targets, self.mean, self.std = task, targets, *norm

    def __iter__(self):
        for b in self.loader:
            x = torch.from_numpy(b["image"]).permute(0, 3, 1, 2).float()
            x = x.div_(255).sub_(self.mean).div_(self.std)  # a copy: the view may be recycled
            if self.task == "segment":
                yield x, torch.from_numpy(b["mask"].astype(np.int64))
            else:
                yield x, torch.from_numpy(np.stack([b[t] for t in self.targets], 1)).float()


# ----------------------------------------------------------------------------------------------
# Training and metrics (PyTorch rows)

def loss_of(task, out, y):
    """The trainer's loss for one micro-batch that is its whole window."""
    if task == "segment":
        labelled = int((y != IGNORE).sum())
        return F.cross_entropy(out, y, ignore_index=IGNORE, reduction="sum") / max(labelled, 1)
    return F.binary_cross_entropy_with_logits(out, y, reduction="sum") / y.shape[0]


def train(model, task, batches, epochs, bf16, lr=1e-3, weight_decay=0.01):
    """Trains for EPOCHS passes over BATCHES (BF16: autocast around forward and loss, as
    dscache-train and train_bench.py do); returns (samples, train seconds, wait seconds, mean
    loss of the last epoch)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    samples = seconds = wait = 0.0
    for _ in range(epochs):
        model.train()
        loss_sum, seen = 0.0, 0
        t0 = time.perf_counter()
        it = iter(batches)
        while True:
            w0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - w0
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_of(task, model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += float(loss) * x.shape[0]
            seen += x.shape[0]
        seconds += time.perf_counter() - t0
        samples += seen
    return samples, seconds, wait, loss_sum / max(seen, 1)


def average_precision(scores, labels):
    """trainer/task_metrics.cpp's AP: ranked by score, ties as one threshold; None without
    positives."""
    order = np.argsort(-scores, kind="stable")
    s, pos = scores[order], labels[order] > 0.5
    if not pos.any():
        return None
    last = np.r_[np.flatnonzero(s[1:] != s[:-1]), len(s) - 1]  # the end of each tie group
    tp = np.cumsum(pos)[last]
    fp = (last + 1) - tp
    recall = tp / pos.sum()
    return float(np.sum(np.diff(np.r_[0.0, recall]) * tp / (tp + fp)))


def multilabel_metrics(scores, labels):
    aps = [average_precision(scores[:, k], labels[:, k]) for k in range(scores.shape[1])]
    pred, pos = scores >= 0, labels > 0.5
    tp, fp, fn = (pred & pos).sum(), (pred & ~pos).sum(), (~pred & pos).sum()
    found = [a for a in aps if a is not None]
    return {"val_map": float(np.mean(found)) if found else None,
            "val_micro_f1": float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0,
            "val_ap": aps}


def segment_metrics(pred, truth, classes):
    keep = truth != IGNORE
    p, t = pred[keep].astype(np.int64), truth[keep].astype(np.int64)
    conf = np.bincount(t * classes + p, minlength=classes * classes).reshape(classes, classes)
    inter = np.diag(conf)
    union = conf.sum(0) + conf.sum(1) - inter
    iou = [float(inter[c] / union[c]) if union[c] else None for c in range(classes)]
    found = [v for v in iou if v is not None]
    return {"val_miou": float(np.mean(found)) if found else None,
            "val_pixel_acc": float(inter.sum() / max(conf.sum(), 1)), "val_iou": iou}


@torch.no_grad()
def evaluate(model, task, batches, classes, bf16):
    model.eval()
    outs, ys = [], []
    for x, y in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            o = model(x).float()
        outs.append((o.argmax(1) if task == "segment" else o).numpy().astype(
            np.uint8 if task == "segment" else np.float32))
        ys.append(y.numpy())
    out, y = np.concatenate(outs), np.concatenate(ys)
    if task == "segment":
        return segment_metrics(out, y, classes)
    return multilabel_metrics(out, y)


def cpu_seconds():
    """User + system CPU seconds of this process and its reaped children (DataLoader workers,
    dscache-train): what a row costs, far less disturbed by other load than its wall time."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def run_torch(name, precision, task, model, make_batches, epochs, classes):
    """One PyTorch row: MAKE_BATCHES(train) gives the training batches, (False) the validation
    ones; their DataLoader workers are shut down before the CPU time is read."""
    load_before, cpu0 = loadavg(), cpu_seconds()
    bf16 = precision == "bf16"
    train_batches, val_batches = make_batches(True), make_batches(False)
    samples, secs, wait, loss = train(model, task, train_batches, epochs, bf16)
    m = evaluate(model, task, val_batches, classes, bf16)
    del train_batches, val_batches
    gc.collect()
    m.update({"row": name, "precision": precision, "samples_per_s": round(samples / secs, 1),
              "data_wait": round(wait / secs, 4), "train_seconds": round(secs, 2),
              "cpu_ms_per_sample": round(1000 * (cpu_seconds() - cpu0) / samples, 2),
              "loss_last_epoch": round(loss, 4), "load_before": load_before,
              "load_after": loadavg()})
    return m


# ----------------------------------------------------------------------------------------------
# dscache-train

def has_task(exe, task):
    p = subprocess.run([exe, "--help"], capture_output=True, text=True)
    return task in p.stdout


def run_dscache_train(exe, task, targets, train_cache, val_cache, len_train, a, precision, out):
    model = TASKS[task][0]
    cmd = [exe, "--train", train_cache, "--val", val_cache, "--task", task, "--model", model,
           "--epochs", a.epochs, "--batch", a.batch, "--optimizer", "adamw",
           "--precision", precision, "--threads", a.threads, "--workers", a.workers,
           "--output", out, "--force", "--no-progress", "--log-every", 1000]
    if task == "multilabel":
        cmd[cmd.index("--model"):cmd.index("--model")] = ["--targets", ",".join(targets)]
    else:
        cmd[cmd.index("--model"):cmd.index("--model")] = ["--targets", "mask"]
    load_before, cpu0 = loadavg(), cpu_seconds()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:  # a row of its own: the other rows still say something
        err = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        print(f"task_bench: dscache-train {precision} failed ({p.returncode}): {err}", flush=True)
        return {"row": "dscache-train", "precision": precision, "chose": precision,
                "command": " ".join(str(c) for c in cmd), "error": err, "exit": p.returncode,
                "samples_per_s": None, "data_wait": None, "cpu_ms_per_sample": None,
                "load_before": load_before, "load_after": loadavg()}
    # "dscache-train: precision auto: bf16 (the CPU has AVX512_BF16)" on stderr
    chose = next((l.split(":", 2)[-1].split()[0] for l in p.stderr.splitlines()
                  if "precision auto:" in l), precision)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    epochs = [l for l in lines if l.get("kind") == "epoch"]
    secs = sum(l["seconds"] for l in epochs)
    r = {"row": "dscache-train", "precision": precision, "chose": chose,
         "command": " ".join(str(c) for c in cmd),
         "samples_per_s": round(sum(l["samples_per_s"] * l["seconds"] for l in epochs) / secs, 1),
         "data_wait": round(sum(l["data_wait"] * l["seconds"] for l in epochs) / secs, 4),
         "train_seconds": round(secs, 2), "loss_last_epoch": round(epochs[-1]["loss"], 4),
         "cpu_ms_per_sample": round(1000 * (cpu_seconds() - cpu0) / a.epochs / len_train, 2),
         "load_before": load_before, "load_after": loadavg()}
    for k in ("val_map", "val_micro_f1", "val_ap", "val_miou", "val_pixel_acc", "val_iou"):
        if k in epochs[-1]:
            r[k] = epochs[-1][k]
    return r


# ----------------------------------------------------------------------------------------------

def bench_task(task, a, dscache):
    """Every row of one task, on its own mosaics."""
    n_train, n_val, epochs = ((a.ml_train, a.ml_val, a.ml_epochs) if task == "multilabel"
                              else (a.seg_train, a.seg_val, a.seg_epochs))
    a.epochs = epochs
    work = os.path.join(a.work, task)
    data = make_data(a.dscache, work, n_train, n_val)
    (train_rows, root, train_cache), (val_rows, _, val_cache) = data["train"], data["val"]
    targets = [c for c in train_rows[0] if c not in ("image_path", "mask")]
    norm = normalization(dscache.Cache(train_cache))
    classes = len(targets) + 1  # segment: ids 0..10, as the trainer finds them in the masks
    model_kind = TASKS[task][0]
    from dscache.models import build_model
    outputs = classes if task == "segment" else len(targets)
    print(f"{task}: {n_train} train / {n_val} val mosaics, {epochs} epochs, batch {a.batch}, "
          f"model {model_kind}, mean {norm[0]:.4f} std {norm[1]:.4f}", flush=True)
    rows = []

    def model():
        torch.manual_seed(0)
        return build_model(model_kind, task, 1, outputs, 56, 56)

    def seed(is_train):
        return seed_batches(train_rows if is_train else val_rows, root, task, targets, norm,
                            a.batch, a.workers, is_train)

    def loader(is_train):
        return LoaderBatches(dscache, dscache.Cache(train_cache if is_train else val_cache), task,
                             targets, norm, a.batch, a.workers, is_train)

    for prec in filter(None, a.torch_precisions.split(",")):
        for name, make in (("seed", seed), ("loader", loader)):
            r = run_torch(name, prec, task, model(), make, epochs, classes)
            rows.append(r)
            report_row(task, r)
    if has_task(a.dscache_train, task):
        for prec in ("fp32", "auto"):
            r = run_dscache_train(a.dscache_train, task, targets, train_cache, val_cache,
                                  n_train, a, prec, os.path.join(work, "out-" + prec))
            rows.append(r)
            report_row(task, r)
    else:
        print(f"{task}: {a.dscache_train} has no --task {task}: its rows are skipped", flush=True)
    if not rows:
        sys.exit(f"task_bench: {task}: no rows to run")
    base = rows[0]["samples_per_s"]
    for r in rows:
        r["vs_seed"] = round(r["samples_per_s"] / base, 2) if r["samples_per_s"] else None
    return {"task": task, "train": n_train, "val": n_val, "epochs": epochs, "batch": a.batch,
            "mean": norm[0], "std": norm[1], "rows": rows}


def label(r):
    if r["row"] == "dscache-train":
        return "dscache-train " + r["precision"] + (f" ({r['chose']})" if r["precision"] == "auto"
                                                    else "")
    return {"seed": "PyTorch, decode in __getitem__ (seed)",
            "loader": "PyTorch, dscache.Loader"}[r["row"]] + " " + r["precision"]


def report_row(task, r):
    m1, m2 = TASKS[task][1:]
    if "error" in r:
        return
    print(f"  {label(r)}: {m1} {fmt(r.get(m1) and 100 * r[m1])}%, {m2} "
          f"{fmt(r.get(m2) and 100 * r[m2])}%, {r['samples_per_s']} samples/s, data wait "
          f"{fmt(r['data_wait'], True)}, load {r['load_before'][0]} -> {r['load_after'][0]}",
          flush=True)


def print_table(res):
    task = res["task"]
    m1, m2 = TASKS[task][1:]
    print(f"\n{task} ({TASKS[task][0]}, {res['train']} train / {res['val']} val, "
          f"{res['epochs']} epochs, batch {res['batch']}):")
    print(f"| row | {m1} | {m2} | samples/s | vs seed | data wait | CPU ms/sample | load avg |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in res["rows"]:
        if "error" in r:
            print(f"| {label(r)} | failed: {r['error']} | | | | | | |")
            continue
        print(f"| {label(r)} | {fmt(r.get(m1) and 100 * r[m1])}% | "
              f"{fmt(r.get(m2) and 100 * r[m2])}% | {fmt(r['samples_per_s'])} | "
              f"{r['vs_seed']:.2f}x | {fmt(r['data_wait'], True)} | {r['cpu_ms_per_sample']} | "
              f"{r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dscache-train", help="default: BUILD/trainer/dscache-train")
    ap.add_argument("--tasks", default="multilabel,segment")
    ap.add_argument("--ml-train", type=int, default=4000)
    ap.add_argument("--ml-val", type=int, default=1000)
    ap.add_argument("--ml-epochs", type=int, default=3)
    ap.add_argument("--seg-train", type=int, default=4000)
    ap.add_argument("--seg-val", type=int, default=1000)
    ap.add_argument("--seg-epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-precisions", default="fp32,bf16",
                    help="the PyTorch rows' precisions (bf16: CPU autocast; '': none)")
    ap.add_argument("--work", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    a.dscache = os.path.join(a.build, "tools", "dscache")
    a.dscache_train = a.dscache_train or os.path.join(a.build, "trainer", "dscache-train")
    for exe in (a.dscache, a.dscache_train):
        if not os.access(exe, os.X_OK):
            sys.exit(f"task_bench: {exe} is not an executable")
    tasks = a.tasks.split(",")
    if any(p not in ("fp32", "bf16") for p in filter(None, a.torch_precisions.split(","))):
        sys.exit(f"task_bench: --torch-precisions {a.torch_precisions}: fp32 and/or bf16, or "
                 "'' (dscache-train rows only)")
    if any(t not in TASKS for t in tasks):
        sys.exit(f"task_bench: --tasks {a.tasks}: each must be one of {', '.join(TASKS)}")
    sys.path.insert(0, os.path.join(a.build, "python"))
    import dscache
    torch.set_num_threads(a.threads)
    keep = a.work is not None
    a.work = a.work or tempfile.mkdtemp(prefix="task_bench.")
    try:
        results = [bench_task(t, a, dscache) for t in tasks]
    finally:
        if not keep:
            shutil.rmtree(a.work, ignore_errors=True)
    for res in results:
        print_table(res)
    print(f"\nload average at the end: {loadavg()} on {os.cpu_count()} cores")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": host_info(torch=torch.__version__), "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
