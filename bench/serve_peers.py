#!/usr/bin/python3
"""Serving peers: the seed's PyTorch data recipes on the same samples as a dscache cache.

Each recipe is a torch.utils.data.Dataset served through torch.utils.data.DataLoader with
shuffle=True, batch_size=B and drop_last=False, at each --workers count, for --epochs epochs;
every epoch is timed on its own (samples/s = samples delivered / wall seconds from creating the
epoch's iterator to receiving its last batch, so worker start-up is included where it happens):

  decode  DecodeDataset: __getitem__ = cv2.imread + the crop-resize dscache build uses (scale to
          cover, INTER_AREA when shrinking / INTER_LINEAR when enlarging, center crop to the
          manifest's H x W) + cvtColor BGR2RGB -> (torch.from_numpy(uint8 HWC), label)
  keep    KeepDataset: the same, but each decoded array is kept in a dict after its first decode.
          With num_workers > 0 every worker process has its own dict, so the loader uses
          persistent_workers=True (otherwise the dicts die at the end of every epoch). Even so a
          shuffled epoch sends each index to whichever worker gets its batch, so epoch 2 hits only
          about 1/num_workers of the time; the measured hit rate is reported per epoch.
  mmap    MmapDataset: np.load(shard, mmap_mode="r") of the cache's own shards (global index ->
          shard through the manifest), __getitem__ returns torch.from_numpy(np.array(x)).

Samples are the cache's: source paths from manifest source.root (or --source) + sources.jsonl,
labels from labels.npy. decode/keep need a "folder" or "list" source (idx sources have no image
files; only mmap runs then).

Time cap: an epoch that runs past --max-seconds (default 60) is stopped there and its rate is
extrapolated to the full epoch ("extrapolated": true, "batches" = batches measured,
"total_batches" = the epoch's): epoch seconds = time to the first batch (start-up) + the rest at
the rate measured after it; at least 4 + 2 * workers batches are measured first. keep cannot be
cut that way (its second epoch would be measured against a half-filled dict), so when its first
epoch is estimated (from decode's rate) to exceed half the cap it runs on a fixed random subset
that fits ("subset": its size), and its epochs are cut only at 3x the cap.

Threads: nothing is pinned. Defaults are used as a normal user gets them: the main process keeps
torch's default intra-op threads and OpenCV's default thread pool; DataLoader itself calls
torch.set_num_threads(1) in each worker process (PyTorch does this, not this script).

Usage: serve_peers.py CACHE [--batch 256] [--workers 0,2] [--epochs 2] [--recipes decode,keep,mmap]
                      [--source DIR] [--max-seconds 60] [--seed 0] [--json OUT]
Run it with Debian's /usr/bin/python3 (python3-torch, python3-numpy, python3-opencv).
"""
import argparse
import json
import multiprocessing
import os
import random
import sys
import time

import cv2
import numpy as np
import torch
import torch.utils.data as tud

from hostinfo import host_info


# ----------------------------------------------------------------------------------------------
# The cache, as a Python user reads it.

class CacheInfo:
    def __init__(self, cache, source=None):
        self.dir = os.path.abspath(cache)
        with open(os.path.join(self.dir, "manifest.json")) as f:
            self.manifest = json.load(f)
        m = self.manifest
        self.count = int(m["count"])
        shape = m["shape"]
        self.h, self.w, self.c = int(shape[0]), int(shape[1]), int(shape[2]) if len(shape) > 2 else 1
        self.sample_bytes = self.h * self.w * self.c
        self.shards = [(os.path.join(self.dir, s["file"]), int(s["first"]), int(s["count"]))
                       for s in m["shards"]]
        self.storage = m.get("storage", "npy")
        self.labels = np.load(os.path.join(self.dir, "labels.npy"))
        src = m.get("source", {}) or {}
        self.kind = src.get("kind", "")
        self.root = os.path.abspath(source) if source else src.get("root", "")
        self.paths = None
        self.no_paths_reason = None
        if self.kind not in ("folder", "list"):
            self.no_paths_reason = (f"source kind '{self.kind}' has no image files "
                                    "(decode/keep need a folder or list source)")
            return
        spath = os.path.join(self.dir, "sources.jsonl")
        if not os.path.exists(spath):
            self.no_paths_reason = "the cache has no sources.jsonl"
            return
        names = []
        with open(spath) as f:
            for line in f:
                line = line.strip()
                if line:
                    names.append(json.loads(line))
        if len(names) != self.count:
            self.no_paths_reason = f"sources.jsonl has {len(names)} lines for {self.count} samples"
            return
        self.paths = [self._resolve(n) for n in names]
        missing = [p for p in self.paths[:64] if not os.path.exists(p)]
        if missing:
            self.no_paths_reason = f"source file {missing[0]} is missing (pass --source DIR)"
            self.paths = None

    def _resolve(self, name):  # as libcache/ingest/source_list.cpp source_entry_path
        if self.kind == "folder":
            return os.path.join(self.root, name)
        if name.startswith("/"):
            return name
        return os.path.join(os.path.dirname(self.root), name)


