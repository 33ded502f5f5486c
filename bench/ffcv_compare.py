#!/usr/bin/python3
"""dscache against FFCV, side by side in one run: serving, random-resized crops and build time.

FFCV is not a dependency of dscache and its code is not in this repository: --ffcv-path names a
folder holding its `ffcv` package with the C extension built (docs/BENCHMARKS.md, "FFCV side by
side", says how it was fetched and built with Debian's python3-numba and libturbojpeg).

  1. source   OUT/photos: bench/make_photo_folder.py --count N (real-photo JPEGs), reused if present
  2. caches   dscache build: raw SxS (--size, default 64), raw JxJ and JPEG JxJ (--jpeg-size,
              default 256, quality 90); the FFCV .beton files are written from the very same
              pixels (read back through dscache.Cache), in the same order: raw-S.beton
              (RGBImageField raw + IntField) and jpg-J.beton (RGBImageField jpg, jpeg_quality 90,
              encoded by FFCV's own cv2.imencode path)
  3. serve    fixed-size raw SxS samples, batch --batch, random order, whole epochs:
                FFCV Loader(order=RANDOM, os_cache True/False, num_workers W, batches_ahead 3),
                  pipelines image [SimpleRGBImageDecoder(), ToTensor()],
                  label [IntDecoder(), ToTensor()]
                dscache.Loader(shuffle=True, workers W).torch(), copy=True (its default) and
                  copy=False (a reused ring, like FFCV's batch slots)
  4. crop     random-resized crops to --crop x --crop from the JPEG caches (scale (0.08, 1),
              ratio (3/4, 4/3), no flip), the same grid of settings:
                FFCV RandomResizedCropRGBImageDecoder((C, C)) + ToTensor
                dscache.Loader(transform=dscache.Transform("random_resized", C))
  5. build    the photo folder to SxS samples (cover + centre crop, INTER_AREA), W workers:
                dscache build SRC OUT/b --size S --threads W (the process's wall time)
                FFCV DatasetWriter(num_workers=W).from_indexed_dataset over a Dataset that does
                  cv2.imread + the same resize (the writer call only: imports not counted)
Every row is built once and warmed with one untimed epoch (FFCV compiles its pipeline with numba
then), then --rounds rounds each time every row once, in a rotating order, so load from other
processes falls on every row alike. A row's figure is samples over the seconds of whole epochs
run until --min-seconds have passed. Medians over rounds are reported with their range, the
1-minute load average at every row, and the ratio of dscache's best row to FFCV's best row,
against the goals (serve >= 2x, crops >= 1.5x). Speed goals are printed, never asserted.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/ffcv_compare.py --ffcv-path DIR
           [--dscache build/tools/dscache] [--out ffcv-compare-out] [--count 3000] [--size 64]
           [--jpeg-size 256] [--crop 224] [--batch 256] [--workers 1,2] [--rounds 5]
           [--build-rounds 3] [--min-seconds 1.0] [--parts serve,crop,build] [--json F]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from hostinfo import host_info  # noqa: E402

GOAL_SERVE = 2.0
GOAL_CROP = 1.5
# Loaders stay alive until the process ends (os._exit): numba's dispatcher finalizers raise
# KeyError noise when FFCV's compiled pipelines are collected mid-run.
KEEP = []


def die(msg, code=1):
    print(f"ffcv_compare: {msg}", file=sys.stderr)
    sys.exit(code)


def load1():
    return round(os.getloadavg()[0], 2)


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            words = set(f.read().split())
    except OSError:
        return []
    return sorted(w for w in ("avx2", "avx512f", "avx512_bf16") if w in words)


def run(cmd, what):
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        die(f"{what} failed (exit {p.returncode})")
    return time.perf_counter() - t0


def import_ffcv(path):
    if not os.path.isdir(os.path.join(path, "ffcv")):
        die(f"--ffcv-path {path}: no ffcv/ package folder there", 2)
    sys.path.insert(0, os.path.abspath(path))
    try:
        import ffcv  # noqa: F401
        from ffcv.loader import Loader, OrderOption  # noqa: F401
    except Exception as e:  # an unbuilt _libffcv, a missing numba: say which
        die(f"cannot import FFCV from {path}: {type(e).__name__}: {e} (is _libffcv built? "
            "python3-numba, libturbojpeg0-dev installed?)", 2)


# ---- data -------------------------------------------------------------------------------------

class CacheDataset:
    """(image RGB uint8, label) from a dscache cache: the FFCV writer's input."""

    def __init__(self, path):
        self.path = path
        self.cache = None
        import dscache
        self.n = dscache.Cache(path).count

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.cache is None:  # opened in each writer process, after the fork
            import dscache
            self.cache = dscache.Cache(self.path)
        img, label = self.cache[int(i)]
        return img, int(label)


