#!/usr/bin/python3
"""JPEG caches on real photographs, one run: size against raw, serving speed against the raw
cache, a full decode, and the seed's decode-in-__getitem__ recipe on the same files.

  1. photos   --source DIR (class folders of photos), or bench/make_photo_folder.py --count N
              into OUT/photos (real photographs from Debian's mate-backgrounds)
  2. caches   `dscache build SRC OUT/raw256 --size 256` and `... OUT/jpeg256 --size 256 --codec
              jpeg` (Q90): the stored bytes and their ratio (goal <= 0.25)
  3. serving  build/bench/jpeg_serve OUT/raw256 OUT/jpeg256 --sizes 224,64 --threads 2: the
              Loader with a random-resized crop + flip to 224 and to 64 from the raw cache, the
              JPEG cache decoded whole then cropped, and the JPEG cache with the serve-time
              savings (DCT scaling, cropped decode); goal reduced >= 1.5x full at each size
  4. codec    build/bench/jpeg_decode: the decoder alone on mate-backgrounds crops (same goal)
  5. seed     bench/serve_peers.py --recipes decode --workers 2 on raw caches built at 224 and
              64 from the same photos: a torch DataLoader whose __getitem__ cv2.imread()s the
              photo and resizes it to the size (what a PyTorch user writes without dscache)
  6. chart    images/s per mode and size -> --chart (PNG)

Every rate is printed with images/s per core (2 threads / workers). Run it on an idle machine
with Debian's /usr/bin/python3 (python3-torch, numpy, OpenCV, matplotlib).

Usage: jpeg_bench.py [--build-dir build] [--source DIR | --count 2000] [--out jpeg-bench-out]
                     [--seconds 3] [--json F] [--chart F]
"""
import argparse
import json
import os
import sys

from programs import built, checked_run
from hostinfo import host_info

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GOAL_SIZE = 0.25
GOAL_REDUCED = 1.5


def run(cmd, what):
    return checked_run("jpeg_bench", cmd, what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--source")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--out", default="jpeg-bench-out")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json")
    ap.add_argument("--chart")
    a = ap.parse_args()
    dscache, serve, codec = built("jpeg_bench", a.build_dir,
                                  ["tools/dscache", "bench/jpeg_serve", "bench/jpeg_decode"],
                                  "build with the jpeg feature first")
    os.makedirs(a.out, exist_ok=True)
    src = a.source
    if not src:
        src = os.path.join(a.out, "photos")
        if not os.path.isdir(src):
            run([sys.executable, os.path.join(HERE, "make_photo_folder.py"), src, "--count",
                 a.count], "make_photo_folder.py")
    caches = {}
    for name, opts in (("raw256", ["--size", 256]), ("jpeg256", ["--size", 256, "--codec", "jpeg"]),
                       ("raw224", ["--size", 224]), ("raw64", ["--size", 64])):
        caches[name] = os.path.join(a.out, name)
        run([dscache, "build", src, caches[name], "--force", "-q"] + opts, f"build {name}")

    serving = json.loads(run([serve, caches["raw256"], caches["jpeg256"], "--sizes", "224,64",
                              "--threads", 2, "--seconds", a.seconds], "jpeg_serve"))
    decoder = run([codec, "--images", 240, "--epochs", 3], "jpeg_decode")
    seed = {}
    for size in (224, 64):
        out = os.path.join(a.out, f"peers{size}.json")
        run([sys.executable, os.path.join(HERE, "serve_peers.py"), caches[f"raw{size}"],
             "--recipes", "decode", "--workers", 2, "--epochs", 1, "--max-seconds", 30,
             "--json", out], f"serve_peers at {size}")
        rows = json.load(open(out))["recipes"]
        seed[size] = max(r["samples_per_s"] for r in rows)

    ratio = serving["size_ratio_jpeg_to_raw"]
    print(f"{serving['samples']} photos at 256 px: raw {serving['raw_shard_bytes'] / 1e6:.1f} MB, "
          f"JPEG Q{serving['jpeg_quality']} {serving['jpeg_shard_bytes'] / 1e6:.1f} MB = "
          f"{ratio:.3f} of raw (goal <= {GOAL_SIZE}: {'met' if ratio <= GOAL_SIZE else 'MISSED'})")
    print(f"{'random-resized crop to':24s} {'raw cache':>12s} {'JPEG full':>12s} "
          f"{'JPEG reduced':>13s} {'seed decode':>12s}   images/s (per core)")
    for r in serving["rows"]:
        s = r["size"]
        cells = [r["raw_images_per_s"], r["full_decode_images_per_s"],
                 r["reduced_decode_images_per_s"], seed[s]]
        print(f"{s:<24d} " + " ".join(f"{c:7.0f} ({c / 2:4.0f})" for c in cells))
    for r in serving["rows"]:
        g = r["reduced_vs_full"]
        print(f"  {r['size']}: reduced / full {g:.2f}x (goal >= {GOAL_REDUCED}: "
              f"{'met' if g >= GOAL_REDUCED else 'MISSED'}), reduced / raw {r['reduced_vs_raw']:.2f}x, "
              f"reduced / seed {r['reduced_decode_images_per_s'] / seed[r['size']]:.1f}x")
    print("decoder alone (bench/jpeg_decode):")
    print(decoder.rstrip())
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": host_info(), "serving": serving, "seed_decode": seed,
                       "decoder": decoder}, f, indent=2)
    if a.chart:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        modes = ["raw cache", "JPEG, full decode", "JPEG, reduced decode", "seed: decode in getitem"]
        fig, ax = plt.subplots(figsize=(7, 3.2))
        for k, r in enumerate(serving["rows"]):
            vals = [r["raw_images_per_s"], r["full_decode_images_per_s"],
                    r["reduced_decode_images_per_s"], seed[r["size"]]]
            xs = [k * (len(modes) + 1) + i for i in range(len(modes))]
            bars = ax.bar(xs, vals, color=["#777", "#c96", "#396", "#a44"])
            for x, v in zip(xs, vals):
                ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks([k * (len(modes) + 1) + 1.5 for k in range(len(serving["rows"]))])
        ax.set_xticklabels([f"random-resized crop to {r['size']}" for r in serving["rows"]])
        ax.set_ylabel("images/s (2 threads)")
        ax.legend(bars, modes, fontsize=7, loc="upper left")
        ax.set_title(f"{serving['samples']} photos, 256 px; JPEG Q{serving['jpeg_quality']} = "
                     f"{ratio:.3f} of raw", fontsize=9)
        fig.tight_layout()
        fig.savefig(a.chart, dpi=120)
        print(f"wrote {a.chart}")


if __name__ == "__main__":
    main()
