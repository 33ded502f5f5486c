#!/usr/bin/python3
"""End-to-end and interop tests of the `dscache` command.

Usage: test_cli.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)

Each case generates its fixtures (real PNG/JPEG files written with OpenCV or PIL, idx files
written with numpy) in a fresh temporary directory, runs the binary and checks its output with
numpy, h5py and OpenCV. Exit 0 = pass, 1 = fail, 2 = unknown case. numpy, h5py, cv2 and PIL are
declared test dependencies: a missing one fails the case, it is never a skip.
"""

import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path

import cv2
import h5py
import numpy as np
from PIL import Image

DSCACHE = os.environ.get("DSCACHE", "")
TIMEOUT_S = 120


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


# --------------------------------------------------------------------------------------------
# XXH64 (seed 0 by default), pure Python, so the suite needs no xxhash module.

_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(h, v):
    h ^= _round(0, v)
    return (h * _P1 + _P4) & _M64


def xxh64(data, seed=0):
    data = bytes(data)
    n, i = len(data), 0
    if n >= 32:
        v1, v2 = (seed + _P1 + _P2) & _M64, (seed + _P2) & _M64
        v3, v4 = seed & _M64, (seed - _P1) & _M64
        lanes = struct.unpack_from("<%dQ" % (4 * (n // 32)), data, 0)
        for j in range(0, len(lanes), 4):
            v1 = _round(v1, lanes[j])
            v2 = _round(v2, lanes[j + 1])
            v3 = _round(v3, lanes[j + 2])
            v4 = _round(v4, lanes[j + 3])
        i = 32 * (n // 32)
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


def _xxh64_selftest():
    # Reference values from the xxHash project (seed 0).
    check(xxh64(b"") == 0xEF46DB3751D8E999, "xxh64 self-test ''")
    check(xxh64(b"a") == 0xD24EC4F1A98C6E5B, "xxh64 self-test 'a'")
    check(xxh64(b"abc") == 0x44BC2CF5AD770999, "xxh64 self-test 'abc'")


def file_xxh64(path):
    return "%016x" % xxh64(Path(path).read_bytes())


# --------------------------------------------------------------------------------------------
# Running the binary.

def run(args, expect_rc=0, env_extra=None, cwd=None, timeout=TIMEOUT_S):
    """Runs dscache with args; raises with stdout/stderr when the exit code is not expect_rc."""
    cmd = [DSCACHE] + [str(a) for a in args]
    env = dict(os.environ)
    env.pop("DSCACHE_TEST_KILL_AFTER_SHARDS", None)
    if env_extra:
        env.update(env_extra)
    try:
        p = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"command timed out after {timeout}s: {' '.join(cmd)}") from e
    p.stdout = p.stdout.decode("utf-8", "replace")
    p.stderr = p.stderr.decode("utf-8", "replace")
    if expect_rc is not None and p.returncode != expect_rc:
        raise Failure(
            f"command: {' '.join(cmd)}\nexpected exit {expect_rc}, got {p.returncode}\n"
            f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}")
    return p


def run_json(args, expect_rc=0):
    p = run(args, expect_rc)
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise Failure(f"{' '.join(map(str, args))}: stdout is not JSON: {p.stdout!r}") from e


def build(src, out, *opts, expect_rc=0, env_extra=None, timeout=TIMEOUT_S):
    return run(["build", src, out] + list(opts), expect_rc, env_extra=env_extra, timeout=timeout)


def partial_dir(out):
    out = Path(out)
    return out.parent / ("." + out.name + ".partial")


# --------------------------------------------------------------------------------------------
# Fixtures.

def rand_rgb(seed, h, w, c=3):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def smooth_rgb(seed, h, w):
    """A smooth picture (gradients + a blob): JPEG-friendly, not constant."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((h, w, 3), np.uint8)
    for ch in range(3):
        a, b, c = rng.uniform(-1, 1, 3)
        v = 128 + 100 * np.sin(a * x / 7 + b * y / 5 + c * 3)
        out[..., ch] = np.clip(v, 0, 255).astype(np.uint8)
    return out


def write_img(path, rgb, params=None):
    """Writes an RGB (or HxW grey) uint8/uint16 array with OpenCV; format from the extension."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = rgb if rgb.ndim == 2 else cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    ok = cv2.imwrite(str(path), arr, params or [])
    check(ok, f"fixture: cv2.imwrite failed for {path}")
    return path


def write_bytes(path, data):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def encode(ext, rgb):
    arr = rgb if rgb.ndim == 2 else cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(ext, arr)
    check(ok, f"fixture: cv2.imencode({ext}) failed")
    return buf.tobytes()


def imread_rgb(path, flags=cv2.IMREAD_COLOR):
    img = cv2.imread(str(path), flags)
    check(img is not None, f"fixture/reference: cv2.imread cannot read {path}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def imread_grey(path):
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    check(img is not None, f"reference: cv2.imread cannot read {path}")
    return img


def png_chunk(kind, payload):
    return (struct.pack(">I", len(payload)) + kind + payload
            + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF))


def huge_png_bytes(w, h):
    """A syntactically valid PNG whose header claims w x h RGB pixels (the data is tiny)."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat)
            + png_chunk(b"IEND", b""))


def make_simple_folder(root, classes, per_class, size, seed=0, ext=".png"):
    """classes x per_class random images of size (h, w); returns the relative paths in order."""
    h, w = size
    rels = []
    for ci, cls in enumerate(classes):
        for k in range(per_class):
            rel = f"{cls}/img{k:03d}{ext}"
            write_img(Path(root) / rel, rand_rgb(seed * 100003 + ci * 1009 + k, h, w))
            rels.append(rel)
    return rels


# --------------------------------------------------------------------------------------------
# Reading and checking a cache.

BASE_FILES = {"manifest.json", "labels.npy", "checksums.npy", "sources.jsonl", "skipped.jsonl"}


def load_manifest(out):
    p = Path(out) / "manifest.json"
    check(p.is_file(), f"{p} missing")
    return json.loads(p.read_text())


def read_jsonl(path):
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def class_counts_list(m):
    cc = m["class_counts"]
    if isinstance(cc, dict):
        return [cc.get(name, 0) for name in m["classes"]]
    return list(cc)


def load_shard(path):
    """Returns (images, labels or None) of one shard, npy or h5."""
    path = Path(path)
    if path.suffix == ".npy":
        arr = np.load(path, mmap_mode="r")
        check(isinstance(arr, np.memmap), f"{path}: numpy.load(mmap_mode='r') gave {type(arr)}")
        return np.array(arr), None
    with h5py.File(path, "r") as f:
        return f["images"][...], f["labels"][...]


def load_images(out, m=None):
    m = m or load_manifest(out)
    parts = [load_shard(Path(out) / s["file"])[0] for s in m["shards"]]
    return np.concatenate(parts) if parts else np.zeros([0] + m["shape"], np.uint8)


def load_labels(out):
    lab = np.load(Path(out) / "labels.npy")
    check(lab.dtype == np.dtype("<i8"), f"labels.npy dtype {lab.dtype}, want int64")
    return lab


def check_cache(out, storage="npy"):
    """Structural checks every built cache must pass; returns (manifest, images, labels)."""
    out = Path(out)
    m = load_manifest(out)
    check_eq(m.get("format_version"), 1, "manifest format_version")
    check_eq(m.get("layout"), "fixed", "manifest layout")
    check_eq(m.get("storage"), storage, "manifest storage")
    check_eq(m.get("dtype"), "uint8", "manifest dtype")
    H, W, C = m["shape"]
    check_eq(m.get("channel_order"), "RGB" if C == 3 else "L", "manifest channel_order")
    count = m["count"]
    check_eq(len(class_counts_list(m)), len(m["classes"]), "len(class_counts)")
    check_eq(sum(class_counts_list(m)), count, "sum(class_counts)")
    check(isinstance(m.get("tool_version"), str) and m["tool_version"], "manifest tool_version")
    check(isinstance(m.get("created_utc"), str) and m["created_utc"], "manifest created_utc")
    for key in ("height", "width", "channels", "resize", "reduced_decode", "max_pixels",
                "shard_bytes"):
        check(key in m["recipe"], f"manifest recipe lacks {key}: {m['recipe']}")
    check_eq([m["recipe"]["height"], m["recipe"]["width"], m["recipe"]["channels"]], [H, W, C],
             "recipe height/width/channels vs shape")
    for key in ("kind", "root", "labels", "entries", "digest"):
        check(key in m["source"], f"manifest source lacks {key}: {m['source']}")
    check(os.path.isabs(m["source"]["root"]), f"source.root not absolute: {m['source']['root']}")
    if isinstance(m["source"]["entries"], int):
        check_eq(m["source"]["entries"], count + m["skipped"], "source.entries vs count+skipped")

    # Shards: names, ranges, sizes, checksums.
    ext = ".npy" if storage == "npy" else ".h5"
    per_shard = max(1, m["recipe"]["shard_bytes"] // (H * W * C))
    first = 0
    for k, s in enumerate(m["shards"]):
        check_eq(s["file"], f"images-{k:05d}{ext}", f"shards[{k}].file")
        check_eq(s["first"], first, f"shards[{k}].first")
        want = min(per_shard, count - first)
        check_eq(s["count"], want, f"shards[{k}].count (per_shard {per_shard})")
        p = out / s["file"]
        check_eq(s["bytes"], p.stat().st_size, f"shards[{k}].bytes vs file size")
        check(re.fullmatch(r"[0-9a-fA-F]{16}", s["xxh64"]) is not None,
              f"shards[{k}].xxh64 not 16 hex digits: {s['xxh64']!r}")
        check_eq(s["xxh64"].lower(), file_xxh64(p), f"shards[{k}].xxh64 vs file")
        first += s["count"]
    check_eq(first, count, "sum of shard counts")
    for k in range(len(m["shards"]), len(m["shards"]) + 2):
        check(not (out / f"images-{k:05d}{ext}").exists(), f"stray shard images-{k:05d}{ext}")

    # Side files.
    files = m["files"]
    for key, name in (("labels", "labels.npy"), ("checksums", "checksums.npy"),
                      ("sources", "sources.jsonl"), ("skips", "skipped.jsonl")):
        ent = files[key]
        check_eq(ent["file"], name, f"files.{key}.file")
        p = out / name
        check(p.is_file(), f"{name} missing")
        check_eq(ent["bytes"], p.stat().st_size, f"files.{key}.bytes")
        check_eq(ent["xxh64"].lower(), file_xxh64(p), f"files.{key}.xxh64")
    expected_files = BASE_FILES | {s["file"] for s in m["shards"]}
    actual_files = {p.name for p in out.iterdir()}
    check_eq(sorted(actual_files), sorted(expected_files), "files in the cache directory")
    check(not partial_dir(out).exists(), f"{partial_dir(out)} left behind after success")

    images = []
    for s in m["shards"]:
        imgs, _ = load_shard(out / s["file"])
        check_eq(imgs.dtype, np.dtype(np.uint8), f"{s['file']} dtype")
        check_eq(list(imgs.shape), [s["count"], H, W, C], f"{s['file']} shape")
        images.append(imgs)
    images = np.concatenate(images) if images else np.zeros((0, H, W, C), np.uint8)
    labels = load_labels(out)
    check_eq(labels.shape, (count,), "labels.npy shape")
    if count:
        check(labels.min() >= 0 and labels.max() < len(m["classes"]), f"labels out of range {labels}")
    check_eq(np.bincount(labels, minlength=len(m["classes"])).tolist(), class_counts_list(m),
             "class_counts vs labels.npy")
    sums = np.load(out / "checksums.npy")
    check_eq(sums.dtype, np.dtype("<u8"), "checksums.npy dtype")
    check_eq(sums.shape, (count,), "checksums.npy shape")
    for i in range(count):
        want = xxh64(np.ascontiguousarray(images[i]).tobytes())
        check(int(sums[i]) == want,
              f"checksums.npy[{i}] = {int(sums[i]):016x}, xxh64 of sample = {want:016x}")
    sources = read_jsonl(out / "sources.jsonl")
    check_eq(len(sources), count, "lines in sources.jsonl")
    check(all(isinstance(s, str) for s in sources), "sources.jsonl lines must be JSON strings")
    skips = read_jsonl(out / "skipped.jsonl")
    check_eq(len(skips), m["skipped"], "lines in skipped.jsonl vs manifest skipped")
    for s in skips:
        check(isinstance(s, dict) and isinstance(s.get("source"), str)
              and isinstance(s.get("reason"), str) and s["reason"].strip(),
              f"skipped.jsonl entry {s!r} needs non-empty source and reason")
    return m, images, labels


def cache_files(out):
    return sorted(p.name for p in Path(out).iterdir())


def compare_caches(a, b, what):
    """All files byte-identical except manifest.json, which must be equal but for created_utc."""
    fa, fb = cache_files(a), cache_files(b)
    check_eq(fa, fb, f"{what}: file lists")
    for name in fa:
        if name == "manifest.json":
            ma, mb = load_manifest(a), load_manifest(b)
            ma.pop("created_utc", None)
            mb.pop("created_utc", None)
            if ma != mb:
                diff = [k for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)]
                raise Failure(f"{what}: manifest.json differs in {diff}: "
                              + "; ".join(f"{k}: {ma.get(k)!r} vs {mb.get(k)!r}" for k in diff))
        else:
            da, db = (Path(a) / name).read_bytes(), (Path(b) / name).read_bytes()
            if da != db:
                pos = next((i for i in range(min(len(da), len(db))) if da[i] != db[i]),
                           min(len(da), len(db)))
                raise Failure(f"{what}: {name} differs (sizes {len(da)} vs {len(db)}, "
                              f"first difference at byte {pos})")


def summary_mentions_skipped(stdout, n):
    for line in stdout.splitlines():
        if re.search(r"skip", line, re.I) and re.search(r"(?<!\d)%d(?!\d)" % n, line):
            return True
    return False


# --------------------------------------------------------------------------------------------
# Cases.

def case_folder_basic(tmp):
    src, out = tmp / "src", tmp / "out"
    # Class names sort by bytes: "Zebra" < "apple" < "cat" (a locale sort would differ).
    layout = {
        "Zebra/b.png": ("png", 40, 30),
        "Zebra/a.jpg": ("jpg", 50, 60),
        "Zebra/A.png": ("png", 32, 32),
        "apple/sub.png": ("png", 24, 32),
        "apple/sub/x.png": ("png", 70, 20),
        "apple/sub-a.jpg": ("jpg", 33, 47),
        "apple/sub/deeper/y.png": ("png", 16, 16),
        "cat/001.png": ("png", 24, 32),
        "cat/002.jpg": ("jpg", 100, 80),
    }
    ignored = ["apple/.hidden.png", "apple/.cache/z.png", ".hiddenclass/q.png", "stray.png",
               "cat/sub/.dot/w.png"]
    for k, (rel, (kind, h, w)) in enumerate(sorted(layout.items())):
        write_img(src / rel, smooth_rgb(k, h, w))
    for k, rel in enumerate(ignored):
        write_img(src / rel, smooth_rgb(100 + k, 20, 20))
    expected_sources = ["Zebra/A.png", "Zebra/a.jpg", "Zebra/b.png",
                        "apple/sub-a.jpg", "apple/sub.png", "apple/sub/deeper/y.png",
                        "apple/sub/x.png", "cat/001.png", "cat/002.jpg"]
    p = build(src, out, "--size", "24x32")
    check(out.is_dir(), "OUTPUT not created")
    m, images, labels = check_cache(out)
    check_eq(m["classes"], ["Zebra", "apple", "cat"], "classes")
    check_eq(class_counts_list(m), [3, 4, 2], "class_counts")
    check_eq(m["count"], 9, "count")
    check_eq(m["shape"], [24, 32, 3], "shape (--size 24x32 is HxW)")
    check_eq(labels.tolist(), [0, 0, 0, 1, 1, 1, 1, 2, 2], "labels.npy")
    check_eq(read_jsonl(out / "sources.jsonl"), expected_sources, "sources.jsonl order")
    check_eq(m["skipped"], 0, "skipped")
    check_eq(read_jsonl(out / "skipped.jsonl"), [], "skipped.jsonl")
    check_eq(m["source"]["kind"], "folder", "source.kind")
    check_eq(os.path.realpath(m["source"]["root"]), os.path.realpath(src), "source.root")
    r = m["recipe"]
    check_eq(r["resize"], "crop", "default resize")
    check_eq(r["channels"], 3, "default channels")
    check_eq(r["shard_bytes"], 1 << 30, "default shard_bytes")
    check_eq(r["max_pixels"], 100000000, "default max_pixels")
    check_eq(r["reduced_decode"], True, "default reduced_decode")
    check_eq(len(m["shards"]), 1, "number of shards")
    # No two samples identical (each came from a different picture).
    flat = {images[i].tobytes() for i in range(len(images))}
    check_eq(len(flat), 9, "distinct samples")
    # --size N means N x N.
    out2 = tmp / "out2"
    build(src, out2, "--size", "20", "--quiet")
    m2, _, _ = check_cache(out2)
    check_eq(m2["shape"], [20, 20, 3], "shape with --size 20")
    del p


def case_folder_pixels_interop_npy(tmp):
    src = tmp / "src"
    # Already 32x32 (no resize): PNG and JPEG, in two classes.
    same = {"a/p1.png": rand_rgb(1, 32, 32), "a/p2.jpg": smooth_rgb(2, 32, 32),
            "b/p3.png": smooth_rgb(3, 32, 32), "b/p4.png": rand_rgb(4, 32, 32)}
    for rel, img in same.items():
        write_img(src / rel, img)
    # Shrinks (INTER_AREA) and enlarges (INTER_LINEAR) under --resize stretch.
    write_img(src / "c/shrink.png", rand_rgb(5, 64, 48))
    write_img(src / "c/grow.png", rand_rgb(6, 16, 20))
    order = ["a/p1.png", "a/p2.jpg", "b/p3.png", "b/p4.png", "c/grow.png", "c/shrink.png"]

    out = tmp / "out"
    build(src, out, "--size", "32", "--resize", "stretch", "--shard-size", str(32 * 32 * 3 * 4))
    m, images, labels = check_cache(out)
    check_eq(len(m["shards"]), 2, "shards (4 samples per shard)")
    check_eq(read_jsonl(out / "sources.jsonl"), order, "sources order")
    check_eq(labels.tolist(), [0, 0, 1, 1, 2, 2], "labels")
    for s in m["shards"]:
        arr = np.load(out / s["file"], mmap_mode="r")
        check(isinstance(arr, np.memmap), f"{s['file']}: not memory-mapped by numpy")
        check_eq(arr.shape, (s["count"], 32, 32, 3), f"{s['file']} shape")
        check(arr.flags["C_CONTIGUOUS"], f"{s['file']} not C order")
    for i, rel in enumerate(order[:4]):
        ref = imread_rgb(src / rel)
        check(np.array_equal(images[i], ref),
              f"sample {i} ({rel}) differs from cv2.imread+BGR2RGB: max abs diff "
              f"{np.abs(images[i].astype(int) - ref).max()}")
    ref = cv2.resize(imread_rgb(src / "c/shrink.png"), (32, 32), interpolation=cv2.INTER_AREA)
    check(np.array_equal(images[5], ref), "c/shrink.png: stretch != cv2.resize INTER_AREA "
          f"(max abs diff {np.abs(images[5].astype(int) - ref).max()})")
    ref = cv2.resize(imread_rgb(src / "c/grow.png"), (32, 32), interpolation=cv2.INTER_LINEAR)
    check(np.array_equal(images[4], ref), "c/grow.png: stretch != cv2.resize INTER_LINEAR "
          f"(max abs diff {np.abs(images[4].astype(int) - ref).max()})")

    # Grey: --channels 1 equals IMREAD_GRAYSCALE (colour PNG, grey PNG, JPEG).
    gsrc = tmp / "gsrc"
    write_img(gsrc / "x/colour.png", rand_rgb(7, 32, 32))
    write_img(gsrc / "x/grey.png", rand_rgb(8, 32, 32, 1)[..., 0])
    write_img(gsrc / "y/photo.jpg", smooth_rgb(9, 32, 32))
    gout = tmp / "gout"
    build(gsrc, gout, "--size", "32", "--channels", "1")
    gm, gimages, _ = check_cache(gout)
    check_eq(gm["shape"], [32, 32, 1], "grey shape")
    check_eq(gm["channel_order"], "L", "grey channel_order")
    for i, rel in enumerate(["x/colour.png", "x/grey.png", "y/photo.jpg"]):
        ref = imread_grey(gsrc / rel)
        check(np.array_equal(gimages[i][..., 0], ref),
              f"grey sample {i} ({rel}) differs from IMREAD_GRAYSCALE: max abs diff "
              f"{np.abs(gimages[i][..., 0].astype(int) - ref).max()}")


def case_resize_modes(tmp):
    # 64 (h) x 128 (w) to 32x32: crop = scale 0.5 to 32x64, keep columns 16..48;
    # pad = scale 0.25 to 16x32, rows 8..24, black elsewhere. Both scales are exact.
    src = tmp / "src"
    img = rand_rgb(11, 64, 128)
    write_img(src / "k/wide.png", img)
    tall = rand_rgb(12, 96, 48)
    write_img(src / "k/zz_tall.png", tall)
    ref_wide = cv2.resize(img, (64, 32), interpolation=cv2.INTER_AREA)
    ref_tall_crop = cv2.resize(tall, (32, 64), interpolation=cv2.INTER_AREA)[16:48, :]
    for mode in ("crop", "pad", "stretch"):
        out = tmp / f"out_{mode}"
        build(src, out, "--size", "32", "--resize", mode)
        m, images, _ = check_cache(out)
        check_eq(m["recipe"]["resize"], mode, "recipe.resize")
        if mode == "crop":
            want = ref_wide[:, 16:48]
            want_tall = ref_tall_crop
        elif mode == "pad":
            want = np.zeros((32, 32, 3), np.uint8)
            want[8:24, :] = cv2.resize(img, (32, 16), interpolation=cv2.INTER_AREA)
            want_tall = np.zeros((32, 32, 3), np.uint8)
            small = cv2.resize(tall, (16, 32), interpolation=cv2.INTER_AREA)
            want_tall[:, 8:24] = small
        else:
            want = cv2.resize(img, (32, 32), interpolation=cv2.INTER_AREA)
            want_tall = cv2.resize(tall, (32, 32), interpolation=cv2.INTER_AREA)
        for got, ref, name in ((images[0], want, "wide.png"), (images[1], want_tall, "zz_tall.png")):
            check(np.array_equal(got, ref),
                  f"--resize {mode}: {name} differs from the reference: max abs diff "
                  f"{np.abs(got.astype(int) - ref).max()}, "
                  f"mismatching pixels {(got != ref).any(axis=2).sum()}")


def case_reduced_decode(tmp):
    src = tmp / "src"
    big = smooth_rgb(21, 256, 256)
    write_img(src / "a/big.jpg", big)
    out_r, out_f = tmp / "reduced", tmp / "full"
    build(src, out_r, "--size", "32")
    build(src, out_f, "--size", "32", "--no-reduced-decode")
    mr, ir, _ = check_cache(out_r)
    mf, imf, _ = check_cache(out_f)
    check_eq(mr["recipe"]["reduced_decode"], True, "recipe.reduced_decode default")
    check_eq(mf["recipe"]["reduced_decode"], False, "recipe.reduced_decode with --no-reduced-decode")
    ref = cv2.resize(imread_rgb(src / "a/big.jpg"), (32, 32), interpolation=cv2.INTER_AREA)
    check(np.array_equal(imf[0], ref), "--no-reduced-decode: sample != full decode + INTER_AREA "
          f"(max abs diff {np.abs(imf[0].astype(int) - ref).max()})")
    diff = np.abs(ir[0].astype(int) - ref).mean()
    check(diff < 4.0, f"reduced decode too far from the full decode: mean abs diff {diff}")


def case_hdf5_interop(tmp):
    src = tmp / "src"
    make_simple_folder(src, ["ant", "bee", "cow"], 4, (24, 24), seed=3)
    write_img(src / "bee/odd.jpg", smooth_rgb(31, 50, 40))
    shard = str(24 * 24 * 3 * 5)
    out_n, out_h = tmp / "npy", tmp / "h5"
    build(src, out_n, "--size", "24", "--shard-size", shard)
    build(src, out_h, "--size", "24", "--shard-size", shard, "--storage", "hdf5")
    mn, imn, ln = check_cache(out_n, "npy")
    mh, imh, lh = check_cache(out_h, "hdf5")
    check_eq(len(mh["shards"]), 3, "hdf5 shards (13 samples, 5 per shard)")
    check(np.array_equal(imn, imh), "hdf5 pixels differ from the npy build")
    check(np.array_equal(ln, lh), "hdf5 labels.npy differs from the npy build")
    check_eq((out_n / "checksums.npy").read_bytes(), (out_h / "checksums.npy").read_bytes(),
             "checksums.npy npy vs hdf5")
    check_eq((out_n / "sources.jsonl").read_bytes(), (out_h / "sources.jsonl").read_bytes(),
             "sources.jsonl npy vs hdf5")
    for s in mh["shards"]:
        path = out_h / s["file"]
        with h5py.File(path, "r") as f:
            ds = f["images"]
            check_eq(ds.shape, (s["count"], 24, 24, 3), f"{s['file']} images shape")
            check_eq(ds.dtype, np.dtype(np.uint8), f"{s['file']} images dtype")
            check(ds.chunks is None, f"{s['file']}: images is chunked {ds.chunks}")
            check(ds.compression is None, f"{s['file']}: images is compressed")
            off = ds.id.get_offset()
            check(off is not None, f"{s['file']}: images has no file offset (not allocated)")
            co = ds.attrs.get("channel_order")
            co = co.decode() if isinstance(co, bytes) else str(co)
            check_eq(co, "RGB", f"{s['file']} images.attrs['channel_order']")
            lab = f["labels"][...]
            check_eq(lab.dtype, np.dtype("int64"), f"{s['file']} labels dtype")
            check_eq(lab.tolist(), ln[s["first"]:s["first"] + s["count"]].tolist(),
                     f"{s['file']} labels")
            data = ds[...]
        # The contiguous data can be memory-mapped at its offset (how libcache reads it).
        mm = np.memmap(path, np.uint8, "r", offset=off, shape=(s["count"], 24, 24, 3))
        check(np.array_equal(mm, data), f"{s['file']}: mmap at get_offset() != h5py read")
    # Grey HDF5: channel_order "L".
    out_g = tmp / "h5grey"
    build(src, out_g, "--size", "24", "--storage", "hdf5", "--channels", "1")
    mg, img_g, _ = check_cache(out_g, "hdf5")
    with h5py.File(out_g / mg["shards"][0]["file"], "r") as f:
        co = f["images"].attrs.get("channel_order")
        co = co.decode() if isinstance(co, bytes) else str(co)
        check_eq(co, "L", "grey hdf5 channel_order")
        check_eq(f["images"].shape[1:], (24, 24, 1), "grey hdf5 sample shape")


def case_csv_list(tmp):
    root = tmp / "data"
    imgs = {}
    for k, rel in enumerate(["imgs/a.png", "imgs/b.png", "sub/c.png", "imgs/d.png", "e.png"]):
        imgs[rel] = rand_rgb(40 + k, 16, 16)
        write_img(root / rel, imgs[rel])
    rows = [("sub/c.png", 2), ("imgs/a.png", 0), ("e.png", 2), ("imgs/b.png", 0),
            ("imgs/d.png", 2)]
    lst = root / "list.csv"
    lst.write_text("path,label\n" + "".join(f"{p},{l}\n" for p, l in rows))
    out = tmp / "out"
    # Run from another directory: paths are relative to the list file's folder, not the cwd.
    p = run(["build", lst, out, "--size", "16", "--classes", "cat,dog,bird"], cwd=str(tmp))
    m, images, labels = check_cache(out)
    check_eq(m["source"]["kind"], "list", "source.kind")
    check_eq(m["classes"], ["cat", "dog", "bird"], "classes from --classes")
    check_eq(class_counts_list(m), [2, 0, 3], "class_counts")
    check_eq(labels.tolist(), [2, 0, 2, 0, 2], "labels (list order)")
    check_eq(read_jsonl(out / "sources.jsonl"), [r[0] for r in rows], "sources.jsonl")
    for i, (rel, _) in enumerate(rows):
        check(np.array_equal(images[i], imgs[rel]), f"sample {i} ({rel}) pixels")
    # Without --classes: classes are "0".."max".
    out2 = tmp / "out2"
    build(lst, out2, "--size", "16")
    m2, _, l2 = check_cache(out2)
    check_eq(m2["classes"], ["0", "1", "2"], "classes without --classes")
    check_eq(class_counts_list(m2), [2, 0, 3], "class_counts without --classes")
    check_eq(l2.tolist(), [2, 0, 2, 0, 2], "labels without --classes")
    del p


def case_tsv_list_names(tmp):
    root = tmp / "data"
    rows = [("x/1.png", "dog"), ("x/2.png", "cat"), ("y/3.png", "emu"), ("y/4.png", "cat"),
            ("z/5.png", "9"), ("z/6.png", "10")]
    for k, (rel, _) in enumerate(rows):
        write_img(root / rel, rand_rgb(60 + k, 8, 8))
    lst = root / "pairs.tsv"
    lst.write_text("".join(f"{p}\t{l}\n" for p, l in rows))  # no header line
    out = tmp / "out"
    build(lst, out, "--size", "8")
    m, _, labels = check_cache(out)
    # Not all labels are integers, so all are names, sorted by bytes.
    check_eq(m["classes"], ["10", "9", "cat", "dog", "emu"], "classes (sorted names)")
    check_eq(labels.tolist(), [3, 2, 4, 2, 1, 0], "labels")
    check_eq(class_counts_list(m), [1, 1, 2, 1, 1], "class_counts")
    check_eq(read_jsonl(out / "sources.jsonl"), [r[0] for r in rows], "sources.jsonl")


def case_list_missing_file(tmp):
    root = tmp / "data"
    for k, rel in enumerate(["a.png", "b.png", "c.png"]):
        write_img(root / rel, rand_rgb(70 + k, 8, 8))
    lst = root / "list.csv"
    lst.write_text("path,label\na.png,0\nmissing/nothere.png,1\nb.png,1\nc.png,0\n")
    out = tmp / "out"
    p = build(lst, out, "--size", "8")
    m, _, labels = check_cache(out)
    check_eq(m["count"], 3, "count")
    check_eq(m["skipped"], 1, "skipped")
    check_eq(labels.tolist(), [0, 1, 0], "labels")
    check_eq(read_jsonl(out / "sources.jsonl"), ["a.png", "b.png", "c.png"], "sources")
    skips = read_jsonl(out / "skipped.jsonl")
    check_eq([s["source"] for s in skips], ["missing/nothere.png"], "skipped sources")
    check(summary_mentions_skipped(p.stdout, 1),
          f"summary on stdout does not mention 1 skipped: {p.stdout!r}")
    # --strict makes the missing file fatal.
    out2 = tmp / "out2"
    p = build(lst, out2, "--size", "8", "--strict", expect_rc=3)
    check("nothere.png" in p.stderr, f"--strict stderr does not name the file: {p.stderr!r}")
    check(not out2.exists() and not partial_dir(out2).exists(), "--strict left output behind")


def idx_bytes(arr, magic_type=0x08):
    hdr = struct.pack(">BBBB", 0, 0, magic_type, arr.ndim) + b"".join(
        struct.pack(">I", d) for d in arr.shape)
    return hdr + arr.astype(np.uint8).tobytes()


def case_idx_source(tmp):
    rng = np.random.default_rng(80)
    n = 12
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = np.arange(n) % 10
    d = tmp / "mnist"
    d.mkdir()
    (d / "train-images-idx3-ubyte").write_bytes(idx_bytes(images))
    (d / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    out = tmp / "out"
    build(d / "train-images-idx3-ubyte", out)
    m, got, lab = check_cache(out)
    check_eq(m["source"]["kind"], "idx", "source.kind")
    check_eq(m["shape"], [28, 28, 1], "idx native shape, 1 channel")
    check_eq(m["count"], n, "count")
    check_eq(m["classes"], [str(i) for i in range(10)], "classes")
    check_eq(lab.tolist(), labels.tolist(), "labels")
    check(np.array_equal(got[..., 0], images), "idx pixels differ")
    check_eq(read_jsonl(out / "sources.jsonl"), [f"train-images-idx3-ubyte#{i}" for i in range(n)],
             "sources.jsonl")

    # .gz variant with gz labels.
    (d / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images[:5])))
    (d / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels[:5])))
    out_gz = tmp / "out_gz"
    build(d / "t10k-images-idx3-ubyte.gz", out_gz)
    mg, gg, lg = check_cache(out_gz)
    check_eq(mg["count"], 5, "gz count")
    check(np.array_equal(gg[..., 0], images[:5]), "gz pixels")
    check_eq(lg.tolist(), labels[:5].tolist(), "gz labels")
    check_eq(read_jsonl(out_gz / "sources.jsonl")[4], "t10k-images-idx3-ubyte.gz#4", "gz source")

    # --labels FILE for a non-conventional name.
    e = tmp / "other"
    e.mkdir()
    (e / "pics-idx3-ubyte").write_bytes(idx_bytes(images[:6]))
    custom = (labels[:6] + 3) % 10
    (e / "my.labels").write_bytes(idx_bytes(custom))
    out_l = tmp / "out_l"
    build(e / "pics-idx3-ubyte", out_l, "--labels", e / "my.labels")
    ml, _, ll = check_cache(out_l)
    check_eq(ll.tolist(), custom.tolist(), "labels from --labels")

    # --size 14 resizes (INTER_AREA); --channels 3 replicates grey.
    out_s = tmp / "out_s"
    build(d / "train-images-idx3-ubyte", out_s, "--size", "14")
    ms, gs, _ = check_cache(out_s)
    check_eq(ms["shape"], [14, 14, 1], "shape with --size 14")
    for i in range(n):
        ref = cv2.resize(images[i], (14, 14), interpolation=cv2.INTER_AREA)
        check(np.array_equal(gs[i][..., 0], ref), f"idx --size 14 sample {i} != INTER_AREA")
    out_c = tmp / "out_c"
    build(d / "train-images-idx3-ubyte", out_c, "--channels", "3")
    mc, gc, _ = check_cache(out_c)
    check_eq(mc["shape"], [28, 28, 3], "shape with --channels 3")
    for ch in range(3):
        check(np.array_equal(gc[..., ch], images), f"idx --channels 3: channel {ch} != grey")

    # Wrong magic -> error 1 naming the file.
    bad = tmp / "bad"
    bad.mkdir()
    raw = bytearray(idx_bytes(images[:2]))
    raw[2] = 0x0D  # float type code instead of ubyte
    raw[3] = 0x07
    (bad / "x-images-idx3-ubyte").write_bytes(bytes(raw))
    (bad / "x-labels-idx1-ubyte").write_bytes(idx_bytes(labels[:2]))
    p = build(bad / "x-images-idx3-ubyte", tmp / "out_bad", expect_rc=1)
    check("x-images-idx3-ubyte" in p.stderr, f"wrong magic: stderr does not name the file: "
          f"{p.stderr!r}")
    check(not (tmp / "out_bad").exists(), "wrong magic: OUTPUT created")
    # Missing labels sibling -> error 1 naming the expected labels file.
    lone = tmp / "lone"
    lone.mkdir()
    (lone / "y-images-idx3-ubyte").write_bytes(idx_bytes(images[:2]))
    p = build(lone / "y-images-idx3-ubyte", tmp / "out_lone", expect_rc=1)
    check("y-images-idx3-ubyte" in p.stderr and "labels" in p.stderr.lower(),
          f"missing labels: stderr should name the images file and say labels are missing: "
          f"{p.stderr!r}")


BAD_SKIPPED = ["a/empty.png", "a/garbage.jpg", "a/huge.png", "a/trunc.jpg", "a/trunc.png",
               "b/trunc_header.jpg"]


def make_bad_folder(root):
    """The bad inputs a real user meets; returns {rel: reference RGB or None} for good files."""
    root = Path(root)
    good = {}
    photo = smooth_rgb(90, 64, 64)
    noise = rand_rgb(91, 64, 64)
    jpg = encode(".jpg", noise)
    write_bytes(root / "a/trunc.jpg", jpg[:len(jpg) * 6 // 10])  # cut inside the scan data
    write_bytes(root / "b/trunc_header.jpg", jpg[:200])  # cut inside the headers
    png = encode(".png", noise)
    write_bytes(root / "a/trunc.png", png[:len(png) // 2])
    write_bytes(root / "a/empty.png", b"")
    write_bytes(root / "a/garbage.jpg", np.random.default_rng(92).bytes(1000))
    write_bytes(root / "a/huge.png", huge_png_bytes(60000, 60000))
    # Decodable ones (32x32 so pixels compare without resizing).
    img = rand_rgb(93, 32, 32)
    write_bytes(root / "a/png_as.jpg", encode(".png", img))
    good["a/png_as.jpg"] = img
    write_bytes(root / "b/jpeg_as.png", encode(".jpg", smooth_rgb(98, 32, 32)))
    good["b/jpeg_as.png"] = "imread"
    (root / "b").mkdir(parents=True, exist_ok=True)
    Image.new("CMYK", (32, 32), (10, 200, 30, 5)).save(root / "b/cmyk.jpg", "JPEG")
    good["b/cmyk.jpg"] = None
    deep = (np.random.default_rng(94).integers(0, 65536, (32, 32, 3))).astype(np.uint16)
    write_img(root / "b/deep16.png", deep)
    good["b/deep16.png"] = "deep"
    pal = Image.fromarray(np.ascontiguousarray(photo[:32, :32])).convert("P", palette=Image.ADAPTIVE, colors=16)
    pal.save(root / "b/palette.png")
    good["b/palette.png"] = np.asarray(pal.convert("RGB"))
    la = Image.fromarray(np.stack([rand_rgb(95, 32, 32, 1)[..., 0],
                                   rand_rgb(96, 32, 32, 1)[..., 0]], axis=2), "LA")
    la.save(root / "b/greyalpha.png")
    g = np.asarray(la)[..., 0]
    good["b/greyalpha.png"] = np.stack([g, g, g], axis=2)
    rgba = np.concatenate([img, rand_rgb(97, 32, 32, 1)], axis=2)
    Image.fromarray(rgba, "RGBA").save(root / "b/rgba.png")
    good["b/rgba.png"] = img
    good["b/plain.png"] = photo[:32, :32].copy()
    write_img(root / "b/plain.png", good["b/plain.png"])
    # Fixture sanity: OpenCV can read each good file.
    for rel in good:
        check(cv2.imread(str(root / rel), cv2.IMREAD_COLOR) is not None, f"fixture {rel} unreadable")
    return good


def case_bad_inputs(tmp):
    src, out = tmp / "src", tmp / "out"
    good = make_bad_folder(src)
    p = build(src, out, "--size", "32")
    m, images, _ = check_cache(out)
    skips = read_jsonl(out / "skipped.jsonl")
    check_eq(sorted(s["source"] for s in skips), BAD_SKIPPED, "skipped sources")
    check_eq(m["skipped"], len(BAD_SKIPPED), "manifest skipped")
    huge = [s for s in skips if s["source"] == "a/huge.png"][0]
    check(re.search(r"pixel", huge["reason"], re.I),
          f"reason for a/huge.png should mention pixels / max-pixels: {huge['reason']!r}")
    check_eq(m["count"], len(good), "count == good files")
    sources = read_jsonl(out / "sources.jsonl")
    check_eq(sources, sorted(good), "sources of decoded samples")
    check(summary_mentions_skipped(p.stdout, len(BAD_SKIPPED)),
          f"summary line on stdout does not mention {len(BAD_SKIPPED)} skipped: {p.stdout!r}")
    for i, rel in enumerate(sources):
        ref = good[rel]
        if ref is None:
            continue
        if isinstance(ref, str) and ref == "imread":
            ref = imread_rgb(src / rel)
        elif isinstance(ref, str):  # 16-bit: reduced to 8 bits (allow rounding vs truncation)
            ref = imread_rgb(src / rel)
            d = np.abs(images[i].astype(int) - ref).max()
            check(d <= 1, f"{rel}: 16-bit sample differs from cv2.imread by up to {d}")
            continue
        check(np.array_equal(images[i], ref),
              f"{rel}: pixels differ from the expected RGB (max abs diff "
              f"{np.abs(images[i].astype(int) - ref).max()})")
    cmyk = images[sources.index("b/cmyk.jpg")]
    spread = cmyk.reshape(-1, 3).astype(float).std(axis=0).max()
    check(spread < 3.0, f"b/cmyk.jpg: a flat colour should stay flat (std {spread})")
    info = run_json(["inspect", out, "--json"])
    check_eq(info["skipped"], len(BAD_SKIPPED), "inspect --json skipped")
    check_eq(sorted(s["source"] for s in info["skips"]), BAD_SKIPPED, "inspect --json skips")
    check(all(s.get("reason") for s in info["skips"]), "inspect --json skips need reasons")


def case_max_pixels(tmp):
    src = tmp / "src"
    write_img(src / "a/ok_64x64.png", rand_rgb(100, 64, 64))
    write_img(src / "a/too_65x64.png", rand_rgb(101, 65, 64))
    write_img(src / "a/too_64x65.jpg", smooth_rgb(102, 64, 65))
    out = tmp / "out"
    build(src, out, "--size", "16", "--max-pixels", "4096")
    m, _, _ = check_cache(out)
    check_eq(m["recipe"]["max_pixels"], 4096, "recipe.max_pixels")
    check_eq(read_jsonl(out / "sources.jsonl"), ["a/ok_64x64.png"], "kept (64*64 == limit)")
    skips = read_jsonl(out / "skipped.jsonl")
    check_eq(sorted(s["source"] for s in skips), ["a/too_64x65.jpg", "a/too_65x64.png"],
             "skipped over the limit")
    for s in skips:
        check(re.search(r"pixel", s["reason"], re.I), f"reason should mention pixels: {s}")


def case_strict(tmp):
    src, out = tmp / "src", tmp / "out"
    make_bad_folder(src)
    p = build(src, out, "--size", "32", "--strict", expect_rc=3)
    names = [Path(r).name for r in BAD_SKIPPED]
    check(any(n in p.stderr for n in names), f"--strict: stderr names no bad file: {p.stderr!r}")
    check(not out.exists(), "--strict: OUTPUT exists")
    check(not partial_dir(out).exists(), f"--strict: {partial_dir(out)} left behind")
    # Exactly one bad file among good ones: stderr names that one.
    src2, out2 = tmp / "src2", tmp / "out2"
    make_simple_folder(src2, ["a", "b"], 6, (16, 16), seed=5)
    write_bytes(src2 / "b/img002_broken.png", b"\x89PNG\r\n\x1a\nnot really")
    p = build(src2, out2, "--size", "16", "--strict", "--threads", "2", expect_rc=3)
    check("img002_broken.png" in p.stderr, f"--strict: stderr does not name the file: {p.stderr!r}")
    check(not out2.exists() and not partial_dir(out2).exists(), "--strict left output behind")
    # Without --strict the same folder builds.
    build(src2, out2, "--size", "16", "--quiet")
    m, _, _ = check_cache(out2)
    check_eq((m["count"], m["skipped"]), (12, 1), "count, skipped without --strict")


def case_folder_symlinks(tmp):
    src, ext = tmp / "src", tmp / "elsewhere"
    write_img(src / "a/real.png", rand_rgb(140, 8, 8))
    write_img(ext / "one.png", rand_rgb(141, 8, 8))
    write_img(ext / "two.png", rand_rgb(142, 8, 8))
    write_img(tmp / "lonely.png", rand_rgb(143, 8, 8))
    os.symlink(tmp / "lonely.png", src / "a/alias.png")  # a file symlink
    os.symlink(ext, src / "linked")  # a class folder that is a symlink
    os.symlink(".", src / "a/loop")  # a directory loop
    out = tmp / "out"
    build(src, out, "--size", "8", timeout=60)
    m, images, labels = check_cache(out)
    check_eq(m["classes"], ["a", "linked"], "classes (symlinked class folder followed)")
    check_eq(read_jsonl(out / "sources.jsonl"),
             ["a/alias.png", "a/real.png", "linked/one.png", "linked/two.png"],
             "sources (symlinks followed, the loop entered at most once)")
    check(np.array_equal(images[0], imread_rgb(tmp / "lonely.png")), "a/alias.png pixels")
    check_eq(labels.tolist(), [0, 0, 1, 1], "labels")


def snapshot(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in Path(d).iterdir()}


def case_exists_force(tmp):
    src1, src2, out = tmp / "src1", tmp / "src2", tmp / "mycache"
    make_simple_folder(src1, ["a", "b"], 5, (16, 16), seed=1)
    make_simple_folder(src2, ["x"], 3, (16, 16), seed=2)
    shard = str(16 * 16 * 3 * 4)
    build(src1, out, "--size", "16", "--shard-size", shard)
    m1, _, _ = check_cache(out)
    check_eq(len(m1["shards"]), 3, "first build shards")
    before = snapshot(out)
    p = build(src2, out, "--size", "16", expect_rc=4)
    check(p.stderr.strip(), "exit 4 without a message on stderr")
    check(str(out.name) in p.stderr, f"exit 4 message does not name OUTPUT: {p.stderr!r}")
    check_eq(snapshot(out) == before, True, "OUTPUT modified by a refused build")
    check(not partial_dir(out).exists(), "refused build left a partial dir")
    # An existing empty directory is refused too.
    empty = tmp / "empty"
    empty.mkdir()
    build(src2, empty, "--size", "16", expect_rc=4)
    # --force replaces it, with no stale shard left over.
    build(src2, out, "--size", "16", "--shard-size", shard, "--force")
    m2, _, _ = check_cache(out)
    check_eq(m2["count"], 3, "count after --force")
    check_eq(m2["classes"], ["x"], "classes after --force")
    check_eq(cache_files(out), sorted(BASE_FILES | {"images-00000.npy"}), "files after --force")
    check(not partial_dir(out).exists(), "--force left a partial dir")


def _resume(tmp, storage):
    src = tmp / "src"
    if not src.exists():
        make_simple_folder(src, ["c0", "c1", "c2", "c3"], 30, (16, 16), seed=7)
    ext = ".npy" if storage == "npy" else ".h5"
    opts = ["--size", "16", "--storage", storage, "--shard-size", str(16 * 16 * 3 * 10)]
    out, ref = tmp / f"out_{storage}", tmp / f"ref_{storage}"
    p = build(src, out, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AFTER_SHARDS": "3"})
    part = partial_dir(out)
    check(not out.exists(), "OUTPUT exists after the build was killed")
    check(part.is_dir(), f"{part} missing after the build was killed")
    inodes = {}
    for k in range(3):
        f = part / f"images-{k:05d}{ext}"
        check(f.is_file(), f"{f.name} missing from the partial dir: {sorted(os.listdir(part))}")
        imgs, _ = load_shard(f)
        check_eq(imgs.shape, (10, 16, 16, 3), f"partial {f.name} shape")
        inodes[f.name] = f.stat().st_ino
    run(["build", src, out] + opts + ["--resume"])
    check(not part.exists(), "partial dir left after --resume")
    check_cache(out, storage)
    for name, ino in inodes.items():
        check_eq((out / name).stat().st_ino, ino,
                 f"{name} was rewritten, not resumed (inode changed)")
    time.sleep(1.1)  # so a timestamp inside a file would differ
    build(src, ref, *opts)
    compare_caches(out, ref, f"{storage}: resumed vs uninterrupted build")
    del p


def case_resume_after_sigkill(tmp):
    _resume(tmp, "npy")


def case_resume_after_sigkill_hdf5(tmp):
    _resume(tmp, "hdf5")


def make_mixed_folder(src, n_per_class=10):
    for ci, cls in enumerate(["k1", "k2", "k3", "k4"]):
        for k in range(n_per_class):
            seed = ci * 100 + k
            h, w = 20 + (seed * 7) % 70, 20 + (seed * 13) % 90
            if k % 3 == 0:
                write_img(src / cls / f"f{k:02d}.jpg", smooth_rgb(seed, h * 2, w * 2))
            else:
                write_img(src / cls / f"f{k:02d}.png", rand_rgb(seed, h, w))
    write_bytes(src / "k2" / "zz_bad.jpg", b"nope")


def case_threads_identical(tmp):
    src = tmp / "src"
    make_mixed_folder(src)
    for storage in ("npy", "hdf5"):
        opts = ["--size", "24", "--storage", storage, "--shard-size", str(24 * 24 * 3 * 7)]
        outs = []
        for t in (1, 2, 4):
            out = tmp / f"{storage}_t{t}"
            build(src, out, *opts, "--threads", str(t), "--quiet")
            outs.append(out)
            time.sleep(1.05)  # so a timestamp inside a file would differ
        m, _, _ = check_cache(outs[0], storage)
        check_eq((m["count"], m["skipped"]), (40, 1), f"{storage}: count, skipped")
        for o in outs[1:]:
            compare_caches(outs[0], o, f"{storage}: --threads 1 vs {o.name}")


def _sample_offset_npy(path, local_index):
    arr = np.load(path, mmap_mode="r")
    return arr.offset + local_index * arr[0].nbytes


def _flip(path, offset):
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x5A
    Path(path).write_bytes(bytes(data))


def case_verify_ok_and_flipped_byte(tmp):
    src, out = tmp / "src", tmp / "out"
    make_simple_folder(src, ["a", "b", "c", "d", "e"], 5, (16, 16), seed=9)
    build(src, out, "--size", "16", "--shard-size", str(16 * 16 * 3 * 10))
    m, _, _ = check_cache(out)
    check_eq([s["count"] for s in m["shards"]], [10, 10, 5], "shard counts")
    p = run(["verify", out])
    check(re.search(r"\bOK\b", p.stdout), f"verify: stdout lacks OK: {p.stdout!r}")
    run_json(["verify", out, "--json"])

    def variant_of(cache, name):
        d = tmp / name
        shutil.copytree(cache, d)
        return d

    def variant(name):
        return variant_of(out, name)

    def bad_verify(d, must_name, what):
        p = run(["verify", d], expect_rc=5)
        text = p.stdout + p.stderr
        for s in must_name:
            check(re.search(r"(?<![\w.-])%s(?![\w.-])" % re.escape(s), text),
                  f"{what}: verify output does not name {s!r}:\n{text}")
        return text

    # One byte of sample 13 (shard 1, local 3).
    d = variant("flip")
    _flip(d / "images-00001.npy", _sample_offset_npy(d / "images-00001.npy", 3) + 100)
    text = bad_verify(d, ["images-00001.npy", "13"], "flipped byte")
    check(any("images-00001.npy" in l and re.search(r"(?<!\d)13(?!\d)", l)
              for l in text.splitlines()),
          f"flipped byte: no single line names both images-00001.npy and sample 13:\n{text}")
    # Truncated shard: an error, never a crash.
    d = variant("trunc")
    f = d / "images-00002.npy"
    f.write_bytes(f.read_bytes()[:-100])
    bad_verify(d, ["images-00002.npy"], "truncated shard")
    # Missing labels.npy.
    d = variant("nolabels")
    (d / "labels.npy").unlink()
    bad_verify(d, ["labels.npy"], "deleted labels.npy")
    # A flipped byte in labels.npy data.
    d = variant("labelflip")
    lab = np.load(d / "labels.npy", mmap_mode="r")
    _flip(d / "labels.npy", lab.offset + 8 * 7)
    bad_verify(d, ["labels.npy"], "flipped labels.npy")
    # A flipped byte inside an HDF5 shard's contiguous images data.
    h5out = tmp / "h5"
    build(src, h5out, "--size", "16", "--shard-size", str(16 * 16 * 3 * 10), "--storage", "hdf5",
          "--quiet")
    run(["verify", h5out])
    d = variant_of(h5out, "h5flip")
    with h5py.File(d / "images-00002.h5", "r") as f:
        off = f["images"].id.get_offset()
    _flip(d / "images-00002.h5", off + 16 * 16 * 3 * 4 + 7)  # sample 24 (shard 2, local 4)
    text = bad_verify(d, ["images-00002.h5", "24"], "hdf5 flipped byte")
    check(any("images-00002.h5" in l and re.search(r"(?<!\d)24(?!\d)", l)
              for l in text.splitlines()),
          f"hdf5 flipped byte: no single line names both images-00002.h5 and sample 24:\n{text}")
    # Corrupt manifest: verify and inspect exit 5.
    d = variant("manifest")
    (d / "manifest.json").write_text('{"format_version": 1, "count": ')
    run(["verify", d], expect_rc=5)
    run(["inspect", d], expect_rc=5)
    # The original cache was not touched by any of this.
    run(["verify", out])


def case_verify_source(tmp):
    src, out = tmp / "src", tmp / "out"
    make_simple_folder(src, ["a", "b"], 3, (24, 24), seed=12)
    write_img(src / "b/x.png", rand_rgb(120, 24, 24))
    write_img(src / "b/big.jpg", smooth_rgb(121, 200, 160))  # reduced decode + crop
    build(src, out, "--size", "24")
    check_cache(out)
    p = run(["verify", out, "--source"])
    check(re.search(r"\bOK\b", p.stdout), f"verify --source: stdout lacks OK: {p.stdout!r}")
    write_img(src / "b/x.png", rand_rgb(999, 24, 24))
    p = run(["verify", out, "--source"], expect_rc=5)
    text = p.stdout + p.stderr
    check("b/x.png" in text, f"verify --source does not name b/x.png:\n{text}")
    for rel in ("b/big.jpg", "a/img000.png"):
        check(rel not in text, f"verify --source blames unchanged {rel}:\n{text}")
    run(["verify", out])  # the cache itself is still intact
    # A list source: the changed file is named as written in the list.
    lroot = tmp / "listsrc"
    for k in range(4):
        write_img(lroot / f"i/{k}.png", rand_rgb(130 + k, 24, 24))
    (lroot / "l.csv").write_text("".join(f"i/{k}.png,{k % 2}\n" for k in range(4)))
    lout = tmp / "lout"
    build(lroot / "l.csv", lout, "--size", "24", "--quiet")
    run(["verify", lout, "--source"])
    write_img(lroot / "i/2.png", rand_rgb(999, 24, 24))
    p = run(["verify", lout, "--source"], expect_rc=5)
    check("i/2.png" in p.stdout + p.stderr,
          f"verify --source (list) does not name i/2.png:\n{p.stdout}{p.stderr}")


def case_inspect_outputs(tmp):
    src, out = tmp / "src", tmp / "out"
    rels = make_simple_folder(src, ["cat", "dog", "owl"], 3, (20, 20), seed=14)
    build(src, out, "--size", "20")
    m, images, labels = check_cache(out)
    p = run(["inspect", out])
    for s in ("9", "20", "npy", "cat", "dog", "owl"):
        check(s in p.stdout, f"inspect summary lacks {s!r}:\n{p.stdout}")
    info = run_json(["inspect", out, "--json"])
    check_eq(info["count"], 9, "inspect count")
    check_eq(info["shape"], [20, 20, 3], "inspect shape")
    check_eq(info["storage"], "npy", "inspect storage")
    check_eq(info["layout"], "fixed", "inspect layout")
    check_eq(info["classes"], ["cat", "dog", "owl"], "inspect classes")
    cc = info["class_counts"]
    cc = [cc[c] for c in info["classes"]] if isinstance(cc, dict) else cc
    check_eq(cc, [3, 3, 3], "inspect class_counts")
    check_eq(info["skipped"], 0, "inspect skipped")
    check_eq(info["skips"], [], "inspect skips")
    check_eq(info["shards"], 1, "inspect shards")
    sizes = {p.name: p.stat().st_size for p in out.iterdir()}
    total = sum(sizes.values())
    check(info["bytes"] in (total, total - sizes["manifest.json"]),
          f"inspect bytes {info['bytes']} != total file size {total}")
    # --sample
    p = run(["inspect", out, "--sample", "4"])
    for s in (rels[4], "dog", "1"):
        check(s in p.stdout, f"inspect --sample 4 lacks {s!r}:\n{p.stdout}")
    smp = run_json(["inspect", out, "--sample", "4", "--json"])
    check_eq(smp, {**smp, "index": 4, "label": 1, "class": "dog", "source": rels[4]},
             "inspect --sample 4 --json")
    png = tmp / "s4.png"
    run(["inspect", out, "--sample", "4", "--out", png])
    check(png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "--out file is not a PNG")
    check(np.array_equal(imread_rgb(png), images[4]), "--sample --out PNG != stored sample")
    # Grey cache writes a grey PNG.
    gout = tmp / "gout"
    build(src, gout, "--size", "20", "--channels", "1", "--quiet")
    _, gimages, _ = check_cache(gout)
    gpng = tmp / "g.png"
    run(["inspect", gout, "--sample", "2", "--out", gpng])
    g = cv2.imread(str(gpng), cv2.IMREAD_UNCHANGED)
    check(g is not None and g.ndim == 2, f"grey --out PNG is not single-channel: "
          f"{None if g is None else g.shape}")
    check(np.array_equal(g, gimages[2][..., 0]), "grey --out PNG != stored sample")
    # --grid
    areas = []
    for n in (2, 9):
        gp = tmp / f"grid{n}.png"
        run(["inspect", out, "--grid", str(n), "--out", gp])
        check(gp.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"--grid {n}: not a PNG")
        gi = cv2.imread(str(gp), cv2.IMREAD_UNCHANGED)
        check(gi is not None, f"--grid {n}: unreadable PNG")
        check(gi.shape[0] * gi.shape[1] > 20 * 20, f"--grid {n}: not bigger than a sample")
        areas.append(gi.shape[0] * gi.shape[1])
    check(areas[1] > areas[0], f"--grid 9 ({areas[1]} px) not larger than --grid 2 ({areas[0]})")
    # Out of range.
    for bad in ("9", "-1", "1000000"):
        p = run(["inspect", out, "--sample", bad], expect_rc=2)
        check(p.stderr.strip(), f"--sample {bad}: no message on stderr")


def case_usage_errors(tmp):
    src = tmp / "src"
    make_simple_folder(src, ["a"], 2, (8, 8))
    out = tmp / "out"
    table = [
        (["build", src, out, "--size", "8", "--bogus"], "--bogus"),
        (["build", src, out, "--size", "0"], "--size"),
        (["build", src, out, "--size", "abc"], "--size"),
        (["build", src, out, "--size", "8x"], "--size"),
        (["build", src, out, "--size", "-8"], "--size"),
        (["build", src, out, "--size", "8", "--storage", "foo"], "--storage"),
        (["build", src, out, "--size", "8", "--channels", "2"], "--channels"),
        (["build", src, out, "--size", "8", "--resize", "wobble"], "--resize"),
        (["build", src, out, "--size", "8", "--shard-size", "12X"], "--shard-size"),
        (["build", src, out, "--size", "8", "--max-pixels", "lots"], "--max-pixels"),
        (["build", src, out, "--size", "8", "--threads", "many"], "--threads"),
        (["build", src, out], "--size"),  # folder source needs --size
        (["build", src, out, "--size"], "--size"),  # missing value
        (["build"], "source"),
        (["build", src], "output"),
        (["frobnicate"], "frobnicate"),
        ([], None),
        (["inspect", out, "--bogus"], "--bogus"),
        (["verify", out, "--bogus"], "--bogus"),
    ]
    for args, needle in table:
        p = run(args, expect_rc=2)
        check(p.stderr.strip(), f"{args}: exit 2 without a message on stderr")
        if needle:
            check(needle.lower() in p.stderr.lower(),
                  f"dscache {' '.join(map(str, args))}: message does not name {needle!r}: "
                  f"{p.stderr!r}")
        check(not out.exists() and not partial_dir(out).exists(), f"{args}: output created")
    missing = tmp / "no_such_dir"
    p = build(missing, out, "--size", "8", expect_rc=1)
    check(str(missing) in p.stderr or "no_such_dir" in p.stderr,
          f"nonexistent SOURCE: stderr does not name it: {p.stderr!r}")
    check(not out.exists(), "nonexistent SOURCE: output created")
    p = run(["inspect", tmp / "no_cache"], expect_rc=1)
    check("no_cache" in p.stderr, f"inspect of a missing dir: stderr does not name it {p.stderr!r}")
    p = run(["verify", tmp / "no_cache"], expect_rc=1)
    check("no_cache" in p.stderr, f"verify of a missing dir: stderr does not name it {p.stderr!r}")


def case_shard_split(tmp):
    src = tmp / "src"
    make_simple_folder(src, ["p", "q", "r", "s", "t"], 5, (16, 32), seed=17)
    # --size 16x32 --channels 1: 512 bytes/sample; 10 samples = 5K.
    base = ["--size", "16x32", "--channels", "1"]
    single = tmp / "single"
    build(src, single, *base)
    ms, imgs_single, _ = check_cache(single)
    check_eq(len(ms["shards"]), 1, "default shard size: one shard")
    for name, shard in (("k", "5K"), ("floor", "5600")):
        out = tmp / f"split_{name}"
        build(src, out, *base, "--shard-size", shard)
        m, imgs, _ = check_cache(out)
        check_eq(m["recipe"]["shard_bytes"], 5120 if shard == "5K" else 5600, "recipe.shard_bytes")
        check_eq([(s["file"], s["first"], s["count"]) for s in m["shards"]],
                 [("images-00000.npy", 0, 10), ("images-00001.npy", 10, 10),
                  ("images-00002.npy", 20, 5)], f"--shard-size {shard}: shards")
        for s in m["shards"]:
            arr = np.load(out / s["file"], mmap_mode="r")
            check_eq(arr.shape[0], s["count"], f"{s['file']} sample count")
        check(np.array_equal(imgs, imgs_single), "concatenated shards != single-shard build")
        for f in ("labels.npy", "checksums.npy", "sources.jsonl"):
            check_eq((out / f).read_bytes(), (single / f).read_bytes(), f"{f} split vs single")
    # Smaller than one sample: one sample per shard.
    tiny = tmp / "tiny"
    build(src, tiny, *base, "--shard-size", "100", "--quiet")
    mt, imgs_t, _ = check_cache(tiny)
    check_eq(len(mt["shards"]), 25, "--shard-size 100: shards")
    check(np.array_equal(imgs_t, imgs_single), "one-per-shard concat != single")
    # 1M suffix is 1024*1024.
    mm = tmp / "mega"
    build(src, mm, *base, "--shard-size", "1M", "--quiet")
    check_eq(load_manifest(mm)["recipe"]["shard_bytes"], 1 << 20, "--shard-size 1M")


# --------------------------------------------------------------------------------------------
# The ragged layout.

def ragged_size(h, w, s):
    """Expected (h, w) of a ragged sample: shorter side shrunk to s (round half up), never grown."""
    shorter, longer = min(h, w), max(h, w)
    if shorter <= s:
        return h, w
    big = (2 * longer * s + shorter) // (2 * shorter)
    return (s, big) if h <= w else (big, s)


def npy_header(path):
    """(dict text, data offset) of a .npy file, checking it is format 1.0."""
    raw = Path(path).read_bytes()[:65536]
    check(raw[:6] == b"\x93NUMPY", f"{path}: not a .npy file")
    check_eq((raw[6], raw[7]), (1, 0), f"{Path(path).name}: npy format version")
    hl = struct.unpack_from("<H", raw, 8)[0]
    return raw[10:10 + hl].decode("latin-1"), 10 + hl


def ragged_split(sizes, cap):
    """Expected [(first, count)] of ragged shards for sample byte sizes and --shard-size cap."""
    out, first, cur, n = [], 0, 0, 0
    for i, b in enumerate(sizes):
        if n > 0 and cur + b > cap:
            out.append((first, n))
            first, cur, n = i, 0, 0
        cur += b
        n += 1
    if n:
        out.append((first, n))
    return out


def check_side_files(out, m):
    for key, name in (("labels", "labels.npy"), ("checksums", "checksums.npy"),
                      ("sources", "sources.jsonl"), ("skips", "skipped.jsonl"),
                      ("index", "ragged-index.npy")):
        check(key in m["files"], f"manifest files lacks {key}: {sorted(m['files'])}")
        ent = m["files"][key]
        check_eq(ent["file"], name, f"files.{key}.file")
        p = Path(out) / name
        check(p.is_file(), f"{name} missing")
        check_eq(ent["bytes"], p.stat().st_size, f"files.{key}.bytes")
        check_eq(ent["xxh64"].lower(), file_xxh64(p), f"files.{key}.xxh64")


def check_ragged_cache(out, storage="npy", max_side=None, channels=3):
    """Structural checks of a ragged cache; returns (manifest, [sample arrays], labels, index)."""
    out = Path(out)
    m = load_manifest(out)
    check_eq(m.get("format_version"), 1, "manifest format_version")
    check_eq(m.get("layout"), "ragged", "manifest layout")
    check_eq(m.get("storage"), storage, "manifest storage")
    check_eq(m.get("dtype"), "uint8", "manifest dtype")
    check_eq(m.get("shape"), [0, 0, channels], "ragged manifest shape")
    C = channels
    check_eq(m.get("channel_order"), "RGB" if C == 3 else "L", "manifest channel_order")
    if max_side is not None:
        check_eq(m["recipe"].get("max_side"), max_side, "recipe.max_side")
    check(isinstance(m["recipe"].get("max_side"), int) and m["recipe"]["max_side"] > 0,
          f"recipe.max_side must be > 0: {m['recipe']}")
    count = m["count"]
    check_eq(sum(class_counts_list(m)), count, "sum(class_counts)")
    check_side_files(out, m)
    ext = ".npy" if storage == "npy" else ".h5"
    expected_files = BASE_FILES | {"ragged-index.npy"} | {s["file"] for s in m["shards"]}
    check_eq(sorted(p.name for p in out.iterdir()), sorted(expected_files),
             "files in the ragged cache directory")
    check(not partial_dir(out).exists(), f"{partial_dir(out)} left behind after success")

    idx = np.load(out / "ragged-index.npy")
    check_eq(idx.dtype, np.dtype("<i8"), "ragged-index.npy dtype")
    check_eq(idx.shape, (count, 3), "ragged-index.npy shape")
    check(idx.flags["C_CONTIGUOUS"], "ragged-index.npy not C order")
    check(count == 0 or (idx[:, 1].min() >= 1 and idx[:, 2].min() >= 1),
          "ragged-index.npy: a sample with h or w < 1")
    if max_side is not None and count:
        shorter = np.minimum(idx[:, 1], idx[:, 2])
        check(shorter.max() <= max_side, f"a sample's shorter side {shorter.max()} > {max_side}")
    labels = load_labels(out)
    check_eq(labels.shape, (count,), "labels.npy shape")
    sums = np.load(out / "checksums.npy")
    check_eq(sums.dtype, np.dtype("<u8"), "checksums.npy dtype")
    check_eq(sums.shape, (count,), "checksums.npy shape")

    samples = []
    first = 0
    for k, s in enumerate(m["shards"]):
        check_eq(s["file"], f"images-{k:05d}{ext}", f"shards[{k}].file")
        check_eq(s["first"], first, f"shards[{k}].first")
        check(s["count"] >= 1, f"shards[{k}] is empty")
        p = out / s["file"]
        check_eq(s["bytes"], p.stat().st_size, f"shards[{k}].bytes vs file size")
        check_eq(s["xxh64"].lower(), file_xxh64(p), f"shards[{k}].xxh64 vs file")
        rows = idx[s["first"]:s["first"] + s["count"]]
        sizes = rows[:, 1] * rows[:, 2] * C
        want_off = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        check_eq(rows[:, 0].tolist(), want_off.tolist(),
                 f"{s['file']}: index offsets (samples back to back from 0)")
        nbytes = int(sizes.sum())
        if storage == "npy":
            text, data_off = npy_header(p)
            check_eq(text.rstrip(" \n"),
                     "{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }" % nbytes,
                     f"{s['file']} npy dict text")
            check_eq(data_off % 64, 0, f"{s['file']} data offset % 64")
            check_eq(p.stat().st_size, data_off + nbytes, f"{s['file']} size = offset + bytes")
            data = np.load(p, mmap_mode="r")
            check(isinstance(data, np.memmap), f"{p}: numpy.load(mmap_mode='r') gave {type(data)}")
            check_eq(data.offset, data_off, f"{s['file']} numpy data offset")
        else:
            with h5py.File(p, "r") as f:
                ds = f["images"]
                check_eq(ds.dtype, np.dtype(np.uint8), f"{s['file']} images dtype")
                co = ds.attrs.get("channel_order")
                co = co.decode() if isinstance(co, bytes) else str(co)
                check_eq(co, "RGB" if C == 3 else "L", f"{s['file']} channel_order attr")
                data = ds[...]
                lab = f["labels"][...]
            check_eq(lab.dtype, np.dtype("int64"), f"{s['file']} labels dtype")
            check_eq(lab.tolist(), labels[s["first"]:s["first"] + s["count"]].tolist(),
                     f"{s['file']} labels")
        check_eq(data.dtype, np.dtype(np.uint8), f"{s['file']} dtype")
        check_eq(data.shape, (nbytes,), f"{s['file']} 1-d shape (sum of h*w*C)")
        for j, (off, h, w) in enumerate(rows.tolist()):
            samples.append(np.array(data[off:off + h * w * C]).reshape(h, w, C))
        first += s["count"]
    check_eq(first, count, "sum of shard counts")
    for i, smp in enumerate(samples):
        want = xxh64(smp.tobytes())
        check(int(sums[i]) == want,
              f"checksums.npy[{i}] = {int(sums[i]):016x}, xxh64 of sample = {want:016x}")
    check_eq(len(read_jsonl(out / "sources.jsonl")), count, "lines in sources.jsonl")
    return m, samples, labels, idx


# (h, w) of PNG fixtures: tall, wide, smaller than S, exactly S, far from square.
RAGGED_PNG_SIZES = [(60, 40), (30, 100), (20, 50), (24, 70), (17, 13), (97, 53), (25, 25),
                    (200, 31), (41, 77), (3, 200), (24, 24), (90, 26)]


def make_ragged_folder(src, sizes=RAGGED_PNG_SIZES, seed=0, jpeg=True):
    """PNGs of the given sizes split over classes a/b/c (+ one big JPEG); returns {rel: (h, w)}."""
    made = {}
    for k, (h, w) in enumerate(sizes):
        rel = f"{'abc'[k % 3]}/p{k:02d}.png"
        write_img(Path(src) / rel, rand_rgb(seed * 1000 + k, h, w))
        made[rel] = (h, w)
    if jpeg:
        write_img(Path(src) / "b/zphoto.jpg", smooth_rgb(seed * 1000 + 999, 300, 200))
        made["b/zphoto.jpg"] = (300, 200)
    return made


def ragged_reference(path, s, grey=False):
    ref = imread_grey(path)[..., None] if grey else imread_rgb(path)
    h, w = ref.shape[:2]
    eh, ew = ragged_size(h, w, s)
    if (eh, ew) != (h, w):
        ref = cv2.resize(ref, (ew, eh), interpolation=cv2.INTER_AREA)
        if grey:
            ref = ref[..., None]
    return ref


def case_ragged_build(tmp):
    src = tmp / "src"
    S = 24
    made = make_ragged_folder(src)
    order = sorted(made, key=lambda r: (r.split("/")[0].encode(), r.encode()))
    cap = 6000
    out = tmp / "out"
    build(src, out, "--layout", "ragged", "--max-side", str(S), "--shard-size", str(cap))
    m, samples, labels, idx = check_ragged_cache(out, "npy", S)
    check_eq(m["count"], len(made), "count")
    check_eq(m["recipe"]["shard_bytes"], cap, "recipe.shard_bytes")
    sources = read_jsonl(out / "sources.jsonl")
    check_eq(sources, order, "sources.jsonl order")
    check_eq(labels.tolist(), ["abc".index(r[0]) for r in order], "labels")
    for i, rel in enumerate(order):
        h, w = made[rel]
        want_hw = ragged_size(h, w, S)
        check_eq(tuple(idx[i, 1:].tolist()), want_hw, f"sample {i} ({rel} {h}x{w}) index h, w")
        check_eq(samples[i].shape, want_hw + (3,), f"sample {i} ({rel}) shape")
        ref = ragged_reference(src / rel, S)
        if rel.endswith(".png"):
            check(np.array_equal(samples[i], ref),
                  f"sample {i} ({rel} {h}x{w} -> {want_hw}) != cv2 decode + INTER_AREA: max abs "
                  f"diff {np.abs(samples[i].astype(int) - ref).max()}")
            if want_hw == (h, w):
                check(np.array_equal(samples[i], imread_rgb(src / rel)),
                      f"sample {i} ({rel}) smaller than S was not stored unchanged")
        else:  # JPEG: reduced-scale decode (largest 1/f keeping the shorter side >= S)
            f = next((f for f in (8, 4, 2) if -(-min(h, w) // f) >= S), 1)
            check_eq(f, 8, f"fixture: reduction factor for {rel}")
            red = cv2.cvtColor(cv2.imread(str(src / rel), cv2.IMREAD_REDUCED_COLOR_8),
                               cv2.COLOR_BGR2RGB)
            rh, rw = red.shape[:2]
            ref = cv2.resize(red, ragged_size(rh, rw, S)[::-1], interpolation=cv2.INTER_AREA)
            check(np.array_equal(samples[i], ref),
                  f"sample {i} ({rel}): != IMREAD_REDUCED_COLOR_8 + INTER_AREA: max abs diff "
                  f"{np.abs(samples[i].astype(int) - ref).max()}")
    # Shards split by byte cap; the 155x24 sample (11160 bytes > cap) is alone.
    sizes = [int(h * w * 3) for h, w in idx[:, 1:].tolist()]
    check(max(sizes) > cap, "fixture: no sample larger than the cap")
    want_split = ragged_split(sizes, cap)
    check_eq([(s["first"], s["count"]) for s in m["shards"]], want_split,
             f"shards (first, count) for cap {cap} and sample sizes {sizes}")
    check(len(want_split) >= 4, f"fixture: too few shards {want_split}")
    big = sizes.index(max(sizes))
    check(any(s["first"] == big and s["count"] == 1 for s in m["shards"]),
          f"sample {big} ({max(sizes)} bytes > cap) does not have a shard of its own")
    for s in m["shards"]:
        if s["count"] > 1:
            b = sum(sizes[s["first"]:s["first"] + s["count"]])
            check(b <= cap, f"{s['file']}: {b} image bytes > cap {cap}")
    # A cap equal to the first two samples' bytes: they share a shard (the cap is inclusive).
    exact = sizes[0] + sizes[1]
    ex = tmp / "exact"
    build(src, ex, "--layout", "ragged", "--max-side", str(S), "--shard-size", str(exact),
          "--quiet")
    mx, sx, _, _ = check_ragged_cache(ex, "npy", S)
    check_eq([(s["first"], s["count"]) for s in mx["shards"]], ragged_split(sizes, exact),
             f"shards for cap {exact}")
    check_eq((mx["shards"][0]["first"], mx["shards"][0]["count"]), (0, 2),
             f"cap {exact} == bytes of samples 0+1: first shard")
    check(all(np.array_equal(a, b) for a, b in zip(samples, sx)), "cap-exact build: samples")
    # The default cap: one shard holding the same bytes; side files identical.
    one = tmp / "one"
    build(src, one, "--layout", "ragged", "--max-side", str(S), "--quiet")
    m1, s1, _, idx1 = check_ragged_cache(one, "npy", S)
    check_eq(len(m1["shards"]), 1, "default cap: shards")
    check(all(np.array_equal(a, b) for a, b in zip(samples, s1)), "split vs single: samples")
    check_eq(idx1[:, 1:].tolist(), idx[:, 1:].tolist(), "split vs single: index h, w")
    for f in ("labels.npy", "checksums.npy", "sources.jsonl"):
        check_eq((out / f).read_bytes(), (one / f).read_bytes(), f"{f} split vs single")
    # --no-reduced-decode: the JPEG equals a full decode + INTER_AREA exactly.
    nored = tmp / "nored"
    build(src, nored, "--layout", "ragged", "--max-side", str(S), "--no-reduced-decode", "--quiet")
    mn, sn, _, _ = check_ragged_cache(nored, "npy", S)
    check_eq(mn["recipe"]["reduced_decode"], False, "recipe.reduced_decode")
    j = order.index("b/zphoto.jpg")
    ref = ragged_reference(src / "b/zphoto.jpg", S)
    check(np.array_equal(sn[j], ref), "--no-reduced-decode ragged JPEG != full decode + "
          f"INTER_AREA: max abs diff {np.abs(sn[j].astype(int) - ref).max()}")
    run(["verify", nored, "--source"])
    # Grey ragged: --channels 1 equals IMREAD_GRAYSCALE + INTER_AREA.
    grey = tmp / "grey"
    build(src, grey, "--layout", "ragged", "--max-side", "16", "--channels", "1", "--quiet")
    mg, sg, _, _ = check_ragged_cache(grey, "npy", 16, channels=1)
    for i, rel in enumerate(read_jsonl(grey / "sources.jsonl")):
        if rel.endswith(".png"):
            ref = ragged_reference(src / rel, 16, grey=True)
            check(np.array_equal(sg[i], ref), f"grey ragged sample {i} ({rel}) != reference")


def case_ragged_hdf5(tmp):
    src = tmp / "src"
    make_ragged_folder(src, seed=3)
    opts = ["--layout", "ragged", "--max-side", "20", "--shard-size", "4000"]
    out_n, out_h = tmp / "npy", tmp / "h5"
    build(src, out_n, *opts, "--quiet")
    build(src, out_h, *opts, "--storage", "hdf5", "--quiet")
    mn, sn, ln, idn = check_ragged_cache(out_n, "npy", 20)
    mh, sh, lh, idh = check_ragged_cache(out_h, "hdf5", 20)
    check_eq([(s["first"], s["count"]) for s in mh["shards"]],
             [(s["first"], s["count"]) for s in mn["shards"]], "hdf5 vs npy shard ranges")
    check(len(mh["shards"]) >= 3, f"fixture: few hdf5 shards {len(mh['shards'])}")
    check_eq(len(sh), len(sn), "sample count hdf5 vs npy")
    for i, (a, b) in enumerate(zip(sn, sh)):
        check(np.array_equal(a, b), f"sample {i}: hdf5 bytes differ from the npy build")
    for f in ("labels.npy", "checksums.npy", "sources.jsonl", "ragged-index.npy"):
        check_eq((out_n / f).read_bytes(), (out_h / f).read_bytes(), f"{f} npy vs hdf5")
    for s_n, s_h in zip(mn["shards"], mh["shards"]):
        with h5py.File(out_h / s_h["file"], "r") as f:
            ds = f["images"]
            check_eq(ds.ndim, 1, f"{s_h['file']} images is 1-d")
            check(ds.chunks is None and ds.compression is None,
                  f"{s_h['file']}: images chunked/compressed")
            off = ds.id.get_offset()
            check(off is not None, f"{s_h['file']}: images has no file offset")
            n = ds.shape[0]
            mm = np.memmap(out_h / s_h["file"], np.uint8, "r", offset=off, shape=(n,))
            check(np.array_equal(mm, np.load(out_n / s_n["file"], mmap_mode="r")),
                  f"{s_h['file']}: raw data at get_offset() != npy shard data")
    run(["verify", out_h])


def case_ragged_usage(tmp):
    src = tmp / "src"
    make_simple_folder(src, ["a"], 2, (8, 8))
    out = tmp / "out"
    table = [
        (["build", src, out, "--layout", "ragged"], "--max-side"),
        (["build", src, out, "--layout", "ragged", "--max-side", "0"], "--max-side"),
        (["build", src, out, "--layout", "ragged", "--max-side", "8", "--size", "8"], "--size"),
        (["build", src, out, "--size", "8", "--max-side", "8"], "--max-side"),
        (["build", src, out, "--layout", "fixed", "--size", "8", "--max-side", "8"], "--max-side"),
        (["build", src, out, "--layout", "foo", "--size", "8"], "--layout"),
        (["build", src, out, "--layout", "ragged", "--max-side", "abc"], "--max-side"),
        (["build", src, out, "--layout"], "--layout"),
    ]
    for args, needle in table:
        p = run(args, expect_rc=2)
        check(needle.lower() in p.stderr.lower(),
              f"dscache {' '.join(map(str, args))}: message does not name {needle!r}: "
              f"{p.stderr!r}")
        check(not out.exists() and not partial_dir(out).exists(), f"{args}: output created")
    # The valid spelling works and is recorded.
    build(src, out, "--layout", "ragged", "--max-side", "8", "--quiet")
    check_ragged_cache(out, "npy", 8)
    fixed = tmp / "fixed"
    build(src, fixed, "--layout", "fixed", "--size", "8", "--quiet")
    m, _, _ = check_cache(fixed)
    check_eq(m["recipe"].get("max_side"), 0, "fixed: recipe.max_side")
    check("index" not in m["files"], f"fixed manifest has files.index: {m['files']}")


def case_ragged_resume_threads(tmp):
    src = tmp / "src"
    rng = np.random.default_rng(77)
    sizes = [(int(rng.integers(10, 90)), int(rng.integers(10, 90))) for _ in range(36)]
    make_ragged_folder(src, sizes, seed=5, jpeg=False)
    for k in range(4):  # JPEGs too (reduced decode path)
        write_img(src / f"c/j{k}.jpg", smooth_rgb(500 + k, 100 + 20 * k, 180 - 15 * k))
    opts = ["--layout", "ragged", "--max-side", "24", "--shard-size", "5000"]
    t1, t2 = tmp / "t1", tmp / "t2"
    build(src, t1, *opts, "--threads", "1", "--quiet")
    time.sleep(1.05)
    build(src, t2, *opts, "--threads", "2", "--quiet")
    m, _, _, _ = check_ragged_cache(t1, "npy", 24)
    check_eq(m["count"], 40, "count")
    check(len(m["shards"]) >= 5, f"fixture: only {len(m['shards'])} shards")
    compare_caches(t1, t2, "ragged: --threads 1 vs 2")
    # SIGKILL after 2 shards, then --resume: identical to the uninterrupted build.
    out = tmp / "out"
    build(src, out, *opts, "--threads", "2", expect_rc=-9,
          env_extra={"DSCACHE_TEST_KILL_AFTER_SHARDS": "2"})
    part = partial_dir(out)
    check(not out.exists(), "OUTPUT exists after the build was killed")
    check(part.is_dir(), f"{part} missing after the build was killed")
    inodes = {}
    for k in range(2):
        f = part / f"images-{k:05d}.npy"
        check(f.is_file(), f"{f.name} missing from the partial dir: {sorted(os.listdir(part))}")
        check_eq(f.read_bytes(), (t1 / f.name).read_bytes(), f"partial {f.name} vs full build")
        inodes[f.name] = f.stat().st_ino
    build(src, out, *opts, "--threads", "2", "--resume", "--quiet")
    check(not part.exists(), "partial dir left after --resume")
    check_ragged_cache(out, "npy", 24)
    for name, ino in inodes.items():
        check_eq((out / name).stat().st_ino, ino, f"{name} was rewritten, not resumed")
    compare_caches(t1, out, "ragged: resumed vs uninterrupted build")
    # A resume with another --max-side is refused.
    out2 = tmp / "out2"
    build(src, out2, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AFTER_SHARDS": "1"})
    other = ["--layout", "ragged", "--max-side", "20", "--shard-size", "5000"]
    p = build(src, out2, *other, "--resume", expect_rc=None)
    check(p.returncode not in (0, -9), f"--resume with another --max-side: exit {p.returncode}")
    check(not out2.exists(), "--resume with another --max-side produced a cache")


def case_ragged_inspect_verify(tmp):
    src, out = tmp / "src", tmp / "out"
    made = make_ragged_folder(src, seed=8)
    S = 24
    build(src, out, "--layout", "ragged", "--max-side", str(S), "--shard-size", "6000")
    m, samples, labels, idx = check_ragged_cache(out, "npy", S)
    info = run_json(["inspect", out, "--json"])
    check_eq(info["layout"], "ragged", "inspect --json layout")
    check_eq(info["count"], len(made), "inspect --json count")
    check_eq(info["shape"][2], 3, "inspect --json channels")
    check_eq(info["shards"], len(m["shards"]), "inspect --json shards")
    check_eq(info["recipe"].get("max_side"), S, "inspect --json recipe.max_side")
    p = run(["inspect", out])
    check("ragged" in p.stdout, f"inspect summary does not say ragged:\n{p.stdout}")
    sources = read_jsonl(out / "sources.jsonl")
    # Samples of several sizes (tall, wide, unchanged) written at their own size.
    for i in range(len(samples)):
        png = tmp / f"s{i}.png"
        smp = run_json(["inspect", out, "--sample", str(i), "--out", png, "--json"])
        check_eq((smp["index"], smp["label"], smp["source"]), (i, int(labels[i]), sources[i]),
                 f"inspect --sample {i} --json")
        shard = next(s for s in m["shards"] if s["first"] <= i < s["first"] + s["count"])
        check_eq(smp.get("shard"), shard["file"], f"inspect --sample {i} shard")
        check(png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"--sample {i} --out: not a PNG")
        got = imread_rgb(png)
        check_eq(got.shape, samples[i].shape, f"--sample {i} --out PNG size")
        check(np.array_equal(got, samples[i]), f"--sample {i} --out PNG != stored sample")
    gp = tmp / "grid.png"
    run(["inspect", out, "--grid", "6", "--out", gp])
    gi = cv2.imread(str(gp), cv2.IMREAD_UNCHANGED)
    check(gi is not None and gi.shape[0] >= 128 and gi.shape[1] >= 128,
          f"--grid 6: unreadable or tiny PNG {None if gi is None else gi.shape}")
    run(["inspect", out, "--sample", str(len(samples))], expect_rc=2)
    # verify OK.
    p = run(["verify", out])
    check(re.search(r"\bOK\b", p.stdout), f"verify: stdout lacks OK: {p.stdout!r}")
    # A flipped byte inside one sample of a later shard.
    k = 2
    s = m["shards"][k]
    i = s["first"] + s["count"] - 1
    d = tmp / "flip"
    shutil.copytree(out, d)
    _, data_off = npy_header(d / s["file"])
    off, h, w = idx[i].tolist()
    _flip(d / s["file"], data_off + off + (h * w * 3) // 2)
    p = run(["verify", d], expect_rc=5)
    text = p.stdout + p.stderr
    check(any(s["file"] in l and re.search(r"(?<!\d)%d(?!\d)" % i, l) for l in text.splitlines()),
          f"flipped byte: no line names both {s['file']} and sample {i}:\n{text}")
    check(not any(o["file"] in text for o in m["shards"] if o is not s),
          f"flipped byte: verify blames another shard:\n{text}")
    # An index row pointing outside its shard.
    d2 = tmp / "badindex"
    shutil.copytree(out, d2)
    bad = np.load(d2 / "ragged-index.npy")
    bad[0, 1] += 1000
    np.save(d2 / "ragged-index.npy", bad)
    p = run(["verify", d2], expect_rc=5)
    check("ragged-index.npy" in p.stdout + p.stderr,
          f"corrupt index: verify does not name ragged-index.npy:\n{p.stdout}{p.stderr}")
    # verify --source: OK, then a changed source is named.
    p = run(["verify", out, "--source"])
    check(re.search(r"\bOK\b", p.stdout), f"verify --source: stdout lacks OK: {p.stdout!r}")
    victim = next(r for r in sources if r.endswith(".png") and min(made[r]) > S)
    h0, w0 = made[victim]
    write_img(src / victim, rand_rgb(4242, h0, w0))
    p = run(["verify", out, "--source"], expect_rc=5)
    text = p.stdout + p.stderr
    check(victim in text, f"verify --source does not name {victim}:\n{text}")
    for rel in sources:
        if rel != victim:
            check(rel not in text, f"verify --source blames unchanged {rel}:\n{text}")
    run(["verify", out])  # the cache itself is intact


# --------------------------------------------------------------------------------------------
# dscache bench.

BENCH_ROWS = ["memcpy ceiling", "loader, global shuffle", "loader, windowed shuffle",
              "per-sample decode (seed)", "lazy cache, first pass", "lazy cache, second pass"]
BENCH_ARGS = ["--seconds", "0.2", "--decode-samples", "100"]


def make_bench_cache(tmp, n=300):
    src, out = tmp / "src", tmp / "cache"
    classes = ["a", "b", "c"]
    make_simple_folder(src, classes, n // len(classes), (32, 32), seed=21)
    build(src, out, "--size", "32", "--quiet")
    check_cache(out)
    return src, out


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def check_bench_json(j, n, what):
    check_eq(j.get("samples"), n, f"{what}: samples")
    check_eq(j.get("sample_bytes"), 32 * 32 * 3, f"{what}: sample_bytes")
    for key in ("memcpy_gbps", "loader_gbps", "loader_samples_per_s", "decode_samples_per_s",
                "lazy_first_samples_per_s", "lazy_second_samples_per_s"):
        check(is_num(j.get(key)) and j[key] > 0, f"{what}: {key} = {j.get(key)!r}, want > 0")
    rows = j.get("rows")
    check(isinstance(rows, list) and rows, f"{what}: rows = {rows!r}")
    names = [r.get("name") for r in rows]
    for want in BENCH_ROWS:
        check(want in names, f"{what}: no row named {want!r} in {names}")
    for r in rows:
        for key in ("threads", "samples_per_s", "gbps"):
            check(is_num(r.get(key)) and r[key] > 0, f"{what}: row {r.get('name')!r} {key} = "
                  f"{r.get(key)!r}, want > 0")
    rss = j.get("rss")
    check(isinstance(rss, dict), f"{what}: rss = {rss!r}")
    for key in ("anon_start_mib", "anon_before_mib", "anon_after_mib", "file_after_mib",
                "buffers_mib"):
        check(is_num(rss.get(key)) and rss[key] >= 0, f"{what}: rss.{key} = {rss.get(key)!r}")
    check(rss["anon_after_mib"] > 0, f"{what}: rss.anon_after_mib = {rss['anon_after_mib']}")
    check(rss["buffers_mib"] > 0, f"{what}: rss.buffers_mib = {rss['buffers_mib']}")


def case_bench_json(tmp):
    _, out = make_bench_cache(tmp)
    lazy = tmp / "lazy.bin"
    j = run_json(["bench", out, "--json", *BENCH_ARGS, "--lazy-file", lazy])
    check_bench_json(j, 300, "bench --json")
    check(not lazy.exists() or lazy.stat().st_size > 0, "bench --lazy-file left an empty file")
    # Human output: a header and one table line per row.
    p = run(["bench", out, *BENCH_ARGS])
    lines = p.stdout.splitlines()
    check(any("samples/s" in l and "GB/s" in l for l in lines),
          f"bench: no table header with samples/s and GB/s:\n{p.stdout}")
    for want in BENCH_ROWS:
        row = [l for l in lines if l.startswith(want)]
        check(row, f"bench: no table line for {want!r}:\n{p.stdout}")
        nums = re.findall(r"[0-9]+(?:\.[0-9]+)?", row[0][len(want):])
        check(len(nums) >= 3, f"bench: table line for {want!r} lacks numbers: {row[0]!r}")
    check(re.search(r"RSS", p.stdout), f"bench: no RSS line:\n{p.stdout}")
    check("300" in lines[0], f"bench: first line does not give the sample count: {lines[0]!r}")
    # Bad values are usage errors.
    for bad in (["--seconds", "0"], ["--decode-samples", "0"], ["--bogus"]):
        p = run(["bench", out, *bad], expect_rc=2)
        check(p.stderr.strip(), f"bench {bad}: no message on stderr")
    run(["bench"], expect_rc=2)


def case_bench_corrupt(tmp):
    _, out = make_bench_cache(tmp, n=120)
    bad = tmp / "trunc"
    shutil.copytree(out, bad)
    f = bad / "images-00000.npy"
    f.write_bytes(f.read_bytes()[:-1000])
    p = run(["bench", bad, "--json", *BENCH_ARGS], expect_rc=5)
    check("images-00000.npy" in p.stderr,
          f"bench on a truncated shard: stderr does not name images-00000.npy: {p.stderr!r}")
    check(not p.stdout.strip().startswith("{"), f"bench on a corrupt cache printed JSON: "
          f"{p.stdout!r}")
    p = run(["bench", bad, *BENCH_ARGS], expect_rc=5)
    check("images-00000.npy" in p.stderr, f"bench (text): stderr does not name the shard: "
          f"{p.stderr!r}")
    missing = tmp / "no_such_cache"
    p = run(["bench", missing, "--json", *BENCH_ARGS], expect_rc=1)
    check("no_such_cache" in p.stderr, f"bench of a missing dir: stderr does not name it: "
          f"{p.stderr!r}")
    run(["bench", out, "--json", *BENCH_ARGS])  # the original is fine


def case_bench_moved_source(tmp):
    src, out = make_bench_cache(tmp, n=150)
    moved = tmp / "moved_src"
    src.rename(moved)
    p = run(["bench", out, "--json", *BENCH_ARGS], expect_rc=None)
    check(p.returncode != 0, f"bench with a moved source: exit 0\n{p.stdout}")
    check(p.returncode not in (-6, -11, 134, 139), f"bench crashed: exit {p.returncode}")
    check("--source" in p.stderr and str(src) in p.stderr,
          f"bench with a moved source: stderr should name the missing root and --source: "
          f"{p.stderr!r}")
    j = run_json(["bench", out, "--json", *BENCH_ARGS, "--source", moved])
    check_bench_json(j, 150, "bench --source NEWDIR")
    check("note" not in j, f"bench --source NEWDIR: unexpected note {j.get('note')!r}")


CASES = {
    "folder_basic": case_folder_basic,
    "folder_symlinks": case_folder_symlinks,
    "folder_pixels_interop_npy": case_folder_pixels_interop_npy,
    "resize_modes": case_resize_modes,
    "reduced_decode": case_reduced_decode,
    "hdf5_interop": case_hdf5_interop,
    "csv_list": case_csv_list,
    "tsv_list_names": case_tsv_list_names,
    "list_missing_file": case_list_missing_file,
    "idx_source": case_idx_source,
    "bad_inputs": case_bad_inputs,
    "max_pixels": case_max_pixels,
    "strict": case_strict,
    "exists_force": case_exists_force,
    "resume_after_sigkill": case_resume_after_sigkill,
    "resume_after_sigkill_hdf5": case_resume_after_sigkill_hdf5,
    "threads_identical": case_threads_identical,
    "verify_ok_and_flipped_byte": case_verify_ok_and_flipped_byte,
    "verify_source": case_verify_source,
    "inspect_outputs": case_inspect_outputs,
    "usage_errors": case_usage_errors,
    "shard_split": case_shard_split,
    "ragged_build": case_ragged_build,
    "ragged_hdf5": case_ragged_hdf5,
    "ragged_usage": case_ragged_usage,
    "ragged_resume_threads": case_ragged_resume_threads,
    "ragged_inspect_verify": case_ragged_inspect_verify,
    "bench_json": case_bench_json,
    "bench_corrupt": case_bench_corrupt,
    "bench_moved_source": case_bench_moved_source,
}


def main(argv):
    if len(argv) != 2 or argv[1] not in CASES:
        print(f"usage: {argv[0]} CASE\ncases: {' '.join(CASES)}", file=sys.stderr)
        return 2
    if not DSCACHE or not os.access(DSCACHE, os.X_OK):
        print(f"DSCACHE={DSCACHE!r} is not an executable dscache binary", file=sys.stderr)
        return 1
    name = argv[1]
    t0 = time.monotonic()
    try:
        _xxh64_selftest()
        with tempfile.TemporaryDirectory(prefix=f"dscache-cli-{name}-") as d:
            CASES[name](Path(d))
    except Exception:  # noqa: BLE001 - any error fails the case with its traceback
        traceback.print_exc()
        print(f"FAIL {name} ({time.monotonic() - t0:.1f}s)", file=sys.stderr)
        return 1
    print(f"PASS {name} ({time.monotonic() - t0:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
