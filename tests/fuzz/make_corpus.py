#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz/ (corpus/<target>/) from real files.

Usage: make_corpus.py BUILDDIR     (a normal build: BUILDDIR/tools/dscache and the
                                    BUILDDIR/tests/fuzz/fuzz_*_corpus drivers must exist)

- manifest, npy_header: the files `dscache build` writes for fixed, ragged, JPEG, HDF5 and
  partitioned builds of a few generated images, plus headers NumPy writes (v1, v2, v3).
- idx, source_list, table, image_header, jpeg_decode: small files as users have them (OpenCV, PIL,
  NumPy, gzip).
- ragged_index, jpeg_index, lazy_cache, cache_open: the targets mutate caches they write
  themselves; run with DSCACHE_FUZZ_SEEDS=DIR they write those caches' files as seeds.

Deterministic: the same build writes the same bytes. Files a fuzzer found (crash-*, and the
regressions it minimized) live beside the seeds and are kept: this only adds and overwrites
the seed-*/valid-*/kind* files.
"""

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import cv2
import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def images(root):
    rng = np.random.default_rng(3)
    for c, cls in enumerate(["cat", "dog"]):
        os.makedirs(os.path.join(root, cls))
        for i, (h, w) in enumerate([(12, 9), (7, 15), (10, 10)]):
            px = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            ext = ".png" if (i + c) % 2 else ".jpg"
            cv2.imwrite(os.path.join(root, cls, f"{i}{ext}"), px)


def build_seeds(dscache, tmp):
    src = os.path.join(tmp, "src")
    images(src)
    builds = {
        "fixed": ["--size", "6x5"],
        "ragged": ["--layout", "ragged", "--max-side", "8"],
        "jpeg": ["--size", "8", "--codec", "jpeg:80"],
        "jpeg_ragged": ["--layout", "ragged", "--max-side", "8", "--codec", "jpeg"],
        "hdf5": ["--size", "4", "--storage", "hdf5", "--shard-size", "100"],
        "part": ["--size", "4", "--part", "1/2", "--shuffle", "7"],
        "grey": ["--size", "4", "--channels", "1", "--resize", "pad"],
    }
    for name, args in builds.items():
        out = os.path.join(tmp, name)
        r = subprocess.run([dscache, "build", src, out, "-q", "--threads", "1"] + args,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"make_corpus: build {name} failed ({r.stderr.strip()}); skipped")
            continue
        with open(os.path.join(out, "manifest.json"), "rb") as f:
            text = f.read()
        # The time, the temp dir and the files' mtimes (in the digest) change every build: pin
        # them so the corpus is reproducible.
        m = json.loads(text)
        m["created_utc"] = "2024-01-01T00:00:00Z"
        m["source"]["root"] = "/data/src"
        m["source"]["digest"] = "00000000000012ab"
        put("manifest", f"seed-{name}.json", json.dumps(m, indent=2).encode())
        for fn in sorted(os.listdir(out)):
            if fn.endswith(".npy"):
                with open(os.path.join(out, fn), "rb") as f:
                    data = f.read()
                put("npy_header", f"seed-{name}-{fn}", data[:160])


def numpy_seeds():
    arrays = {
        "u1-4d": np.zeros((2, 3, 4, 3), np.uint8),
        "i8-2d": np.arange(12, dtype="<i8").reshape(4, 3),
        "u8-1d": np.arange(5, dtype="<u8"),
        "f4-0d": np.array(1.5, dtype="<f4"),
        "f2-empty": np.zeros((0, 7), dtype="<f2"),
        "bool": np.array([True, False]),
        "i2-fortran": np.asfortranarray(np.zeros((3, 2), dtype="<i2")),
        "i4-big": np.zeros((1,) * 32, dtype="<i4"),
    }
    for name, a in arrays.items():
        for version in [(1, 0), (2, 0), (3, 0)]:
            if version != (1, 0) and name not in ("u1-4d", "i8-2d"):
                continue
            buf = io.BytesIO()
            np.lib.format.write_array(buf, a, version=version)
            put("npy_header", f"seed-numpy-{name}-v{version[0]}", buf.getvalue()[:256])


def idx_seeds():
    imgs = np.arange(2 * 3 * 4, dtype=np.uint8)
    idx3 = bytes([0, 0, 8, 3]) + (2).to_bytes(4, "big") + (3).to_bytes(4, "big") + \
        (4).to_bytes(4, "big") + imgs.tobytes()
    idx1 = bytes([0, 0, 8, 1]) + (2).to_bytes(4, "big") + bytes([3, 9])
    put("idx", "seed-images-idx3", idx3)
    put("idx", "seed-labels-idx1", idx1)
    put("idx", "seed-images-idx3.gz", gzip.compress(idx3, mtime=0))
    put("idx", "seed-labels-idx1.gz", gzip.compress(idx1, mtime=0))
    put("idx", "seed-empty-idx3", idx3[:4] + bytes(4) + idx3[8:16])


def list_seeds():
    lists = {
        "header.csv": "path,label\na.png,0\nb.jpg,1\n",
        "names.csv": 'a.png,cat\n"c d.png",dog\n"b.jpg",cat\n',
        "quotes.csv": '"a ""q"".png",1\n  b.jpg , 2 \r\n\n',
        "abs.csv": "/nonexistent/x.png,0\nb.jpg,0\n",
        "names.tsv": "path\tlabel\na.png\tdog\nc d.png\t0\n",
        "numbers.tsv": "a.png\t3\nb.jpg\t0\r\n",
        "table.csv": 'image_path,label,n,s,tags,m,caption\na.png,cat,3,0.5,x;y,a.png,"hi, you"\n'
                     "b.jpg,dog,,abc,,,\nc d.png,cat,-1,1e3,y\n",
        "table.jsonl": '{"image_path": "a.png", "label": 1, "n": 2, "tags": ["x", "y"]}\n'
                       '{"image_path": "b.jpg", "n": 1.5, "tags": [3], "m": "a.png"}\n',
    }
    for name, text in lists.items():
        put("source_list", f"seed-{name}", text.encode())


def table_seeds():
    """Byte 0: the options (fuzz_table.cpp), then a table; the hostile inputs of issue 38."""
    deep = "[" * 100000 + "1" + "]" * 100000
    tables = {
        "fields.csv": (1, 'image_path,label,n,tags,m,caption\na.png,cat,3,x;y,a.png,"hi, you"\n'
                          'b.jpg,dog,,y,,\n"c d.png",cat,-1,x,a.png,"two\r\nlines"\n'),
        "classes.csv": (3, "image_path,tags\na.png,x;y\nb.jpg,y\nc d.png,z\n"),
        "cr.csv": (0, "image_path,label,n\ra.png,cat,1\rb.jpg,dog,2\r"),
        "nul.csv": (0, "image_path,label,n\na.png\0x,cat,1\nb.jpg,dog,2\n"),
        "confine.csv": (5, "image_path,m,n\n../a.png,a.png,1\n/etc/passwd,../m.png,2\n"
                           "b.jpg,a.png,3\n"),
        "quotes.tsv": (0, 'image_path\tlabel\tcaption\na.png\t0\t"a\tb ""q"""\n'),
        "fields.jsonl": (1, '{"image_path": "a.png", "label": 1, "n": 2, "tags": ["x", "y"]}\n'
                            '{"image_path": "b.jpg\\u0000x", "n": 1.5, "tags": [3], "m": "a.png"}\n'),
        "bigint.jsonl": (0, '{"image_path": "a.png", "label": 123456789012345678901234567890}\n'
                            '{"image_path": "b.jpg", "label": -99999999999999999999}\n'),
        "deep.jsonl": (0, '{"image_path": "a.png"}\n{"image_path": "b.jpg", "s": ' + deep + "}\n"),
    }
    for name, (flags, text) in tables.items():
        put("table", f"seed-{name}", bytes([flags]) + text.encode())