def crop_resize(img, h, w):
    """dscache build's default policy (crop): cover h x w, then cut the middle out."""
    ih, iw = img.shape[:2]
    s = max(h / ih, w / iw)
    nw, nh = max(w, round(iw * s)), max(h, round(ih * s))
    if (nw, nh) != (iw, ih):
        interp = cv2.INTER_AREA if (nw <= iw and nh <= ih) else cv2.INTER_LINEAR
        img = cv2.resize(img, (nw, nh), interpolation=interp)
    y, x = (nh - h) // 2, (nw - w) // 2
    return img[y:y + h, x:x + w]


# Per-process hit/miss counters for KeepDataset: slot 2*k (hits) and 2*k+1 (misses) belong to
# worker k-1, slot 0/1 to the main process. Each slot has one writer, so no lock is needed.
MAX_SLOTS = 64


def _slot():
    wi = tud.get_worker_info()
    return 0 if wi is None else (wi.id + 1) % MAX_SLOTS


# ----------------------------------------------------------------------------------------------
# The recipes, written as the seed's user writes them.

class DecodeDataset(tud.Dataset):
    def __init__(self, paths, labels, h, w, c):
        self.paths, self.labels, self.h, self.w, self.c = paths, labels, h, w, c

    def __len__(self):
        return len(self.paths)

    def load(self, i):
        if self.c == 1:
            img = cv2.imread(self.paths[i], cv2.IMREAD_GRAYSCALE)
            return np.ascontiguousarray(crop_resize(img, self.h, self.w))[:, :, None]
        img = cv2.imread(self.paths[i], cv2.IMREAD_COLOR)
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        return np.ascontiguousarray(crop_resize(img, self.h, self.w))

    def __getitem__(self, i):
        return torch.from_numpy(self.load(i)), int(self.labels[i])


class KeepDataset(DecodeDataset):
    def __init__(self, paths, labels, h, w, c, counters=None):
        super().__init__(paths, labels, h, w, c)
        self.kept = {}
        self.counters = counters

    def __getitem__(self, i):
        x = self.kept.get(i)
        if x is None:
            x = self.kept[i] = self.load(i)
            if self.counters is not None:
                self.counters[2 * _slot() + 1] += 1
        elif self.counters is not None:
            self.counters[2 * _slot()] += 1
        return torch.from_numpy(x), int(self.labels[i])


class MmapDataset(tud.Dataset):
    def __init__(self, shards, labels):
        self.arrays = [np.load(path, mmap_mode="r") for path, _, _ in shards]
        self.firsts = [first for _, first, _ in shards]
        self.labels = labels
        self.n = sum(cnt for _, _, cnt in shards)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        k = 0
        while k + 1 < len(self.firsts) and self.firsts[k + 1] <= i:
            k += 1
        x = self.arrays[k][i - self.firsts[k]]
        return torch.from_numpy(np.array(x)), int(self.labels[i])


# ----------------------------------------------------------------------------------------------

def machine_info():
    return host_info(torch=torch.__version__, numpy=np.__version__, opencv=cv2.__version__,
                     torch_threads_main=torch.get_num_threads(),
                     opencv_threads_main=cv2.getNumThreads(),
                     loadavg_start=list(os.getloadavg()))


