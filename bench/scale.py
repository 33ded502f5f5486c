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
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from hostinfo import host_info  # noqa: E402

GEN_VERSION = 1
STARTUP = ("inspect", "py_open", "loader_first", "dl_first", "train_first")
# COCO's 80 category ids (1..90 with gaps), as instances_train2017.json has them.
COCO_IDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
            25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49,
            50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74,
            75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]


# ---------------------------------------------------------------------------------------------
# Synthetic sources


def _jpeg(rng, w, h):
    import cv2
    # A smooth gradient with a little noise: compresses like a small photo thumbnail.
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    c = rng.random(6, dtype=np.float32)
    img = np.empty((h, w, 3), np.float32)
    for k in range(3):
        img[:, :, k] = 255 * (c[k] * x + c[k + 3] * y) / 2
    img += rng.normal(0, 8, img.shape).astype(np.float32)
    ok, buf = cv2.imencode(".jpg", np.clip(img, 0, 255).astype(np.uint8),
                           [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def _write_folder_chunk(job):
    root, start, stop, classes = job
    rng = np.random.default_rng(start)
    for i in range(start, stop):
        w, h = (int(v) for v in rng.integers(32, 65, 2))
        with open(os.path.join(root, f"c{i % classes:04d}", f"{i:07d}.jpg"), "wb") as f:
            f.write(_jpeg(rng, w, h))
    return stop - start


def _write_coco_chunk(job):
    root, sizes, start, stop = job
    rng = np.random.default_rng(10**9 + start)
    for i in range(start, stop):
        w, h = sizes[i - start]
        with open(os.path.join(root, f"{i + 1:012d}.jpg"), "wb") as f:
            f.write(_jpeg(rng, w, h))
    return stop - start


def _chunks(n, parts):
    step = max(1, min(2000, -(-n // parts)))
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def _marker_ok(d, params):
    try:
        with open(os.path.join(d, ".complete")) as f:
            return json.load(f) == params
    except (OSError, ValueError):
        return False


def _write_marker(d, params):
    with open(os.path.join(d, ".complete"), "w") as f:
        json.dump(params, f)


def make_folder(work, n, procs):
    """WORK/src-N: N JPEGs in class folders plus table.csv; reused when complete."""
    d = os.path.join(work, f"src-{n}")
    classes = min(1000, n)
    params = {"version": GEN_VERSION, "n": n, "classes": classes}
    if _marker_ok(d, params):
        return d, 0.0, True
    t0 = time.perf_counter()
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for c in range(classes):
        os.mkdir(os.path.join(d, f"c{c:04d}"))
    with multiprocessing.Pool(procs) as pool:
        done = sum(pool.imap_unordered(
            _write_folder_chunk, [(d, a, b, classes) for a, b in _chunks(n, procs * 8)]))
    assert done == n
    rng = np.random.default_rng(n)
    ints = rng.integers(0, 1000, n)
    floats = rng.random(n)
    with open(os.path.join(d, "table.csv"), "w") as f:
        f.write("image_path,label,aux_int,aux_float\n")
        for i in range(n):
            f.write(f"c{i % classes:04d}/{i:07d}.jpg,c{i % classes:04d},{ints[i]},"
                    f"{floats[i]:.6f}\n")
    _write_marker(d, params)
    return d, time.perf_counter() - t0, False


def _rle_string(counts):
    """COCO's compressed RLE counts string (pycocotools' rleToString)."""
    out = []
    for i, x in enumerate(counts):
        x = int(x)
        if i > 2:
            x -= int(counts[i - 2])
        more = True
        while more:
            c = x & 0x1f
            x >>= 5
            more = (x != -1) if (c & 0x10) else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def _rle_counts(mask):
    """Column-major run lengths starting with a background run (COCO's RLE)."""
    flat = mask.T.reshape(-1).astype(np.uint8)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat[0] == 1:
        runs = [0] + runs
    return runs


def make_coco(work, images, annotations, procs):
    """WORK/coco-I-A: instances.json with I images and A annotations over I small JPEGs."""
    d = os.path.join(work, f"coco-{images}-{annotations}")
    params = {"version": GEN_VERSION, "images": images, "annotations": annotations}
    if _marker_ok(d, params):
        return d, 0.0, True
    t0 = time.perf_counter()
    shutil.rmtree(d, ignore_errors=True)
    img_dir = os.path.join(d, "images")
    os.makedirs(img_dir)
    rng = np.random.default_rng(2017)
    sizes = rng.integers(40, 65, (images, 2))
    jobs = [(img_dir, [tuple(int(v) for v in sizes[i]) for i in range(a, b)], a, b)
            for a, b in _chunks(images, procs * 8)]
    with multiprocessing.Pool(procs) as pool:
        assert sum(pool.imap_unordered(_write_coco_chunk, jobs)) == images
    # Annotations spread over the images as COCO's are (some with none, some with many).
    owner = np.sort(rng.integers(0, images, annotations))
    imgs = [{"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "width": int(sizes[i][0]),
             "height": int(sizes[i][1]), "license": 1, "coco_url": "", "date_captured": ""}
            for i in range(images)]
    anns = []
    for k in range(annotations):
        i = int(owner[k])
        w, h = int(sizes[i][0]), int(sizes[i][1])
        bw = float(rng.uniform(4, w - 1))
        bh = float(rng.uniform(4, h - 1))
        x0 = float(rng.uniform(0, w - bw))
        y0 = float(rng.uniform(0, h - bh))
        a = {"id": k + 1, "image_id": i + 1, "category_id": COCO_IDS[k % 80],
             "bbox": [round(x0, 2), round(y0, 2), round(bw, 2), round(bh, 2)],
             "area": round(bw * bh * 0.6, 2)}
        if k % 100 == 0:
            m = np.zeros((h, w), np.uint8)
            m[int(y0):int(y0 + bh), int(x0):int(x0 + bw)] = 1
            runs = _rle_counts(m)
            a["iscrowd"] = 1
            a["segmentation"] = {"size": [h, w],
                                 "counts": _rle_string(runs) if k % 200 == 0 else runs}
        else:
            pts = int(rng.integers(4, 25))
            t = np.sort(rng.uniform(0, 2 * math.pi, pts))
            cx, cy = x0 + bw / 2, y0 + bh / 2
            px = cx + np.cos(t) * bw / 2 * rng.uniform(0.6, 1.0, pts)
            py = cy + np.sin(t) * bh / 2 * rng.uniform(0.6, 1.0, pts)
            poly = np.empty(2 * pts)
            poly[0::2], poly[1::2] = px, py
            a["iscrowd"] = 0
            a["segmentation"] = [[round(float(v), 2) for v in poly]]
        anns.append(a)
    cats = [{"id": c, "name": f"cat{c}", "supercategory": "thing"} for c in COCO_IDS]
    doc = {"info": {"description": "synthetic, bench/scale.py"}, "licenses": [],
           "images": imgs, "annotations": anns, "categories": cats}
    with open(os.path.join(d, "instances.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    _write_marker(d, params)
    return d, time.perf_counter() - t0, False


# ---------------------------------------------------------------------------------------------
# Measuring a process


def _tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _anon_kib(pid):
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    total += int(line.split()[1])
    except OSError:
        pass
    return total


class Run:
    def __init__(self, wall, maxrss_kib, anon_kib, rc, out, err):
        self.wall, self.maxrss_kib, self.anon_kib = wall, maxrss_kib, anon_kib
        self.rc, self.out, self.err = rc, out, err


# Starts CMD (argv[2:]) and writes "exit maxrss_kib wall_s" of it to the fd argv[1]. A forked (or vforked)
# child's ru_maxrss starts at its parent's RSS and is kept across exec, and this script holds
# numpy (~30 MiB, more than `cp` or `inspect` use): every phase is started from this small
# interpreter (python3 -S, ~8 MiB: the floor of every maxrss below), which is left out of the
# sampled anon.
LAUNCH = """
import os, sys, time
fd = int(sys.argv[1])
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.close(fd)
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
os.write(fd, b"%d %d %f" % (os.waitstatus_to_exitcode(status), ru.ru_maxrss,
                           time.perf_counter() - t0))
"""


def measure(cmd, env=None, sample_ms=20, check=True):
    """Runs CMD; wall seconds, ru_maxrss (KiB) from wait4, sampled peak anon+shmem of its tree."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        r, w = os.pipe()
        p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCH, str(w)] + [str(c) for c in cmd],
                             stdout=fo, stderr=fe, env=env, pass_fds=(w,))
        os.close(w)
        peak = [0]
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                peak[0] = max(peak[0], sum(_anon_kib(q) for q in _tree(p.pid) if q != p.pid))
                stop.wait(sample_ms / 1000)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        report = b""
        while True:
            chunk = os.read(r, 256)
            if not chunk:
                break
            report += chunk
        os.close(r)
        p.wait()
        stop.set()
        th.join()
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
    try:
        rc, maxrss, wall = report.split()
        rc, maxrss, wall = int(rc), int(maxrss), float(wall)
    except ValueError:
        sys.exit(f"scale.py: launching {' '.join(str(c) for c in cmd)} failed:\n{err[-3000:]}")
    if check and rc != 0:
        sys.exit(f"scale.py: {' '.join(str(c) for c in cmd)} failed ({rc}):\n"
                 f"{out[-3000:]}\n{err[-3000:]}")
    return Run(wall, maxrss, peak[0], rc, out, err)


def rounds(a, cmd, env=None, before=None):
    """CMD run a.rounds times (BEFORE() ahead of each): the median wall, maxrss and anon, each
    round's wall in .walls, the last round's output."""
    runs = []
    for _ in range(a.rounds):
        if before:
            before()
        runs.append(measure(cmd, env=env, sample_ms=a.sample_ms))
    med = lambda vs: float(np.median(vs))  # noqa: E731
    r = Run(med([x.wall for x in runs]), int(med([x.maxrss_kib for x in runs])),
            int(med([x.anon_kib for x in runs])), 0, runs[-1].out, runs[-1].err)
    r.walls = [round(x.wall, 4) for x in runs]
    r.maxrss_runs = [x.maxrss_kib for x in runs]
    r.anon_runs = [x.anon_kib for x in runs]
    r.outs = [x.out for x in runs]
    return r


def row(r, **extra):
    d = {"wall_s": round(r.wall, 4), "maxrss_kib": r.maxrss_kib, "anon_kib": r.anon_kib}
    if len(getattr(r, "walls", ())) > 1:
        d["walls"] = r.walls
        d["maxrss_kib_runs"] = r.maxrss_runs
        d["anon_kib_runs"] = r.anon_runs
    d.update(extra)
    return d


# Python children: each prints one JSON line of its own timings (seconds).
PY_OPEN = r"""
import json, sys, time
t0 = time.perf_counter()
import dscache
t1 = time.perf_counter()
c = dscache.Cache(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "count": c.count}))
"""

PY_LOADER = r"""
import json, sys, time
t0 = time.perf_counter()
import dscache
c = dscache.Cache(sys.argv[1])
t1 = time.perf_counter()
loader = dscache.Loader(c, batch_size=256, shuffle=True, seed=0, workers=2, prefetch=4)
it = iter(loader)
images, labels = next(it)
t2 = time.perf_counter()
n = len(labels)
if sys.argv[2] == "epoch":
    for images, labels in it:
        n += len(labels)
t3 = time.perf_counter()
print(json.dumps({"import_open_s": t1 - t0, "first_batch_s": t2 - t1, "epoch_s": t3 - t1,
                  "samples": n}))
"""

PY_DATALOADER = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
import dscache.torch
t1 = time.perf_counter()
ds = dscache.torch.CacheDataset(sys.argv[1], batch_size=256, shuffle=True, threads=1)
dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
it = iter(dl)
images, labels = next(it)
t2 = time.perf_counter()
del it
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_batch_s": t2 - t1, "shutdown_s": t3 - t2,
                  "batch": list(images.shape)}))
"""


def py_child(a, script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (a.pythonpath, env.get("PYTHONPATH")) if p)
    r = rounds(a, [sys.executable, "-c", script, *args], env=env)
    js = [json.loads(o.strip().splitlines()[-1]) for o in r.outs]
    # Each timing key: its median over the rounds.
    j = {k: (float(np.median([x[k] for x in js])) if isinstance(v, float) else v)
         for k, v in js[-1].items()}
    return r, j


# ---------------------------------------------------------------------------------------------
# Phases


def dir_bytes(d):
    total = 0
    for root, _, files in os.walk(d):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def side_files(cache):
    """Every file of CACHE but its image shards, with its size."""
    out = {}
    for f in sorted(os.listdir(cache)):
        p = os.path.join(cache, f)
        if os.path.isfile(p) and not f.startswith("images-"):
            out[f] = os.path.getsize(p)
    return out


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


# ---------------------------------------------------------------------------------------------
# Report


def slope(ns, vs):
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, vs) if v and v > 0]
    if len(pts) < 2:
        return None
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def summarize(results, sizes):
    names = []
    for n in sizes:
        for k in results[str(n)]["phases"]:
            if k not in names:
                names.append(k)
    lo, hi = str(min(sizes)), str(max(sizes))
    summary = {}
    for k in names:
        have = [n for n in sizes if k in results[str(n)]["phases"]]
        t = [results[str(n)]["phases"][k]["wall_s"] for n in have]
        m = [results[str(n)]["phases"][k]["maxrss_kib"] for n in have]
        s = {"time_slope": slope(have, t), "maxrss_slope": slope(have, m),
             # the last two sizes: at the smallest N a process's fixed start-up weighs most,
             # so the fit over every size understates where the cost is heading
             "time_slope_top": slope(have[-2:], t[-2:]) if len(have) > 2 else None}
        if lo != hi and k in results[lo]["phases"] and k in results[hi]["phases"]:
            a_, b_ = results[lo]["phases"][k], results[hi]["phases"][k]
            dn = int(hi) - int(lo)
            s["maxrss_b_per_sample"] = round((b_["maxrss_kib"] - a_["maxrss_kib"]) * 1024 / dn, 1)
            s["anon_b_per_sample"] = round((b_["anon_kib"] - a_["anon_kib"]) * 1024 / dn, 1)
        summary[k] = s
    return names, summary


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(results, sizes, names, summary):
    head = f"{'phase':13s}" + "".join(f" | N={n:<8d} s   maxrss  anon" for n in sizes)
    head += " | slope t  (top)  slope rss  B/sample rss  anon"
    print(head)
    print("-" * len(head))
    for k in names:
        line = f"{k:13s}"
        for n in sizes:
            d = results[str(n)]["phases"].get(k)
            if d is None:
                line += f" | {'':25s}"
            else:
                line += (f" | {d['wall_s']:8.3f} {d['maxrss_kib'] / 1024:7.1f}M "
                         f"{d['anon_kib'] / 1024:6.1f}M")
        s = summary[k]
        line += (f" | {fmt(s['time_slope'], '7.3f')} {fmt(s.get('time_slope_top'), '6.3f')} "
                 f"{fmt(s['maxrss_slope'], '9.3f')} "
                 f"{fmt(s.get('maxrss_b_per_sample'), '12.1f')} "
                 f"{fmt(s.get('anon_b_per_sample'), '6.1f')}")
        print(line)


def print_goals(results, sizes, summary, coco):
    """Each phase against issue 33's goals; the 1.28M goals are judged at the largest N run."""
    top = str(max(sizes))
    print(f"goals (issue 33), at N = {', '.join(str(n) for n in sizes)}:")
    for k, s in summary.items():
        d = results[top]["phases"].get(k)
        notes = []
        t = s["time_slope"]
        if t is not None:
            notes.append(f"time slope {t:.2f} {'<=' if t <= 1.05 else '>'} 1.05")
        top_t = s.get("time_slope_top")
        if top_t is not None:
            notes.append(f"(last two sizes: {top_t:.2f})")
        for key in ("maxrss_b_per_sample", "anon_b_per_sample"):
            v = s.get(key)
            if v is not None:
                window = " (build: in-flight window exempt)" if "build" in k else ""
                notes.append(f"{key.split('_')[0]} {v:.0f} B/sample "
                             f"{'<=' if v <= 64 else '>'} 64{window}")
        if k in STARTUP and d:
            notes.append(f"{d['wall_s']:.2f} s at N={top} (goal <= 1 s at 1.28M)")
        if k == "merge" and d and "merge_over_copy" in d:
            notes.append(f"merge / cp -r = {d['merge_over_copy']:.2f} at N={top} (goal <= 2 at "
                         f"1.28M)")
        print(f"  {k:13s} " + "; ".join(notes))
    for c in coco or ():
        for k, d in c["phases"].items():
            print(f"  {k:13s} {d['maxrss_kib'] / 1024:.0f} MiB peak at {c['images']} images / "
                  f"{c['annotations']} annotations (goal <= 1 GB at 118,287 / 860,001)")
    if coco and len(coco) >= 2 and coco[-1]["annotations"] < 860001:
        lo, hi = coco[0], coco[-1]
        for k in hi["phases"]:
            a_, b_ = lo["phases"][k]["maxrss_kib"], hi["phases"][k]["maxrss_kib"]
            per = (b_ - a_) / (hi["annotations"] - lo["annotations"])
            est = b_ + per * (860001 - hi["annotations"])
            print(f"  {k:13s} linear extrapolation (not measured) to 860,001 annotations: "
                  f"~{est / 1024:.0f} MiB ({per * 1024:.0f} B per annotation, images in step)")


def chart(path, results, sizes, names, summary, two_points):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 8))
    for ax, key, scale, label, sk in ((axes[0], "wall_s", 1, "wall time (s)", "time_slope"),
                                      (axes[1], "maxrss_kib", 1 / 1024, "peak RSS (MiB)",
                                       "maxrss_slope")):
        colors = plt.get_cmap("tab20").colors
        for j, k in enumerate(names):
            have = [n for n in sizes if k in results[str(n)]["phases"]]
            vals = [results[str(n)]["phases"][k][key] * scale for n in have]
            s = summary[k][sk]
            ax.plot(have, vals, marker="osD^v"[j % 5], linestyle=("-", "--", ":")[j % 3],
                    color=colors[j % len(colors)],
                    label=f"{k} ({'-' if s is None else f'{s:.2f}'})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("samples N")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, title="phase (fitted slope" + (", from 2 points)" if two_points
                                                               else ")"),
                  title_fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3)
    axes[0].set_title("time against N")
    axes[1].set_title("peak RSS (ru_maxrss) against N")
    fig.suptitle("dscache scale (bench/scale.py, issue 33): " +
                 ", ".join(f"{n:,}" for n in sizes) + " samples")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")


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
