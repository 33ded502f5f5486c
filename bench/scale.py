#!/usr/bin/python3
"""How dscache's phases scale with the sample count N (issue 33).

For each N of --sizes it makes (or reuses, cached by N under --work) a synthetic source: N small
JPEGs (sides 32..64, random aspect) in min(1000, N) class folders, and beside them a CSV table
(image_path,label and two fields: aux_int, aux_float) naming the same files. Generation runs in
a multiprocessing pool; a source is reused when its `.complete` marker records the same
parameters. Then every phase runs as a process of its own, timed by wall clock and measured with
os.wait4's rusage:

  list_dry       dscache build SRC OUT --size S --dry-run (listing + estimate)
  build          dscache build SRC OUT --size S (all threads)
  table_dry      the same two over the CSV table (its two fields typed from their values)
  table_build
  build_parts    dscache build --part k/8 for k = 0..7, one after another (time: the sum;
                 RSS: the largest part)
  merge          dscache merge of the 8 parts (hard links on one filesystem)
  copy_parts     cp -r of the same 8 part folders: the byte copy the merge is compared with
  inspect        dscache inspect OUT --json (Cache::open and a summary)
  verify         dscache verify OUT (full: every file and every sample checksum; the CLI has
                 no files-only mode for a raw cache: --quick only skips JPEG decoding)
  py_open        python3: import dscache; dscache.Cache(OUT)
  loader_first   python3: dscache.Loader(Cache(OUT), batch 256, workers 2) to its first batch
  loader_epoch   ... the same process continuing to the end of one epoch
  dl_first       python3: DataLoader(CacheDataset(OUT), batch_size=None, num_workers=2) to its
                 first batch
  train_first    dscache-train --train OUT --max-steps 1 (start-up, one step, exit)

plus the manifest's and side files' sizes (every file of the cache but its image shards).
Optionally (--coco-images I[,I2..] --coco-annotations A[,A2..]) COCO instances files with those
counts (80 categories with COCO's ids, ~1% crowd annotations as RLE, half with COCO's compressed
string counts and half as count lists, the rest polygons of 4..24 points) over small JPEGs
(40..64 px), and their listing (--dry-run) and build; with two or more, the largest's peak RSS
is extrapolated linearly to train2017's counts, 118,287 images and 860,001 annotations (printed
as such).

Every process's figures: wall seconds; maxrss, the kernel's peak RSS of the process or of its
largest waited-for descendant (ru_maxrss from wait4: file-backed pages of a mapped cache count;
each phase is started from a small `python3 -S`, ~7 MiB, the floor of every figure, since a
child's ru_maxrss starts at the RSS of the process that forks it);
and anon, the largest sum of RssAnon + RssShmem over the process tree, sampled from /proc every
--sample-ms (a lower bound of the true peak; what the process allocated, not the cache pages it
mapped; shared memory counts once per process mapping it). Python phases also report their own
in-process timings (open, first batch, epoch). With --rounds R every phase runs R times and the
medians are reported (each run's wall kept in the JSON).

For each phase the table gives the slope of log(time) and of log(maxrss) against log(N) (a least
squares fit; from two sizes it is simply the slope between them; with three or more, also the
time slope between the two largest) and the marginal bytes per
sample of maxrss and anon between the smallest and largest N (the fixed base cancels). Goals
(issue 33): time slope <= 1.05; start-up phases (inspect, py_open, loader_first, dl_first,
train_first) <= 1 s at 1.28M; <= 64 bytes per sample beyond a fixed base for every phase but the
build's in-flight window; COCO train2017-sized listing and build in <= 1 GB; merge of 8 parts at
1.28M in <= 2x the time of copying the bytes.

Sources are warm in the page cache (just generated or read by the phase before); nothing drops
caches. The chart (--chart, default docs/scale.png; needs python3-matplotlib) shows time and
maxrss against N, log-log, one line per phase, its slope in the legend.

Usage: scale.py [--sizes 10000,100000] [--work DIR] [--size 32] [--threads 0]
                [--dscache build/tools/dscache] [--train build/trainer/dscache-train]
                [--pythonpath build/python] [--coco-images I,..] [--coco-annotations A,..]
                [--phases a,b,...] [--rounds 1] [--keep] [--json F] [--chart F|none]
                [--replot JSON]
Run with Debian's /usr/bin/python3 (numpy, opencv; torch for dl_first; matplotlib for the chart).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from hostinfo import host_info  # noqa: E402
from scale_measure import (PY_DATALOADER, PY_LOADER, PY_OPEN, dir_bytes, py_child,  # noqa: E402
                           rounds, row, side_files)
from scale_report import chart, print_goals, print_table, summarize  # noqa: E402
from scale_sources import make_coco, make_folder  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Phases


def run_size(a, n, res):
    ds = a.dscache
    phases = a.phases
    src, gen_s, reused = make_folder(a.work, n, a.procs)
    res["generate"] = {"seconds": round(gen_s, 2), "reused": reused, "files": n}
    print(f"[{n}] source {src} ({'reused' if reused else f'made in {gen_s:.1f} s'})",
          flush=True)
    out = os.path.join(a.work, f"out-{n}")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cache = os.path.join(out, "full")
    common = ["--size", str(a.size), "--threads", str(a.threads), "-q"]
    P = {}
    res["phases"] = P

    def note(name, d):
        P[name] = d
        extra = {k: v for k, v in d.items()
                 if k not in ("wall_s", "maxrss_kib", "anon_kib", "maxrss_kib_runs",
                              "anon_kib_runs")}
        print(f"[{n}] {name:13s} {d['wall_s']:9.3f} s  maxrss {d['maxrss_kib'] / 1024:8.1f} MiB"
              f"  anon {d['anon_kib'] / 1024:8.1f} MiB  {json.dumps(extra) if extra else ''}",
              flush=True)

    if "list_dry" in phases:
        note("list_dry", row(rounds(a, [ds, "build", src, cache + "-dry", "--size", str(a.size),
                                        "--dry-run"])))
    # build always runs: the later phases read its cache.
    note("build", row(rounds(a, [ds, "build", src, cache, *common, "--force"])))
    table = os.path.join(src, "table.csv")
    if "table_dry" in phases:
        note("table_dry", row(rounds(a, [ds, "build", table, cache + "-tdry", "--size",
                                         str(a.size), "--dry-run"])))
    if "table_build" in phases:
        tcache = os.path.join(out, "table")
        r = rounds(a, [ds, "build", table, tcache, *common, "--force"])
        note("table_build", row(r, cache_bytes=dir_bytes(tcache),
                                side_bytes=sum(side_files(tcache).values())))
        res["table_side_files"] = side_files(tcache)
        shutil.rmtree(tcache)
    if "build_parts" in phases:
        parts = [os.path.join(out, f"part{k}") for k in range(8)]
        runs = [rounds(a, [ds, "build", src, parts[k], *common, "--force", "--part", f"{k}/8"])
                for k in range(8)]
        note("build_parts", {"wall_s": round(sum(r.wall for r in runs), 4),
                             "maxrss_kib": max(r.maxrss_kib for r in runs),
                             "anon_kib": max(r.anon_kib for r in runs),
                             "part_wall_s": [round(r.wall, 3) for r in runs]})
        merged = os.path.join(out, "merged")
        r = rounds(a, [ds, "merge", *parts, merged, "-q", "--force"])
        part_bytes = sum(dir_bytes(p) for p in parts)
        same = (open(os.path.join(merged, "checksums.npy"), "rb").read()
                == open(os.path.join(cache, "checksums.npy"), "rb").read()
                if os.path.exists(os.path.join(cache, "checksums.npy")) else None)
        note("merge", row(r, part_bytes=part_bytes, checksums_equal_full_build=same))
        copy_dir = os.path.join(out, "copy")

        def fresh_copy_dir():
            shutil.rmtree(copy_dir, ignore_errors=True)
            os.makedirs(copy_dir)

        r = rounds(a, ["cp", "-r", *parts, copy_dir], before=fresh_copy_dir)
        note("copy_parts", row(r, bytes=part_bytes))
        P["merge"]["merge_over_copy"] = round(P["merge"]["wall_s"] / max(r.wall, 1e-9), 3)
        for p in parts + [merged, copy_dir]:
            shutil.rmtree(p)
    if "inspect" in phases:
        r = rounds(a, [ds, "inspect", cache, "--json"])
        json.loads(r.out)
        note("inspect", row(r))
    if "verify" in phases:
        note("verify", row(rounds(a, [ds, "verify", cache])))
    if "py_open" in phases:
        r, j = py_child(a, PY_OPEN, cache)
        assert j["count"] == n, j
        note("py_open", row(r, open_s=round(j["open_s"], 4), import_s=round(j["import_s"], 4)))
    if "loader_first" in phases:
        r, j = py_child(a, PY_LOADER, cache, "first")
        note("loader_first", row(r, first_batch_s=round(j["first_batch_s"], 4),
                                 import_open_s=round(j["import_open_s"], 4)))
    if "loader_epoch" in phases:
        r, j = py_child(a, PY_LOADER, cache, "epoch")
        assert j["samples"] == n, j
        note("loader_epoch", row(r, epoch_s=round(j["epoch_s"], 4),
                                 first_batch_s=round(j["first_batch_s"], 4)))
    if "dl_first" in phases:
        r, j = py_child(a, PY_DATALOADER, cache)
        note("dl_first", row(r, first_batch_s=round(j["first_batch_s"], 4),
                             import_s=round(j["import_s"], 4),
                             shutdown_s=round(j["shutdown_s"], 4)))
    if "train_first" in phases and a.train:
        tout = os.path.join(out, "train")
        r = rounds(a, [a.train, "--train", cache, "--max-steps", "1", "--batch", "64",
                       "--no-progress", "--output", tout, "--force"])
        note("train_first", row(r))
    files = side_files(cache)
    res["side_files"] = files
    res["cache_bytes"] = dir_bytes(cache)
    res["manifest_bytes"] = files.get("manifest.json", 0)
    res["side_bytes"] = sum(files.values())
    print(f"[{n}] cache {res['cache_bytes']} B; manifest {res['manifest_bytes']} B "
          f"({res['manifest_bytes'] / n:.1f} B/sample); side files {res['side_bytes']} B "
          f"({res['side_bytes'] / n:.1f} B/sample): {files}", flush=True)
    if not a.keep:
        shutil.rmtree(out)


def run_coco(a, res, images, annotations):
    d, gen_s, reused = make_coco(a.work, images, annotations, a.procs)
    js = os.path.join(d, "instances.json")
    res["generate"] = {"seconds": round(gen_s, 2), "reused": reused}
    res["json_bytes"] = os.path.getsize(js)
    print(f"[coco] {js} ({res['json_bytes']} B; "
          f"{'reused' if reused else f'made in {gen_s:.1f} s'})", flush=True)
    out = os.path.join(a.work, "out-coco")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    P = res["phases"] = {}
    for name, extra in (("coco_dry", ["--dry-run"]),
                        ("coco_build", ["--threads", str(a.threads), "-q"])):
        r = rounds(a, [a.dscache, "build", js, os.path.join(out, "c"), "--image-root",
                       os.path.join(d, "images"), "--size", str(a.size), "--force", *extra])
        P[name] = row(r)
        print(f"[coco] {name:11s} {r.wall:9.3f} s  maxrss {r.maxrss_kib / 1024:8.1f} MiB  "
              f"anon {r.anon_kib / 1024:8.1f} MiB", flush=True)
    c = os.path.join(out, "c")
    res["side_files"] = side_files(c)
    res["cache_bytes"] = dir_bytes(c)
    if not a.keep:
        shutil.rmtree(out)


ALL_PHASES = ("list_dry", "build", "table_dry", "table_build", "build_parts", "inspect",
              "verify", "py_open", "loader_first", "loader_epoch", "dl_first", "train_first")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "dscache-scale"))
    ap.add_argument("--size", type=int, default=32, help="cache side (pixels)")
    ap.add_argument("--threads", type=int, default=0, help="dscache build --threads")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 2,
                    help="processes generating sources")
    ap.add_argument("--dscache", default=os.path.join(REPO, "build", "tools", "dscache"))
    ap.add_argument("--train", default=os.path.join(REPO, "build", "trainer", "dscache-train"))
    ap.add_argument("--pythonpath", default=os.path.join(REPO, "build", "python"))
    ap.add_argument("--coco-images", default="",
                    help="COCO sources' image counts, comma-separated (train2017: 118287)")
    ap.add_argument("--coco-annotations", default="",
                    help="their annotation counts, one per image count (train2017: 860001)")
    ap.add_argument("--phases", default=",".join(ALL_PHASES))
    ap.add_argument("--sample-ms", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of every phase: medians reported, each run's wall kept")
    ap.add_argument("--keep", action="store_true", help="keep the caches built under --work")
    ap.add_argument("--json")
    ap.add_argument("--replot", metavar="JSON",
                    help="print the table and draw the chart of an earlier --json; run nothing")
    ap.add_argument("--chart", default=os.path.join(REPO, "docs", "scale.png"),
                    help="PNG to draw, or 'none'")
    a = ap.parse_args()
    if a.replot:
        with open(a.replot) as f:
            doc = json.load(f)
        sizes = doc["args"]["sizes"]
        names, summary = summarize(doc["results"], sizes)
        print_table(doc["results"], sizes, names, summary)
        coco = doc.get("coco") or []
        print_goals(doc["results"], sizes, summary, [coco] if isinstance(coco, dict) else coco)
        if a.chart and a.chart != "none":
            chart(a.chart, doc["results"], sizes, names, summary, len(sizes) == 2)
        return
    a.sizes = sorted(int(s) for s in a.sizes.split(","))
    a.coco_images = [int(v) for v in a.coco_images.split(",") if v.strip()]
    a.coco_annotations = [int(v) for v in a.coco_annotations.split(",") if v.strip()]
    if len(a.coco_images) != len(a.coco_annotations):
        sys.exit("scale.py: --coco-images and --coco-annotations need as many counts each")
    a.phases = set(a.phases.split(","))
    unknown = a.phases - set(ALL_PHASES)
    if unknown:
        sys.exit(f"scale.py: unknown phases {sorted(unknown)} (known: {', '.join(ALL_PHASES)})")
    if not os.access(a.dscache, os.X_OK):
        sys.exit(f"scale.py: {a.dscache} is not an executable (--dscache)")
    if not os.access(a.train, os.X_OK):
        print(f"scale.py: {a.train} is missing: train_first skipped", flush=True)
        a.train = None
    os.makedirs(a.work, exist_ok=True)
    results = {}
    t0 = time.time()
    for n in a.sizes:
        results[str(n)] = {}
        run_size(a, n, results[str(n)])
    coco = []
    for ci, ca in zip(a.coco_images, a.coco_annotations):
        coco.append({"images": ci, "annotations": ca})
        run_coco(a, coco[-1], ci, ca)
    names, summary = summarize(results, a.sizes)
    print()
    print_table(results, a.sizes, names, summary)
    for c in coco:
        for k, d in c["phases"].items():
            print(f"{k:13s} {c['images']} images, {c['annotations']} annotations "
                  f"({c['json_bytes'] / 1e6:.1f} MB JSON): {d['wall_s']:.3f} s, maxrss "
                  f"{d['maxrss_kib'] / 1024:.1f} MiB, anon {d['anon_kib'] / 1024:.1f} MiB")
    if len(a.sizes) == 2:
        print("slopes are from 2 points: the slope between the two sizes")
    print_goals(results, a.sizes, summary, coco)
    doc = {"host": host_info(load_avg=os.getloadavg()), "args": {
        "sizes": a.sizes, "size": a.size, "threads": a.threads, "work": a.work,
        "rounds": a.rounds, "coco_images": a.coco_images,
        "coco_annotations": a.coco_annotations,
        "dscache": a.dscache, "train": a.train, "pythonpath": a.pythonpath},
        "seconds": round(time.time() - t0, 1), "results": results, "summary": summary,
        "coco": coco}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    if a.chart and a.chart != "none":
        try:
            chart(a.chart, results, a.sizes, names, summary, len(a.sizes) == 2)
        except ImportError:
            print("scale.py: no matplotlib (apt-get install python3-matplotlib): no chart")


if __name__ == "__main__":
    main()