def time_epochs(name, dataset, workers, batch, epochs, max_seconds, seed, counters=None,
                persistent=False, subset=None, log=print):
    """Runs `epochs` epochs of a shuffled DataLoader over dataset; one row per epoch."""
    g = torch.Generator()
    g.manual_seed(seed)
    kwargs = {}
    if workers > 0:
        kwargs["persistent_workers"] = persistent
    loader = tud.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                            drop_last=False, generator=g, **kwargs)
    n = len(dataset)
    total_batches = len(loader)
    rows = []
    for epoch in range(1, epochs + 1):
        if counters is not None:
            for k in range(len(counters)):
                counters[k] = 0
        got = batches = 0
        first_t = first_n = None
        # Never cut before the workers' start-up and prefetch have passed (the first batch pays
        # for start-up; the next 2 * workers arrive prefetched).
        min_batches = 4 + 2 * workers
        t0 = time.perf_counter()
        it = iter(loader)
        for images, labels in it:
            got += images.shape[0]
            batches += 1
            now = time.perf_counter() - t0
            if first_t is None:
                first_t, first_n = now, got
            if now >= max_seconds and batches >= min_batches and batches < total_batches:
                break
        secs = time.perf_counter() - t0
        del it
        extrapolated = batches < total_batches
        if extrapolated:
            # start-up (time to the first batch) + the rest of the epoch at the measured rate
            rest_rate = (got - first_n) / (secs - first_t)
            est = first_t + (n - first_n) / rest_rate
            sps = n / est
        else:
            est = None
            sps = got / secs if secs > 0 else 0.0
        row = {"name": name, "workers": workers, "epoch": epoch, "samples_per_s": sps,
               "batches": batches, "seconds": secs, "samples": got, "total_batches": total_batches,
               "epoch_samples": n, "first_batch_seconds": first_t, "extrapolated": extrapolated}
        if extrapolated:
            row["epoch_seconds_est"] = est
        if workers > 0:
            row["persistent_workers"] = persistent
        if subset is not None:
            row["subset"] = subset
        if counters is not None:
            hits = sum(counters[k] for k in range(0, len(counters), 2))
            misses = sum(counters[k] for k in range(1, len(counters), 2))
            row["hit_rate"] = hits / (hits + misses) if hits + misses else None
        rows.append(row)
        log(format_row(row))
    return rows


def format_header():
    return (f"{'recipe':<8} {'workers':>7} {'epoch':>5} {'samples/s':>11} {'batches':>9} "
            f"{'seconds':>8}  notes")


def format_row(r):
    notes = []
    if r.get("extrapolated"):
        notes.append(f"measured {r['batches']}/{r['total_batches']} batches, extrapolated "
                     f"(epoch ~{r['epoch_seconds_est']:.0f} s)")
    if r.get("subset") is not None:
        notes.append(f"subset of {r['subset']} samples")
    if r.get("persistent_workers"):
        notes.append("persistent_workers")
    if r.get("hit_rate") is not None:
        notes.append(f"dict hit rate {100 * r['hit_rate']:.0f}%")
    return (f"{r['name']:<8} {r['workers']:>7} {r['epoch']:>5} {r['samples_per_s']:>11.0f} "
            f"{r['batches']:>9} {r['seconds']:>8.2f}  {'; '.join(notes)}")


def probe_decode_rate(info, samples=128):
    """Decode samples/s of one process on random samples (to size keep's subset)."""
    ds = DecodeDataset(info.paths, info.labels, info.h, info.w, info.c)
    idx = random.Random(1).sample(range(len(ds)), min(samples, len(ds)))
    t0 = time.perf_counter()
    for i in idx:
        ds.load(i)
    return len(idx) / (time.perf_counter() - t0)


