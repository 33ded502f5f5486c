#!/usr/bin/python3
"""dscache.torch's datasets in a torch DataLoader against a plain dscache.Loader, on one cache:

  loader      (a) dscache.Loader(copy=True, workers=--threads).torch(): tensors, no DataLoader
  dataset_w2  (b) DataLoader(CacheDataset(threads=1), batch_size=None, num_workers=2,
              persistent_workers=True): each worker process runs its own strided Loader
  dataset_w0  (c) DataLoader(CacheDataset(threads=--threads), batch_size=None, num_workers=0)
  map_w2      (d) DataLoader(CacheMapDataset, batch_size=B, shuffle=True, num_workers=2,
              persistent_workers=True), default collation
  seed_w2     (e) the seed's recipe: a map-style Dataset that cv2-decodes the source's PNG/JPEG
              files (bench/serve_peers.py DecodeDataset), DataLoader num_workers=2, shuffle
  floor_w2    the DataLoader's own ceiling: 2 persistent workers yielding as many batches of
              one-element tensors (B labels counted each): what any dataset can reach at most

Batch --batch, global shuffle. Each row runs --epochs epochs (an epoch stops after
--max-seconds; its rate counts the samples taken); the best epoch is reported, so worker start-up
(the first epoch of persistent workers) is left out. Rows run in turn, --rounds times, so the
load of a shared machine hits all alike; the ratio to (a) is of the best over all rounds.
Goal (issue 22): (b) >= 0.8x (a).

Usage: torch_dataset_bench.py CACHE [--source DIR] [--batch 256] [--threads 2] [--epochs 3]
                              [--rounds 2] [--max-seconds 20] [--json OUT]
Run with /usr/bin/python3 and PYTHONPATH=BUILD/python (the built package).
"""
import argparse
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostinfo import host_info  # noqa: E402

import dscache  # noqa: E402
from dscache.torch import CacheDataset, CacheMapDataset  # noqa: E402


def timed_epochs(make_iter, epochs, max_seconds, set_epoch=None):
    """samples/s of each epoch of make_iter() (a new iterator per epoch)."""
    rates = []
    for e in range(epochs):
        if set_epoch is not None:
            set_epoch(e)
        t0 = time.perf_counter()
        n = 0
        for batch in make_iter():
            labels = batch["label"] if isinstance(batch, dict) else batch[1]
            n += len(labels)
            if time.perf_counter() - t0 > max_seconds:
                break
        rates.append(n / (time.perf_counter() - t0))
    return rates


class _Empty(torch.utils.data.IterableDataset):
    """len(loader) batches of nothing, split between the workers: DataLoader's per-batch cost."""

    def __init__(self, batches, batch):
        self.batches, self.batch = batches, batch

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        for _ in range(info.id, self.batches, info.num_workers):
            yield torch.zeros(1), torch.zeros(self.batch, dtype=torch.int64)


def rows(args):
    cache = dscache.Cache(args.cache)
    bs = args.batch
    loader = dscache.Loader(cache, batch_size=bs, seed=1, workers=args.threads, copy=True)
    yield "loader", lambda: timed_epochs(loader.torch, args.epochs, args.max_seconds,
                                         loader.set_epoch)
    ds2 = CacheDataset(args.cache, batch_size=bs, seed=1, threads=1)
    dl2 = DataLoader(ds2, batch_size=None, num_workers=2, persistent_workers=True)
    yield "dataset_w2", lambda: timed_epochs(lambda: iter(dl2), args.epochs, args.max_seconds,
                                             ds2.set_epoch)
    ds0 = CacheDataset(args.cache, batch_size=bs, seed=1, threads=args.threads)
    dl0 = DataLoader(ds0, batch_size=None, num_workers=0)
    yield "dataset_w0", lambda: timed_epochs(lambda: iter(dl0), args.epochs, args.max_seconds,
                                             ds0.set_epoch)
    dlm = DataLoader(CacheMapDataset(args.cache), batch_size=bs, shuffle=True, num_workers=2,
                     persistent_workers=True)
    yield "map_w2", lambda: timed_epochs(lambda: iter(dlm), args.epochs, args.max_seconds)
    dlf = DataLoader(_Empty(len(loader), bs), batch_size=None, num_workers=2,
                     persistent_workers=True)
    yield "floor_w2", lambda: timed_epochs(lambda: iter(dlf), args.epochs, args.max_seconds)
    if args.source:
        from serve_peers import DecodeDataset
        paths, labels = [], []
        for k, name in enumerate(cache.classes):
            folder = os.path.join(args.source, name)
            for f in sorted(os.listdir(folder)):
                paths.append(os.path.join(folder, f))
                labels.append(k)
        h, w, c = cache.shape
        dls = DataLoader(DecodeDataset(paths, labels, h, w, c), batch_size=bs, shuffle=True,
                         num_workers=2, persistent_workers=True)
        yield "seed_w2", lambda: timed_epochs(lambda: iter(dls), args.epochs, args.max_seconds)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cache")
    p.add_argument("--source", help="the class folder the cache was built from (row e)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-seconds", type=float, default=20)
    p.add_argument("--json")
    args = p.parse_args()
    info = host_info(torch=torch.__version__, loadavg_start=list(os.getloadavg()))
    made = list(rows(args))
    best = {name: 0.0 for name, _ in made}
    for r in range(args.rounds):
        for name, run in made:
            rates = run()
            best[name] = max(best[name], max(rates))
            print(f"round {r} {name:11s} " + " ".join(f"{x:,.0f}" for x in rates), flush=True)
    info["loadavg_end"] = list(os.getloadavg())
    print(f"\n{'row':11s} {'samples/s':>12s} {'vs (a)':>7s}")
    for name, v in best.items():
        print(f"{name:11s} {v:12,.0f} {v / best['loader']:7.2f}x")
    print(f"load average: start {info['loadavg_start']}, end {info['loadavg_end']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": info, "best_samples_per_s": best, "args": vars(args)}, f,
                      indent=1)


if __name__ == "__main__":
    main()