class PhotoDataset:
    """The FFCV user's build recipe: cv2.imread, cover + centre crop with INTER_AREA, RGB."""

    def __init__(self, root, size):
        self.size = size
        self.items = []
        for ci, cls in enumerate(sorted(os.listdir(root))):
            for name in sorted(os.listdir(os.path.join(root, cls))):
                self.items.append((os.path.join(root, cls, name), ci))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import cv2
        path, label = self.items[i]
        img = cv2.imread(path, cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"{path}: cannot decode")
        h, w = img.shape[:2]
        s = self.size / min(h, w)
        nh, nw = max(self.size, round(h * s)), max(self.size, round(w * s))
        img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA)
        y, x = (nh - self.size) // 2, (nw - self.size) // 2
        img = img[y:y + self.size, x:x + self.size]
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB), label


def write_beton(path, dataset, mode, workers, quality=90):
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    writer = DatasetWriter(path, {"image": RGBImageField(write_mode=mode, jpeg_quality=quality),
                                  "label": IntField()}, num_workers=workers)
    t0 = time.perf_counter()
    with open(os.devnull, "w") as devnull:  # the writer's tqdm bar goes to stderr
        saved, sys.stderr = sys.stderr, devnull
        try:
            writer.from_indexed_dataset(dataset)
        finally:
            sys.stderr = saved
    return time.perf_counter() - t0


# ---- rows -------------------------------------------------------------------------------------

class Row:
    """One configuration: make() builds its loader once; epoch() runs one epoch, returns samples."""

    def __init__(self, name, side, settings, make, expect):
        self.name, self.side, self.settings, self.make = name, side, settings, make
        self.expect = expect  # samples per epoch: both sides drop the last partial batch
        self.loader = None
        self.rates, self.loads = [], []

    def epoch(self):
        n = 0
        if self.side == "ffcv":
            for images, labels in self.loader:
                n += images.shape[0]
        else:
            for images, labels in self.loader.torch():
                n += images.shape[0]
        if n != self.expect:
            die(f"{self.name}: an epoch served {n} samples, expected {self.expect}")
        return n

    def measure(self, min_seconds):
        self.loads.append(load1())
        t0 = time.perf_counter()
        n = 0
        while True:
            n += self.epoch()
            dt = time.perf_counter() - t0
            if dt >= min_seconds:
                return n / dt


def ffcv_rows(beton, decoder, batch, workers, expect):
    from ffcv.fields.basics import IntDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import ToTensor
    rows = []
    for os_cache in (True, False):
        for w in workers:
            def make(os_cache=os_cache, w=w):
                return Loader(beton, batch_size=batch, num_workers=w, order=OrderOption.RANDOM,
                              os_cache=os_cache, seed=0, drop_last=True,
                              pipelines={"image": [decoder(), ToTensor()],
                                         "label": [IntDecoder(), ToTensor()]})
            rows.append(Row(f"ffcv os_cache={os_cache} workers={w}", "ffcv",
                            {"os_cache": os_cache, "workers": w}, make, expect))
    return rows


def dscache_rows(cache, batch, workers, expect, transform=None):
    import dscache
    rows = []
    configs = [(w, True) for w in workers] + [(max(workers), False)]
    for w, copy in configs:
        def make(w=w, copy=copy):
            return dscache.Loader(dscache.Cache(cache), batch_size=batch, shuffle=True, seed=0,
                                  workers=w, drop_last=True, copy=copy, transform=transform)
        rows.append(Row(f"dscache workers={w} copy={copy}", "dscache",
                        {"workers": w, "copy": copy}, make, expect))
    return rows


def summarize(rows):
    out = []
    for r in rows:
        out.append({"name": r.name, "side": r.side, "settings": r.settings,
                    "median": statistics.median(r.rates), "min": min(r.rates),
                    "max": max(r.rates), "rates": [round(x, 1) for x in r.rates],
                    "load1": r.loads})
    return out


def ratio_of(table, goal):
    best = {s: max((r for r in table if r["side"] == s), key=lambda r: r["median"])
            for s in ("dscache", "ffcv")}
    ratio = best["dscache"]["median"] / best["ffcv"]["median"]
    return {"ratio": ratio, "goal": goal, "pass": ratio >= goal,
            "dscache_best": best["dscache"]["name"], "ffcv_best": best["ffcv"]["name"]}


def print_table(title, table, unit="samples/s"):
    print(f"\n{title} (median [min-max] {unit}, 1-min load at each round)")
    for r in table:
        print(f"  {r['name']:<34} {r['median']:>10.0f} [{r['min']:.0f}-{r['max']:.0f}]"
              f"  load {r['load1']}")


