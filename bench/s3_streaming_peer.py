#!/usr/bin/python3
"""dscache against MosaicML Streaming's StreamingDataset on the same images over the same S3
server, in one run on one machine (issue 32: ">= 2x its samples/s cold and warm").

The server is the test suite's private Ceph radosgw on loopback (tests/s3/rgw.py, memstore: its
data sits in RAM). The images are real photographs (bench/make_photo_folder.py, or --source),
listed until there are --samples of them, and stored twice in one bucket:

  s3://bench/dscache   `dscache build LIST s3://bench/dscache --size S`: decoded S x S x 3 pixels
  s3://bench/mds       streaming's own MDSWriter(out=(local, "s3://bench/mds")) with columns
                       image 'ndarray:uint8:S,S,3' (the raw decoded pixels) and label 'int',
                       no compression, written from the very pixels of the dscache cache (read
                       back through dscache.Cache; 64 samples are checked byte for byte through
                       a StreamingDataset before any timing)

so both hand the training loop the same decoded uint8 HWC arrays, as torch tensors:

  dscache-dl      torch DataLoader(CacheDataset(s3://..., batch_size=B, threads=1),
                  batch_size=None, num_workers=W, persistent_workers=True)
  dscache-loader  dscache.Loader(Cache(s3://...), batch_size=B, workers=W).torch() (threads in
                  the training process, no DataLoader)
  streaming       torch DataLoader(StreamingDataset(remote=s3://..., local=DIR, shuffle=True,
                  batch_size=B), batch_size=B, num_workers=W, persistent_workers=True)

Each row, each round, runs in fresh processes with an empty local directory:
  cold    construction (dscache: download + verification of the whole cache; streaming: its
          index.json) and the first epoch; samples/s = samples / (open + epoch)
  warm    the next --epochs epochs of the same process (everything local); samples/s per epoch
  rerun   a second process over the filled local directory: open + first epoch

Rows rotate their order from round to round; every figure is the median over rounds (warm:
over every warm epoch of every round) with its range. Ratios are dscache / streaming.

MosaicML Streaming is not a dependency and none of its code is in this repository: --streaming-src
is an extracted source tree of it (bench/README.md says how to get one; its runtime dependencies
are Debian packages: scripts/setup-deps --bench-peers). Without it this script says why and
exits 2. Its package __init__ files are not run: they import StreamingDataLoader and
streaming.text, which import Hugging Face `transformers` (not packaged by Debian; not used by
StreamingDataset), so `streaming` and `streaming.base` are entered as bare packages over the tree
and streaming.base.dataset / streaming.base.format.mds.writer are imported from it unchanged.

Fork workaround. StreamingDataset's constructor downloads index.json in the training process
with a boto3 client it keeps (Stream._downloader); DataLoader workers started by fork (torch's
default on Linux) inherit that client and its pooled keep-alive connection, and two workers
reading one socket take each other's bytes. Over plain http:// nothing notices: in 10 cold runs
of 50,000 64x64 samples as-is, 5 downloaded a shard with wrong contents (right size; 3 ended in
IndexError, 2 finished the epoch serving wrong samples); with the client dropped before the fork
(Stream._downloader.clean_up(), what streaming's own retry does; each worker then makes its own,
as under spawn, where its __getstate__ drops it) 0 of 10. So the streaming row drops it;
--streaming-as-is does not. After every cold streaming run the downloaded shards are compared
with the MDSWriter's, and a difference is reported and fails the run. dscache's HTTP client makes
a new handle in a forked process (libcache/src/remote/http_client.cpp) and checks every
downloaded file's size and XXH64.

Usage: s3_streaming_peer.py --streaming-src DIR [--samples 50000] [--size 64] [--photos 2000]
           [--source DIR] [--batch 256] [--workers 2] [--epochs 3] [--rounds 3]
           [--rows dscache-dl,dscache-loader,streaming] [--dscache build/tools/dscache]
           [--streaming-as-is] [--work DIR] [--json OUT]
Run with /usr/bin/python3 and PYTHONPATH=BUILD/python; needs scripts/setup-deps --s3 --bench-peers.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUCKET = "bench"
ROWS = ["dscache-dl", "dscache-loader", "streaming"]
CHECKED_SAMPLES = 64


def import_streaming(src):
    """(StreamingDataset, MDSWriter, version) from the extracted source tree `src`, without
    running streaming/__init__.py and streaming/base/__init__.py (see the module docstring)."""
    pkg = Path(src, "streaming")
    if not (pkg / "base" / "dataset.py").is_file():
        raise ImportError(f"{src}: no streaming/base/dataset.py (not a MosaicML Streaming "
                          f"source tree)")
    for name, path in (("streaming", pkg), ("streaming.base", pkg / "base")):
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = [str(path)]
            sys.modules[name] = m
    from streaming.base.dataset import StreamingDataset
    from streaming.base.format.mds.writer import MDSWriter
    from streaming._version import __version__
    return StreamingDataset, MDSWriter, __version__


# ---- child processes ---------------------------------------------------------------------

def child_probe(a):
    _, _, version = import_streaming(a.streaming_src)
    return {"version": version}


def child_write_mds(a):
    """The MDS dataset from the dscache cache's own pixels, uploaded by MDSWriter itself; then
    CHECKED_SAMPLES samples read back through a StreamingDataset and compared."""
    import numpy as np
    import dscache
    StreamingDataset, MDSWriter, version = import_streaming(a.streaming_src)
    dscache.remote_options(local_cache=str(Path(a.local, "dscache-scratch")))
    cache = dscache.Cache(a.url)
    h, w, c = cache.shape
    n = len(cache)
    cols = {"image": f"ndarray:uint8:{h},{w},{c}", "label": "int"}
    t0 = time.perf_counter()
    # keep_local: the shards as written, what the parent compares every download with
    with MDSWriter(out=(str(Path(a.mds_ref)), a.mds_url), columns=cols, compression=None,
                   keep_local=True) as wr:
        for i in range(n):
            img, label = cache[i]
            wr.write({"image": np.asarray(img), "label": int(label)})
    seconds = time.perf_counter() - t0
    ds = StreamingDataset(remote=a.mds_url, local=str(Path(a.local, "mds-check")), shuffle=False,
                          batch_size=1)
    if len(ds) != n:
        raise SystemExit(f"the MDS dataset has {len(ds)} samples, the cache {n}")
    for i in sorted(set(int(x) for x in np.linspace(0, n - 1, CHECKED_SAMPLES))):
        s = ds[i]
        img, label = cache[i]
        if not (np.array_equal(s["image"], np.asarray(img)) and s["label"] == int(label)):
            raise SystemExit(f"sample {i}: the MDS dataset's differs from the dscache cache's")
    return {"version": version, "samples": n, "shape": [h, w, c], "columns": cols,
            "write_seconds": seconds, "checked": CHECKED_SAMPLES}


def run_epochs(make, epochs):
    """make() -> an iterable over (images, labels) batches, timed; then `epochs` passes."""
    t0 = time.perf_counter()
    it, first = make()
    t_open = time.perf_counter() - t0
    out = []
    for e in range(epochs):
        t0 = time.perf_counter()
        n = 0
        shape = None
        for images, labels in it(e):
            n += len(labels)
            shape = tuple(images.shape[1:]), str(images.dtype)
        out.append({"seconds": time.perf_counter() - t0, "samples": n})
    return {"open_seconds": t_open, "epochs": out, "item": [list(shape[0]), shape[1]],
            "first": first}


def child_time(a):
    import torch
    import torch.utils.data
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    epochs = 1 + (a.epochs if a.mode == "cold" else 0)
    loader_kw = dict(num_workers=a.workers, persistent_workers=a.workers > 0)

    if a.row == "streaming":
        StreamingDataset, _, _ = import_streaming(a.streaming_src)

        def make():
            ds = StreamingDataset(remote=a.mds_url, local=a.local, shuffle=True,
                                  shuffle_seed=a.seed, batch_size=a.batch)
            if not a.streaming_as_is:
                # Drop the boto3 client the constructor made (for index.json) before the
                # DataLoader forks its workers: forked workers inherit it, with its pooled
                # keep-alive connection, and two processes reading one socket get each other's
                # bytes (silently over http://: shards downloaded with the wrong contents; see
                # "Fork workaround" in the module docstring). Each worker then makes its own client, as under spawn.
                for stream in ds.streams:
                    stream._downloader.clean_up()
            dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, **loader_kw)

            def it(e):
                for b in dl:
                    yield b["image"], b["label"]
            return it, None
    else:
        import dscache
        dscache.remote_options(local_cache=a.local)
        if a.row == "dscache-dl":
            from dscache.torch import CacheDataset

            def make():
                ds = CacheDataset(a.url, batch_size=a.batch, shuffle=True, seed=a.seed,
                                  threads=1)
                dl = torch.utils.data.DataLoader(ds, batch_size=None, **loader_kw)
                return (lambda e: dl), None
        else:
            def make():
                loader = dscache.Loader(dscache.Cache(a.url), batch_size=a.batch, shuffle=True,
                                        seed=a.seed, workers=a.workers, prefetch=4)

                def it(e):
                    loader.set_epoch(e)
                    return loader.torch()
                return it, None
    return run_epochs(make, epochs)


CHILDREN = {"probe": child_probe, "write-mds": child_write_mds, "time": child_time}


# ---- the parent ---------------------------------------------------------------------------

def med_range(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(m, scale=1.0):
    return f"{m['median'] * scale:10.0f} [{m['min'] * scale:.0f}-{m['max'] * scale:.0f}]"


def loadavg():
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


class Runner:
    def __init__(self, a, env):
        self.a, self.env = a, env

    def child(self, role, **kw):
        out = Path(self.a.work, f"child-{role}.json")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", role,
               "--child-out", str(out), "--streaming-src", self.a.streaming_src,
               "--batch", str(self.a.batch), "--workers", str(self.a.workers),
               "--epochs", str(self.a.epochs)]
        if self.a.streaming_as_is:
            cmd.append("--streaming-as-is")
        for k, v in kw.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        r = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=1800)
        if r.returncode != 0:
            raise SystemExit(f"s3_streaming_peer: child {role} {kw} failed ({r.returncode}):\n"
                             f"{r.stdout[-4000:]}")
        result = json.loads(out.read_text())
        out.unlink()
        return result


def corrupt_shards(local, ref):
    """The shards StreamingDataset downloaded into `local` that differ from the MDSWriter's
    (dscache checks its own downloads: size and XXH64 of every file)."""
    bad = []
    for f in sorted(Path(ref).glob("*.mds")):
        got = Path(local, f.name)
        if not got.exists() or got.read_bytes() != f.read_bytes():
            bad.append(f.name)
    return bad


def write_list(a, photos_dir, path):
    """`--samples` lines `path,class` cycling through the folder's photos (sorted)."""
    files = sorted(p for p in Path(photos_dir).glob("*/*") if p.is_file())
    if not files:
        raise SystemExit(f"s3_streaming_peer: no images under {photos_dir}/<class>/")
    with open(path, "w") as f:
        for k in range(a.samples):
            p = files[k % len(files)]
            f.write(f"{p},{p.parent.name}\n")
    return len(files)