def check_same_samples(info, k=32):
    """(max, mean) |decode recipe - cache bytes| over k random samples. PNGs and builds with
    --no-reduced-decode match exactly; dscache decodes large JPEGs at reduced DCT scale by
    default, so those differ a little on average (and a lot at a few edge pixels)."""
    ds = DecodeDataset(info.paths, info.labels, info.h, info.w, info.c)
    mm = MmapDataset(info.shards, info.labels)
    worst, total = 0, 0.0
    idx = random.Random(2).sample(range(len(ds)), min(k, len(ds)))
    for i in idx:
        a = ds.load(i).astype(np.int16)
        b = mm[i][0].numpy().astype(np.int16).reshape(a.shape)
        d = np.abs(a - b)
        worst = max(worst, int(d.max()))
        total += float(d.mean())
    return worst, total / len(idx)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", help="a dscache cache directory (npy storage)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", default="0,2", help="comma-separated num_workers (default 0,2)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--recipes", default="decode,keep,mmap")
    ap.add_argument("--source", help="source root (default: the manifest's source.root)")
    ap.add_argument("--max-seconds", type=float, default=60.0,
                    help="cap per epoch; longer epochs are cut and extrapolated (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()

    workers = [int(w) for w in args.workers.split(",") if w != ""]
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    for r in recipes:
        if r not in ("decode", "keep", "mmap"):
            sys.exit(f"serve_peers: unknown recipe '{r}' (decode, keep, mmap)")
    info = CacheInfo(args.cache, args.source)
    notes = []
    if info.storage != "npy" and "mmap" in recipes:
        notes.append(f"mmap skipped: storage is {info.storage}, not npy")
        recipes.remove("mmap")
    if info.paths is None:
        for r in ("decode", "keep"):
            if r in recipes:
                recipes.remove(r)
        notes.append(f"decode/keep skipped: {info.no_paths_reason}")

    mach = machine_info()
    print(f"cache {info.dir}: {info.count} samples of {info.h}x{info.w}x{info.c} "
          f"({info.sample_bytes} B), {len(info.shards)} shard(s), source {info.kind} "
          f"{info.root}")
    print(f"torch {torch.__version__}, batch {args.batch}, workers {workers}, epochs "
          f"{args.epochs}, cap {args.max_seconds:.0f} s/epoch; threads left at defaults "
          f"(main: torch {mach['torch_threads_main']}, OpenCV {mach['opencv_threads_main']}; "
          "DataLoader workers: torch 1 (set by PyTorch))")
    for n in notes:
        print("note:", n)
    max_abs_diff = mean_abs_diff = None
    if info.paths is not None and info.storage == "npy":
        max_abs_diff, mean_abs_diff = check_same_samples(info)
        print(f"same samples: decode recipe vs cache bytes over 32 random samples: max |diff| "
              f"{max_abs_diff}, mean {mean_abs_diff:.3f}"
              + ("" if max_abs_diff == 0 else " (dscache's reduced-scale JPEG decode; build with "
                 "--no-reduced-decode for identical bytes)"))

    print(format_header())
    rows = []
    decode_best = {}
    for name in recipes:
        for w in workers:
            if name == "decode":
                ds = DecodeDataset(info.paths, info.labels, info.h, info.w, info.c)
                got = time_epochs("decode", ds, w, args.batch, args.epochs, args.max_seconds,
                                  args.seed)
                decode_best[w] = max(r["samples_per_s"] for r in got)
            elif name == "keep":
                counters = multiprocessing.RawArray("q", 2 * MAX_SLOTS)
                ds = KeepDataset(info.paths, info.labels, info.h, info.w, info.c, counters)
                rate = decode_best.get(w)
                if rate is None:
                    rate = probe_decode_rate(info) * max(1, w)
                subset = None
                if info.count / rate > args.max_seconds:
                    m = int(rate * args.max_seconds * 0.5) // args.batch * args.batch
                    m = max(args.batch, min(m, info.count))
                    idx = sorted(random.Random(args.seed).sample(range(info.count), m))
                    ds = tud.Subset(ds, idx)
                    subset = m
                # keep is cut only at 3x the cap: a cut first epoch would leave epoch 2 missing
                got = time_epochs("keep", ds, w, args.batch, args.epochs, 3 * args.max_seconds,
                                  args.seed, counters=counters, persistent=w > 0, subset=subset)
                if subset is not None:
                    notes.append(f"keep at workers={w} ran on a random subset of {subset} "
                                 "samples so that its first epoch fits the cap")
            else:
                ds = MmapDataset(info.shards, info.labels)
                got = time_epochs("mmap", ds, w, args.batch, args.epochs, args.max_seconds,
                                  args.seed)
            rows.extend(got)
    if any(r["extrapolated"] for r in rows):
        notes.append(f"epochs longer than {args.max_seconds:.0f} s were cut at the cap and "
                     "extrapolated (see 'extrapolated', 'batches', 'total_batches')")
    if any(r["name"] == "keep" and r["workers"] > 0 for r in rows):
        notes.append("keep with workers > 0 uses persistent_workers=True; each worker has its "
                     "own dict, so a shuffled epoch 2 only partly hits (see hit_rate)")

    print()
    print(f"best epoch per recipe (samples/s, batch {args.batch}):")
    best = {}
    for r in rows:
        key = (r["name"], r["workers"])
        if key not in best or r["samples_per_s"] > best[key]["samples_per_s"]:
            best[key] = r
    for (name, w), r in best.items():
        print(f"  {name:<7} workers={w}: {r['samples_per_s']:>10.0f}  (epoch {r['epoch']})")
    for n in notes:
        print("note:", n)

    mach["loadavg_end"] = list(os.getloadavg())
    print(f"load average (1/5/15 min) at start {mach['loadavg_start']}, at end "
          f"{mach['loadavg_end']} on {mach['nproc']} cores"
          + ("  -- the machine was busy; rates are contended" if
             max(mach["loadavg_start"][0], mach["loadavg_end"][0]) > 0.5 * mach["nproc"] else ""))
    if args.json:
        out = {"cache": info.dir, "samples": info.count, "shape": [info.h, info.w, info.c],
               "sample_bytes": info.sample_bytes, "source": {"kind": info.kind, "root": info.root},
               "batch": args.batch, "workers": workers, "epochs": args.epochs,
               "max_seconds": args.max_seconds, "machine": mach,
               "threads": "defaults: main process torch/OpenCV defaults; DataLoader sets torch "
                          "threads to 1 in each worker",
               "decode_vs_cache_max_abs_diff": max_abs_diff,
               "decode_vs_cache_mean_abs_diff": mean_abs_diff,
               "notes": notes, "recipes": rows}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