def image_header_seeds():
    rng = np.random.default_rng(5)
    px = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    for ext in [".jpg", ".png", ".bmp", ".tiff", ".webp", ".ppm", ".pgm", ".pbm", ".jp2", ".hdr",
                ".ras", ".pam", ".exr"]:
        img = px.astype(np.float32) / 255 if ext in (".hdr", ".exr") else px
        if ext in (".pgm", ".pbm"):
            img = px[:, :, 0]
        try:
            ok, enc = cv2.imencode(ext, img)
        except cv2.error:
            ok = False
        if ok:
            put("image_header", f"seed{ext}", enc.tobytes())
    buf = io.BytesIO()
    Image.fromarray(px).convert("P").save(buf, "GIF")
    put("image_header", "seed.gif", buf.getvalue())
    buf = io.BytesIO()
    Image.fromarray(px).save(buf, "JPEG", exif=Image.Exif())
    put("image_header", "seed-exif.jpg", buf.getvalue())


def jpeg_seeds():
    rng = np.random.default_rng(9)
    grad = np.linspace(0, 255, 23 * 17 * 3).reshape(23, 17, 3).astype(np.uint8)
    noise = rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)
    img = Image.fromarray(grad)
    variants = {
        "420": dict(quality=85),
        "444": dict(quality=90, subsampling=0),
        "progressive": dict(quality=75, progressive=True),
        "optimized": dict(quality=60, optimize=True),
    }
    for name, kw in variants.items():
        buf = io.BytesIO()
        img.save(buf, "JPEG", **kw)
        put("jpeg_decode", f"seed-{name}.jpg", buf.getvalue())
    for name, im in [("grey", Image.fromarray(grad[:, :, 0])),
                     ("cmyk", img.convert("CMYK")),
                     ("tiny", Image.fromarray(noise[:1, :1]))]:
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=80)
        put("jpeg_decode", f"seed-{name}.jpg", buf.getvalue())
    ok, enc = cv2.imencode(".jpg", noise, [cv2.IMWRITE_JPEG_RST_INTERVAL, 1])
    if ok:
        put("jpeg_decode", "seed-restart.jpg", enc.tobytes())


