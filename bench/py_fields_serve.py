#!/usr/bin/python3
"""dscache.Loader with fields against image-only, from Python: samples/s of one warm cache of
COCO-like scenes (stripes and 1-4 rectangles; a uint8 `mask` labelling them, `boxes` around
them and `box_labels` rows_of boxes), written here with dscache.Writer, served with
fields=None (image + mask + boxes + box_labels) and fields=[] (the image only: the same cache,
the same bytes read for the image), as stored and under random-resized crops of the stored
size (+ flip). Each round runs one epoch of every mode (the same epoch number: the same order)
in rotating order, so that a shared machine's load hits all alike; an epoch is timed from its
iter() to its last batch, each batch's image and fields touched (one element read). One
untimed epoch per mode first (warm). Reported per transform: best and median samples/s over
--rounds, the median CPU us per sample (user + system of the process, and of the iterating
thread alone), and the ratios fields / image-only: best / best, the median of the per-round
ratios, and of CPU time per sample.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/py_fields_serve.py [--work DIR]
           [--size 128] [--count 4000] [--batch 32] [--rounds 5] [--workers 2] [--json OUT]
           [--profile {image,fields} --epochs N]

--profile runs only one mode as stored (image only, or all fields) for --epochs epochs after
the warm one and prints its CPU us per sample: a loop to run under `perf record`, whose
samples then belong to that mode alone (the cache is written first when missing).
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


def scene(rng, size):
    """(image, mask, boxes, box labels) of one scene: stripes plus 1-4 labelled rectangles."""
    img = np.zeros((size, size, 3), np.uint8)
    img[:, :, 0] = (np.arange(size) * 7 % 256)[None, :]
    img[:, :, 1] = rng.integers(0, 256)
    mask = np.zeros((size, size), np.uint8)
    boxes, labels = [], []
    for k in range(int(rng.integers(1, 5))):
        x1, y1 = (int(v) for v in rng.integers(0, size - 8, 2))
        x2, y2 = x1 + int(rng.integers(4, size - x1)), y1 + int(rng.integers(4, size - y1))
        c = int(rng.integers(1, 80))
        img[y1:y2, x1:x2, 2] = c * 3
        mask[y1:y2, x1:x2] = c
        boxes.append((x1, y1, x2, y2))
        labels.append(c)
    return img, mask, np.array(boxes, np.float32), np.array(labels, np.int64)


def make_cache(work, size, count):
    path = os.path.join(work, f"scenes{size}-{count}")
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    fields = {"mask": dscache.Mask("uint8"), "boxes": dscache.Boxes(),
              "box_labels": dscache.Rows("int64", rows_of="boxes")}
    rng = np.random.default_rng(0)
    with dscache.Writer(path, shape=(size, size, 3), fields=fields, force=True) as w:
        for i in range(count):
            img, mask, boxes, labels = scene(rng, size)
            w.write(img, i % 10, mask=mask, boxes=boxes, box_labels=labels)
    return path


def epoch(loader, e):
    """(samples/s, CPU us/sample, the iterating thread's CPU us/sample) of epoch `e` of
    `loader`, each batch's arrays touched. CPU time: user + system of the whole process (its
    Loader's worker threads included), which other jobs on a shared machine disturb much less
    than the wall time; the iterating thread's alone is what the consumer pays per batch."""
    loader.set_epoch(e)
    n, sink = 0, 0
    c0, t0, h0 = time.process_time(), time.perf_counter(), time.thread_time()
    for b in loader:
        for v in b.values():
            sink += int(v.reshape(-1)[0]) if v.size else 0
        n += len(b["label"])
    c1, dt, h1 = time.process_time(), time.perf_counter() - t0, time.thread_time()
    return n / dt, 1e6 * (c1 - c0) / n, 1e6 * (h1 - h0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=None)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--count", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", choices=("image", "fields"), default=None)
    ap.add_argument("--epochs", type=int, default=100)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="dscache-fields-")
    cache = dscache.Cache(make_cache(work, a.size, a.count))
    if a.profile:
        loader = dscache.Loader(cache, batch_size=a.batch, seed=1, workers=a.workers,
                                fields=[] if a.profile == "image" else None)
        epoch(loader, 0)
        cpu = statistics.median(epoch(loader, e)[1] for e in range(1, a.epochs + 1))
        print(f"{a.profile}: {cpu:.2f} CPU us per sample (median of {a.epochs} epochs)")
        return
    transforms = {"as stored": None,
                  "random_resized + flip": dscache.Transform("random_resized", a.size,
                                                             flip=True)}
    modes = {"image only": [], "image + mask + boxes + labels": None}
    rows = []
    for tname, t in transforms.items():
        rates = {m: [] for m in modes}
        loaders = {m: dscache.Loader(cache, batch_size=a.batch, seed=1, workers=a.workers,
                                     fields=f, transform=t) for m, f in modes.items()}
        for m in modes:
            epoch(loaders[m], 0)  # warm: the page cache, the Loader's buffers
        for r in range(a.rounds):
            order = list(modes)[r % 2:] + list(modes)[:r % 2]
            for m in order:
                rates[m].append(epoch(loaders[m], r + 1))
        base, full = rates["image only"], rates["image + mask + boxes + labels"]
        ratios = [f[0] / b[0] for f, b in zip(full, base)]
        cpu_base = statistics.median(x[1] for x in base)
        cpu_full = statistics.median(x[1] for x in full)
        row = {"transform": tname, "image_only_best": max(x[0] for x in base),
               "image_only_median": statistics.median(x[0] for x in base),
               "fields_best": max(x[0] for x in full),
               "fields_median": statistics.median(x[0] for x in full),
               "ratio_median": statistics.median(ratios),
               "ratio_best": max(x[0] for x in full) / max(x[0] for x in base),
               "image_only_cpu_us": cpu_base, "fields_cpu_us": cpu_full,
               "ratio_cpu": cpu_base / cpu_full,
               "image_only_thread_us": statistics.median(x[2] for x in base),
               "fields_thread_us": statistics.median(x[2] for x in full)}
        rows.append(row)
        print(f"{tname:22s} image only {row['image_only_best']:9,.0f} best "
              f"{row['image_only_median']:9,.0f} median {cpu_base:6.2f} CPU us | fields "
              f"{row['fields_best']:9,.0f} best {row['fields_median']:9,.0f} median "
              f"{cpu_full:6.2f} CPU us | ratio {row['ratio_best']:.2f} best/best, "
              f"{row['ratio_median']:.2f} median of rounds, {row['ratio_cpu']:.2f} CPU | "
              f"iterating thread {row['image_only_thread_us']:.2f} / "
              f"{row['fields_thread_us']:.2f} CPU us", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": host_info(), "args": vars(a), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