def run_rounds(rows, rounds, min_seconds, what):
    for r in rows:
        r.loader = r.make()
        r.epoch()  # warm-up: FFCV's numba compile, page cache, dscache's first mapping
    for k in range(rounds):
        order = rows[k % len(rows):] + rows[:k % len(rows)]
        for r in order:
            r.rates.append(r.measure(min_seconds))
        print(f"  {what} round {k + 1}/{rounds} done (load {load1()})", flush=True)
    KEEP.extend(rows)  # see KEEP
    return summarize(rows)


# ---- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ffcv-path", required=True,
                    help="folder holding FFCV's ffcv/ package with _libffcv built")
    ap.add_argument("--dscache", default=os.path.join(REPO, "build", "tools", "dscache"))
    ap.add_argument("--out", default="ffcv-compare-out")
    ap.add_argument("--count", type=int, default=3000, help="photos (default 3000)")
    ap.add_argument("--size", type=int, default=64, help="fixed raw sample side (default 64)")
    ap.add_argument("--jpeg-size", type=int, default=256,
                    help="stored side of the JPEG caches (default 256)")
    ap.add_argument("--crop", type=int, default=224, help="random-resized crop output side")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", default="1,2", help="worker counts for both (default 1,2)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build-rounds", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=1.0,
                    help="least seconds of whole epochs per measurement (default 1)")
    ap.add_argument("--parts", default="serve,crop,build")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    workers = [int(x) for x in a.workers.split(",") if x]
    parts = set(a.parts.split(","))
    unknown = parts - {"serve", "crop", "build"}
    if unknown:
        die(f"--parts: unknown {sorted(unknown)} (serve, crop, build)", 2)
    binary = os.path.abspath(a.dscache)
    if not os.access(binary, os.X_OK):
        die(f"dscache binary {binary} not found (meson compile -C build, or --dscache PATH)", 2)
    try:
        import dscache
    except ImportError as e:
        die(f"cannot import dscache ({e}): run with PYTHONPATH=build/python", 2)
    import_ffcv(a.ffcv_path)
    import cv2  # noqa: F401  (before the writers fork)

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    photos = os.path.join(out, "photos")
    if not (os.path.isdir(photos) and os.listdir(photos)):
        run([sys.executable, os.path.join(HERE, "make_photo_folder.py"), photos, "--count",
             str(a.count)], "make_photo_folder.py")

    def build(name, *opts):
        path = os.path.join(out, name)
        if not os.path.exists(os.path.join(path, "manifest.json")):
            run([binary, "build", photos, path, "--quiet", *opts], f"dscache build {name}")
        return path

    result = {"machine": host_info(), "cpu_flags": cpu_flags(), "ffcv_path": a.ffcv_path,
              "args": vars(a), "load1_start": load1()}
    print(f"machine: {result['machine']}\ncpu flags: {result['cpu_flags']}  "
          f"load {result['load1_start']}")

    if "serve" in parts:
        raw = build(f"raw{a.size}", "--size", str(a.size))
        beton = os.path.join(out, f"raw{a.size}.beton")
        if not os.path.exists(beton):
            write_beton(beton, CacheDataset(raw), "raw", max(workers))
        check_same_pixels(raw, beton)
        from ffcv.fields.rgb_image import SimpleRGBImageDecoder
        expect = dscache.Cache(raw).count // a.batch * a.batch
        rows = (ffcv_rows(beton, SimpleRGBImageDecoder, a.batch, workers, expect)
                + dscache_rows(raw, a.batch, workers, expect))
        table = run_rounds(rows, a.rounds, a.min_seconds, "serve")
        print_table(f"serve: fixed {a.size}x{a.size} raw, batch {a.batch}", table)
        result["serve"] = {"rows": table, "goal": ratio_of(table, GOAL_SERVE)}

    if "crop" in parts:
        j = a.jpeg_size
        raw_j = build(f"raw{j}", "--size", str(j))
        jpeg_j = build(f"jpeg{j}", "--size", str(j), "--codec", "jpeg:90")
        beton = os.path.join(out, f"jpg{j}.beton")
        if not os.path.exists(beton):
            write_beton(beton, CacheDataset(raw_j), "jpg", max(workers), quality=90)
        from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder

        def decoder():
            return RandomResizedCropRGBImageDecoder((a.crop, a.crop))
        t = dscache.Transform(crop="random_resized", size=a.crop)
        expect = dscache.Cache(jpeg_j).count // a.batch * a.batch
        rows = (ffcv_rows(beton, decoder, a.batch, workers, expect)
                + dscache_rows(jpeg_j, a.batch, workers, expect, transform=t))
        table = run_rounds(rows, a.rounds, a.min_seconds, "crop")
        print_table(f"crop: JPEG {j}x{j} q90 -> random-resized {a.crop}x{a.crop}", table)
        result["crop"] = {"rows": table, "goal": ratio_of(table, GOAL_CROP),
                          "stored_bytes": {"dscache_jpeg": dir_bytes(jpeg_j),
                                           "ffcv_beton": os.path.getsize(beton)}}

    if "build" in parts:
        result["build"] = build_rounds(a, binary, photos, out, workers)

    result["load1_end"] = load1()
    try:
        import numba
        result["numba"] = {"version": numba.__version__,
                           "threading_layer": numba.threading_layer()}
    except Exception:  # no parallel FFCV row ran: numba picked no layer yet
        pass
    print(f"numba: {result.get('numba')}")
    print("\ngoals (dscache's best row / FFCV's best row, medians):")
    for part, label in (("serve", "serve fixed raw"), ("crop", "random-resized crops")):
        if part in result:
            g = result[part]["goal"]
            print(f"  {'PASS' if g['pass'] else 'MISS'}  {label}: {g['ratio']:.2f}x "
                  f"(goal >= {g['goal']:g}x; {g['dscache_best']} vs {g['ffcv_best']})")
    if "build" in result:
        b = result["build"]
        print(f"  ----  build: dscache {b['dscache_best_s']:.2f} s vs FFCV "
              f"{b['ffcv_best_s']:.2f} s = {b['ffcv_best_s'] / b['dscache_best_s']:.2f}x "
              "(no goal)")
    print(f"load average at start {result['load1_start']}, at end {result['load1_end']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {a.json}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the finalizers of the loaders in KEEP


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def check_same_pixels(raw, beton):
    """FFCV serves what dscache serves: sample 0..B-1 in sequential order, byte for byte."""
    import dscache
    import numpy as np
    from ffcv.fields.basics import IntDecoder
    from ffcv.fields.rgb_image import SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import ToTensor
    loader = Loader(beton, batch_size=16, num_workers=1, order=OrderOption.SEQUENTIAL,
                    pipelines={"image": [SimpleRGBImageDecoder(), ToTensor()],
                               "label": [IntDecoder(), ToTensor()]})
    images, labels = next(iter(loader))
    cache = dscache.Cache(raw)
    for i in range(images.shape[0]):
        img, label = cache[i]
        if not (np.array_equal(images[i].numpy(), img) and int(labels[i]) == int(label)):
            die(f"{beton}: sample {i} differs from {raw}'s; the comparison would be unfair")
    print(f"checked: {beton} serves the same pixels and labels as {raw} (first 16 samples)")


def build_rounds(a, binary, photos, out, workers):
    ds = PhotoDataset(photos, a.size)
    n = len(ds)
    rows = {}
    for k in range(a.build_rounds):
        for w in (workers if k % 2 == 0 else workers[::-1]):
            for side in (("dscache", "ffcv") if k % 2 == 0 else ("ffcv", "dscache")):
                key = f"{side} workers={w}"
                load = load1()
                if side == "dscache":
                    dst = os.path.join(out, "b-dscache")
                    shutil.rmtree(dst, ignore_errors=True)
                    s = run([binary, "build", photos, dst, "--size", str(a.size), "--threads",
                             str(w), "--quiet"], "dscache build")
                else:
                    dst = os.path.join(out, "b-ffcv.beton")
                    s = write_beton(dst, ds, "raw", w)
                rows.setdefault(key, {"seconds": [], "load1": []})
                rows[key]["seconds"].append(round(s, 3))
                rows[key]["load1"].append(load)
        print(f"  build round {k + 1}/{a.build_rounds} done (load {load1()})", flush=True)
    print(f"\nbuild: {n} photos -> {a.size}x{a.size} raw (median [min-max] s, images/s)")
    table = []
    for key, r in rows.items():
        med = statistics.median(r["seconds"])
        table.append({"name": key, "median_s": med, "min_s": min(r["seconds"]),
                      "max_s": max(r["seconds"]), "images_per_s": n / med, **r})
        print(f"  {key:<22} {med:>7.2f} s [{min(r['seconds']):.2f}-{max(r['seconds']):.2f}]"
              f" {n / med:>8.0f} images/s  load {r['load1']}")
    best = {s: min(t["median_s"] for t in table if t["name"].startswith(s))
            for s in ("dscache", "ffcv")}
    return {"rows": table, "images": n, "dscache_best_s": best["dscache"],
            "ffcv_best_s": best["ffcv"]}


if __name__ == "__main__":
    main()