def loader_options_seeds():
    """fuzz_loader_options: the Loader keywords packed as the target reads them. Defaults, each
    crop and shuffle, ranks, and every size issue 17 found (prefetch 2**32-1, batch x sample
    wrapping to 0, batch beyond memory, a million workers, NaN scales)."""
    import struct

    def pack(kind=0, batch=2, drop=0, shuffle=1, block=0, wblocks=4, bbytes=0, wbytes=0, rank=0,
             world=1, tail=0, workers=2, prefetch=2, crop=0, h=0, w=0, smin=0.08, smax=1.0,
             rmin=0.75, rmax=4 / 3, flip=0, seed=1, epoch=0):
        return struct.pack("<BIBBQQQQIIBHIBIIddddBQQ", kind, batch, drop, shuffle, block, wblocks,
                           bbytes, wbytes, rank, world, tail, workers, prefetch, crop, h, w, smin,
                           smax, rmin, rmax, flip, seed, epoch)

    seeds = {
        "defaults": pack(),
        "center": pack(crop=1, h=3, w=4, flip=1),
        "random_resized": pack(crop=2, h=4, w=4, flip=1, seed=7),
        "ragged_center": pack(kind=1, crop=1, h=4, w=4),
        "ragged_random": pack(kind=1, crop=2, h=5, w=3, epoch=3),
        "windowed": pack(shuffle=2, block=2, wblocks=2),
        "windowed_bytes": pack(shuffle=2, wblocks=0, bbytes=100, wbytes=300),
        "rank_drop": pack(rank=1, world=3, tail=1, drop=1, batch=1),
        "prefetch_wraps": pack(prefetch=2**32 - 1),
        "batch_times_sample_wraps": pack(batch=2**24, crop=1, h=2**20, w=2**20),
        "sample_wraps": pack(batch=1, crop=1, h=2**32 - 1, w=2**32 - 1),
        "batch_beyond_memory": pack(batch=2**31),
        "workers_million": pack(workers=65535),
        "nan_scale": pack(crop=2, h=4, w=4, smin=float("nan")),
        "empty": b"",
    }
    for name, data in seeds.items():
        put("loader_options", "seed-" + name, data)


def self_seeds(builddir):
    for target in ["ragged_index", "jpeg_index", "lazy_cache", "cache_open"]:
        exe = os.path.join(builddir, "tests", "fuzz", f"fuzz_{target}_corpus")
        if not os.path.exists(exe):
            print(f"make_corpus: {exe} not built; {target} seeds skipped")
            continue
        env = dict(os.environ, DSCACHE_FUZZ_SEEDS=os.path.join(CORPUS, target))
        subprocess.run([exe, "/dev/null"], env=env, check=True, capture_output=True)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    builddir = os.path.abspath(argv[1])
    dscache = os.path.join(builddir, "tools", "dscache")
    with tempfile.TemporaryDirectory() as tmp:
        build_seeds(dscache, tmp)
    numpy_seeds()
    idx_seeds()
    list_seeds()
    table_seeds()
    image_header_seeds()
    jpeg_seeds()
    loader_options_seeds()
    self_seeds(builddir)
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t}: {len(files)} files, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