def parse_args():
    """The parser and the parsed arguments (the child-process ones included)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streaming-src", required=True,
                    help="an extracted MosaicML Streaming source tree (holds streaming/)")
    ap.add_argument("--samples", type=int, default=50000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--photos", type=int, default=2000,
                    help="distinct photos to make with make_photo_folder.py (cycled)")
    ap.add_argument("--source", help="a folder DIR/<class>/<image> to use instead")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3, help="warm epochs after the cold one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--dscache", default=str(ROOT / "build" / "tools" / "dscache"))
    ap.add_argument("--work", help="scratch directory (default: a new one in $TMPDIR, removed)")
    ap.add_argument("--json")
    ap.add_argument("--streaming-as-is", action="store_true",
                    help="leave the parent's boto3 client to the forked workers (reproduces "
                         "the corruption the docstring's 'Fork workaround' describes)")
    # child-process arguments
    ap.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--mds-url", help=argparse.SUPPRESS)
    ap.add_argument("--local", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--mds-ref", help=argparse.SUPPRESS)
    a = ap.parse_args()
    return ap, a


def run_rounds(a, s3, run, rows, url, mds_url, work, mds_ref):
    """Each row's cold, warm and rerun epochs, round by round (the rows' order rotated each
    round), with the GETs the server saw: {row: [record per round]}."""
    prefix = {"streaming": f"/{BUCKET}/mds/"}
    results = {r: [] for r in rows}
    for rnd in range(a.rounds):
        order = rows[rnd % len(rows):] + rows[:rnd % len(rows)]
        for row in order:
            local = work / f"local-{row}"
            shutil.rmtree(local, ignore_errors=True)
            p = prefix.get(row, f"/{BUCKET}/dscache/")
            g0 = s3.gets(p)
            load = loadavg()
            common = dict(row=row, url=url, mds_url=mds_url, local=local, seed=rnd)
            cold = run.child("time", mode="cold", **common)
            g1 = s3.gets(p)
            if row == "streaming":
                cold["corrupt_shards"] = corrupt_shards(local, mds_ref)
            rerun = run.child("time", mode="rerun", **common)
            g2 = s3.gets(p)
            shutil.rmtree(local, ignore_errors=True)
            rec = {"round": rnd, "load_1min": load, "cold": cold, "rerun": rerun,
                   "gets_cold": g1 - g0, "gets_rerun": g2 - g1}
            results[row].append(rec)
            e0 = cold["epochs"][0]
            warm = [e["samples"] / e["seconds"] for e in cold["epochs"][1:]]
            print(f"round {rnd} {row:15s} cold {e0['samples'] / (cold['open_seconds'] + e0['seconds']):9.0f}/s "
                  f"(open {cold['open_seconds']:.2f} s + epoch {e0['seconds']:.2f} s, "
                  f"{g1 - g0} GETs)  warm {max(warm) if warm else 0:9.0f}/s best  "
                  f"rerun {rerun['epochs'][0]['samples'] / (rerun['open_seconds'] + rerun['epochs'][0]['seconds']):9.0f}/s "
                  f"({g2 - g1} GETs)  load {load}"
                  + (f"  CORRUPT SHARDS: {cold['corrupt_shards']}"
                     if cold.get("corrupt_shards") else ""), flush=True)
    return results


def summarize(a, rows, results):
    """Prints the medians [min-max] per row, the ratios to streaming and whether streaming's
    shards were intact; returns (summary, ratios, corrupt)."""
    summary = {}
    for row, recs in results.items():
        cold = [r["cold"]["epochs"][0]["samples"] /
                (r["cold"]["open_seconds"] + r["cold"]["epochs"][0]["seconds"]) for r in recs]
        warm = [e["samples"] / e["seconds"] for r in recs for e in r["cold"]["epochs"][1:]]
        rerun = [r["rerun"]["epochs"][0]["samples"] /
                 (r["rerun"]["open_seconds"] + r["rerun"]["epochs"][0]["seconds"])
                 for r in recs]
        samples = sorted({e["samples"] for r in recs for k in ("cold", "rerun")
                          for e in r[k]["epochs"]})
        summary[row] = {"cold": med_range(cold), "warm": med_range(warm),
                        "rerun": med_range(rerun), "samples_per_epoch": samples,
                        "cold_open_s": med_range([r["cold"]["open_seconds"] for r in recs]),
                        "item": recs[0]["cold"]["item"]}
    print()
    print(f"samples/s, median [min-max] of {a.rounds} rounds (warm: of {a.rounds} x "
          f"{a.epochs} epochs); batch {a.batch}, {a.workers} workers, global/streaming "
          f"shuffle; loopback radosgw (memstore)")
    print(f"{'':15s} {'cold (open + epoch)':>26s} {'warm (epoch)':>26s} "
          f"{'rerun (open + epoch)':>26s}  samples/epoch")
    for row, s in summary.items():
        print(f"{row:15s} {fmt(s['cold']):>26s} {fmt(s['warm']):>26s} "
              f"{fmt(s['rerun']):>26s}  {','.join(map(str, s['samples_per_epoch']))}")
    ratios = {}
    if "streaming" in summary:
        base = summary["streaming"]
        for row in rows:
            if row == "streaming":
                continue
            ratios[row] = {k: summary[row][k]["median"] / base[k]["median"]
                           for k in ("cold", "warm", "rerun")}
            print(f"{row} / streaming: cold {ratios[row]['cold']:.2f}x, warm "
                  f"{ratios[row]['warm']:.2f}x, rerun {ratios[row]['rerun']:.2f}x "
                  f"(goal >= 2 cold and warm)")
    corrupt = [(r["round"], r["cold"]["corrupt_shards"]) for r in results.get("streaming", [])
               if r["cold"].get("corrupt_shards")]
    if "streaming" in results:
        print(f"streaming's downloaded shards equal to the MDSWriter's in "
              f"{len(results['streaming']) - len(corrupt)} of {len(results['streaming'])} "
              f"cold runs" + (f"; CORRUPT (round, shards): {corrupt}" if corrupt else ""))
    return summary, ratios, corrupt


def main():
    ap, a = parse_args()

    if a.child:
        result = CHILDREN[a.child](a)
        Path(a.child_out).write_text(json.dumps(result))
        return

    rows = [r for r in a.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            ap.error(f"--rows: unknown row {r!r} (known: {', '.join(ROWS)})")
    # The peer first: without it there is no comparison, and the run says so.
    probe = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "probe",
                            "--child-out", os.devnull, "--streaming-src", a.streaming_src],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        print(f"s3_streaming_peer: MosaicML Streaming cannot be imported from --streaming-src "
              f"{a.streaming_src}; no comparison was run. How to get it: bench/README.md "
              f"(s3_streaming_peer.py); its dependencies: scripts/setup-deps --bench-peers.\n"
              f"{probe.stdout[-3000:]}", file=sys.stderr)
        sys.exit(2)
    if not Path(a.dscache).is_file():
        sys.exit(f"s3_streaming_peer: no dscache command at {a.dscache} (--dscache)")

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "tests" / "s3"))
    from hostinfo import host_info  # noqa: E402
    from rgw import Rgw  # noqa: E402

    own_work = a.work is None
    a.work = str(Path(a.work or tempfile.mkdtemp(prefix="dscache-s3-peer-")).resolve())
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        if a.source:
            photos = Path(a.source)
        else:
            photos = work / "photos"
            if not photos.exists():
                subprocess.run([sys.executable, str(HERE / "make_photo_folder.py"), str(photos),
                                "--count", str(a.photos)], check=True, stdout=subprocess.DEVNULL)
        listing = work / "list.csv"
        distinct = write_list(a, photos, listing)
        nbytes = a.samples * a.size * a.size * 3
        memstore = max(1 << 30, int(2.5 * nbytes) + (512 << 20))
        with Rgw(work / "rgw", memstore_bytes=memstore) as s3:
            s3.make_bucket(BUCKET)
            env = s3.env({"S3_ENDPOINT_URL": s3.endpoint, "HOME": str(work)})
            url, mds_url = f"s3://{BUCKET}/dscache", f"s3://{BUCKET}/mds"
            t0 = time.perf_counter()
            subprocess.run([a.dscache, "build", str(listing), url, "--size", str(a.size),
                            "--quiet"], env=env, check=True)
            build_s = time.perf_counter() - t0
            run = Runner(a, env)
            mds_ref = work / "mds-ref"
            shutil.rmtree(mds_ref, ignore_errors=True)
            mds = run.child("write-mds", url=url, mds_url=mds_url, local=work / "scratch",
                            mds_ref=mds_ref)
            shutil.rmtree(work / "scratch", ignore_errors=True)
            objs = {}
            for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
                for o in page.get("Contents", []):
                    top = o["Key"].split("/")[0]
                    n_, b_ = objs.get(top, (0, 0))
                    objs[top] = (n_ + 1, b_ + o["Size"])
            print(f"MosaicML Streaming {mds['version']} from {a.streaming_src}; "
                  f"{a.samples} samples ({distinct} distinct photos) of {a.size}x{a.size}x3; "
                  f"dscache: {objs['dscache'][0]} objects, {objs['dscache'][1] / 2**20:.1f} MiB "
                  f"(build {build_s:.1f} s); MDS: {objs['mds'][0]} objects, "
                  f"{objs['mds'][1] / 2**20:.1f} MiB (write {mds['write_seconds']:.1f} s); "
                  f"{mds['checked']} samples checked equal", flush=True)
            results = run_rounds(a, s3, run, rows, url, mds_url, work, mds_ref)
        summary, ratios, corrupt = summarize(a, rows, results)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"host": host_info(), "args": {k: v for k, v in vars(a).items()
                                                         if not k.startswith("child")},
                           "streaming_version": mds["version"], "objects": objs,
                           "dscache_build_seconds": build_s, "mds": mds, "summary": summary,
                           "ratios": ratios, "rounds": results}, f, indent=2, default=str)
        if corrupt:
            sys.exit(1)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
