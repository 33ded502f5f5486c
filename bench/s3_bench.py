#!/usr/bin/python3
"""Serving a cache from object storage, in one run on one machine, against a real S3 server
(the test suite's private Ceph radosgw, tests/s3/rgw.py, on loopback):

  local   the cache read from a local directory: one epoch of dscache.Loader (best of --epochs,
          alternating with warm's)
  curl    the plain parallel GET of the same files from the same server: `curl --parallel
          --parallel-max N` (SigV4), the bytes' wall time: what any client could fetch at
  cold    dscache.Cache("s3://...") with an empty local cache, then its first epoch: download,
          verification (size + XXH64 of every file) and the epoch, wall time
  warm    the same cache opened again (the copy is there: one GET of manifest.json), one epoch

Goals (issue 32): warm >= 0.9x local (samples/s); cold >= 0.7x curl (the cache's bytes per
second of wall time, download and first epoch together).

Usage: s3_bench.py [--samples 20000] [--side 64] [--batch 256] [--workers 2] [--epochs 10]
                   [--in-flight 8] [--json OUT]
Run with /usr/bin/python3 and PYTHONPATH=BUILD/python; needs scripts/setup-deps --s3.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "s3"))
from hostinfo import host_info  # noqa: E402
from rgw import Rgw  # noqa: E402

BUCKET = "bench"


def make_cache(path, n, side):
    import dscache
    rng = np.random.default_rng(1)
    block = rng.integers(0, 256, (64, side, side, 3), dtype=np.uint8)
    with dscache.Writer(path, shape=(side, side), classes=[str(c) for c in range(10)]) as w:
        for i in range(n):
            w.write(block[i % 64], i % 10)


def upload(s3, local, prefix):
    """The cache's files with boto3, manifest last (what `dscache build` to s3:// does)."""
    c = s3.client()
    names = sorted(p.name for p in Path(local).iterdir() if p.name != "manifest.json")
    for name in names + ["manifest.json"]:
        c.upload_file(str(Path(local, name)), BUCKET, f"{prefix}/{name}")
    return names + ["manifest.json"]


def epoch_rate(cache, batch, workers, epoch=0):
    import dscache
    loader = dscache.Loader(cache, batch_size=batch, shuffle=True, seed=7, workers=workers,
                            prefetch=4)
    loader.set_epoch(epoch)
    t0 = time.perf_counter()
    n = 0
    for images, labels in loader:
        n += len(labels)
    return n, time.perf_counter() - t0


def curl_parallel(s3, prefix, names, out_dir, in_flight):
    """Wall seconds of `curl --parallel` GETting every file (SigV4, as dscache signs)."""
    cfg = Path(out_dir, "curl.cfg")
    lines = [f'aws-sigv4 = "aws:amz:{s3.region}:s3"', f'user = "{s3.access_key}:{s3.secret_key}"',
             'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"', "fail", "silent",
             "show-error"]
    for k, name in enumerate(names):
        lines.append(f'url = "{s3.endpoint}/{BUCKET}/{prefix}/{name}"')
        lines.append(f'output = "{out_dir}/f{k}"')
    cfg.write_text("\n".join(lines) + "\n")
    os.chmod(cfg, 0o600)
    t0 = time.perf_counter()
    subprocess.run(["curl", "--parallel", "--parallel-max", str(in_flight), "--config", str(cfg)],
                   check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--json")
    a = ap.parse_args()
    import dscache
    tmp = Path(tempfile.mkdtemp(prefix="dscache-s3-bench-"))
    try:
        local = tmp / "cache"
        make_cache(str(local), a.samples, a.side)
        total = sum(p.stat().st_size for p in local.iterdir())
        with Rgw(tmp / "rgw") as s3:
            s3.make_bucket(BUCKET)
            names = upload(s3, local, "c")
            for k, v in s3.env().items():
                os.environ[k] = v
            url = f"s3://{BUCKET}/c"
            rows = {}
            here = dscache.Cache(str(local))
            # curl: best of 2 (a fresh directory each time)
            secs = []
            for r in range(2):
                d = tmp / f"curl{r}"
                d.mkdir()
                secs.append(curl_parallel(s3, "c", names, d, a.in_flight))
                shutil.rmtree(d)
            rows["curl"] = {"seconds": min(secs), "bytes_per_s": total / min(secs)}
            # cold: an empty local cache; open (download + verify) and the first epoch
            dscache.remote_options(local_cache=str(tmp / "local"),
                                   requests_in_flight=a.in_flight)
            t0 = time.perf_counter()
            remote = dscache.Cache(url)
            t_open = time.perf_counter() - t0
            n, t_epoch = epoch_rate(remote, a.batch, a.workers)
            cold = t_open + t_epoch
            rows["cold"] = {"seconds": cold, "open_seconds": t_open, "epoch_seconds": t_epoch,
                            "bytes_per_s": total / cold}
            del remote
            # warm: the copy is there; its epochs alternate with the local directory's, the
            # same epoch numbers, so that a shared machine's load hits both alike (best of each)
            t0 = time.perf_counter()
            remote = dscache.Cache(url)
            t_open = time.perf_counter() - t0
            warm, plain = [], []
            for e in range(a.epochs):
                plain.append(epoch_rate(here, a.batch, a.workers, e)[1])
                warm.append(epoch_rate(remote, a.batch, a.workers, e)[1])
            rows["local"] = {"samples_per_s": a.samples / min(plain), "seconds": min(plain)}
            rows["warm"] = {"samples_per_s": a.samples / min(warm), "seconds": min(warm),
                            "open_seconds": t_open}
            gets = s3.gets(f"/{BUCKET}/c/")
        ratios = {"warm_vs_local": rows["warm"]["samples_per_s"] / rows["local"]["samples_per_s"],
                  "cold_vs_curl": rows["cold"]["bytes_per_s"] / rows["curl"]["bytes_per_s"]}
        print(f"cache: {a.samples} samples of {a.side}x{a.side}x3, {total / 2**20:.1f} MiB in "
              f"{len(names)} files; loopback radosgw (memstore)")
        print(f"local  {rows['local']['samples_per_s']:12.0f} samples/s")
        print(f"warm   {rows['warm']['samples_per_s']:12.0f} samples/s  "
              f"(open {rows['warm']['open_seconds'] * 1000:.1f} ms)  "
              f"{ratios['warm_vs_local']:.2f}x local (goal >= 0.9)")
        print(f"curl   {rows['curl']['bytes_per_s'] / 2**20:12.1f} MiB/s  "
              f"({rows['curl']['seconds']:.2f} s, --parallel-max {a.in_flight})")
        print(f"cold   {rows['cold']['bytes_per_s'] / 2**20:12.1f} MiB/s  "
              f"(open {rows['cold']['open_seconds']:.2f} s + epoch "
              f"{rows['cold']['epoch_seconds']:.2f} s)  {ratios['cold_vs_curl']:.2f}x curl "
              f"(goal >= 0.7)")
        print(f"server GETs of the cache's keys in the whole run: {gets} (expected "
              f"{2 * len(names) + len(names) - 1 + 2}: curl 2 x {len(names)} files, dscache each "
              f"of the {len(names) - 1} files the manifest names once, and manifest.json at each "
              f"of its 2 opens)")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"host": host_info(), "args": vars(a), "bytes": total, "rows": rows,
                           "ratios": ratios, "gets": gets}, f, indent=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
