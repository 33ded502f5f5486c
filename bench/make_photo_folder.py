#!/usr/bin/python3
"""Builds a folder of real-photo JPEGs for the build benchmark: DIR/<class>/<i>.jpg.

Sources are the twelve photographs Debian ships in package `mate-backgrounds`
(/usr/share/backgrounds/mate/nature/*.jpg, 1280x1024 to 2560x1920). The GNOME 43 backgrounds
are rendered/vector art and the other MATE backgrounds are paintings or logos, so they are not
used. Each output image is a random region of one source photo (chosen round-robin over a
seeded shuffle), scaled with INTER_AREA to a random output size and saved as JPEG quality 90:

  long side   75 % uniform in [400, 600] px (ImageNet's typical 500x375), 25 % in [600, 1200]
  aspect      w/h log-uniform in [3/4, 16/9] (portrait to wide)
  region      a random window of that aspect covering 35-100 % of the largest that fits
  flip        horizontal, with probability 1/2

Class = index of the source photo (sorted by file name) mod 10, so there are 10 classes and
classes 0 and 1 hold two photos each. The same --seed gives the same files, byte for byte, with
the same OpenCV/libjpeg.

Usage: make_photo_folder.py DIR [--count 1500] [--seed 0] [--sources GLOB]
"""
import argparse
import glob
import json
import os
import sys

import cv2
import numpy as np

DEFAULT_SOURCES = "/usr/share/backgrounds/mate/nature/*.jpg"
NUM_CLASSES = 10


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="output folder (created; must be empty or absent)")
    ap.add_argument("--count", type=int, default=1500, help="images to write (default 1500)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--sources", default=DEFAULT_SOURCES,
                    help="glob of source photographs (default %(default)s)")
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    args = ap.parse_args()

    sources = sorted(glob.glob(args.sources))
    if not sources:
        sys.exit(f"make_photo_folder: no photographs match {args.sources}; "
                 "install mate-backgrounds (apt-get install -y mate-backgrounds)")
    if os.path.isdir(args.dir) and os.listdir(args.dir):
        sys.exit(f"make_photo_folder: {args.dir} exists and is not empty")
    photos = []
    for path in sources:
        img = cv2.imread(path, cv2.IMREAD_COLOR)
        if img is None:
            sys.exit(f"make_photo_folder: cannot read {path}")
        photos.append(img)

    rng = np.random.RandomState(args.seed)
    order = rng.permutation(len(photos))
    sizes = []
    total_bytes = 0
    for i in range(args.count):
        src_idx = int(order[i % len(photos)])
        src = photos[src_idx]
        sh, sw = src.shape[:2]
        if rng.rand() < 0.75:
            long_side = rng.randint(400, 601)
        else:
            long_side = rng.randint(600, 1201)
        aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(16 / 9))))  # w / h
        if aspect >= 1:
            ow, oh = long_side, max(1, round(long_side / aspect))
        else:
            oh, ow = long_side, max(1, round(long_side * aspect))
        # The largest window of this aspect inside the source, then a random share of it.
        max_w = min(sw, sh * aspect)
        frac = rng.uniform(0.35, 1.0)
        rw = max(1, int(max_w * frac))
        rh = max(1, min(sh, int(round(rw / aspect))))
        x = rng.randint(0, sw - rw + 1)
        y = rng.randint(0, sh - rh + 1)
        region = src[y:y + rh, x:x + rw]
        interp = cv2.INTER_AREA if (rw >= ow and rh >= oh) else cv2.INTER_CUBIC
        out = cv2.resize(region, (ow, oh), interpolation=interp)
        if rng.rand() < 0.5:
            out = out[:, ::-1]
        cls = src_idx % NUM_CLASSES
        cls_dir = os.path.join(args.dir, f"class{cls:02d}")
        os.makedirs(cls_dir, exist_ok=True)
        path = os.path.join(cls_dir, f"{i:05d}.jpg")
        ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(out),
                               [cv2.IMWRITE_JPEG_QUALITY, args.quality])
        if not ok:
            sys.exit(f"make_photo_folder: cannot encode {path}")
        with open(path, "wb") as f:
            f.write(buf.tobytes())
        sizes.append((ow, oh))
        total_bytes += len(buf)

    w = np.array([s[0] for s in sizes])
    h = np.array([s[1] for s in sizes])
    longs = np.maximum(w, h)
    summary = {
        "dir": os.path.abspath(args.dir),
        "count": args.count,
        "seed": args.seed,
        "sources": len(sources),
        "classes": NUM_CLASSES,
        "bytes": int(total_bytes),
        "mean_kib": round(total_bytes / max(1, args.count) / 1024, 1),
        "mean_wxh": [round(float(w.mean())), round(float(h.mean()))],
        "long_side_percentiles": {p: int(np.percentile(longs, p)) for p in (5, 25, 50, 75, 95)},
        "opencv": cv2.__version__,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
