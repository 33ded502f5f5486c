#!/usr/bin/python3
"""Shared code of the `dscache` CLI tests (test_build*.py, test_inspect.py, test_verify.py,
test_bench.py): checks, XXH64 (xxh64.py), running the binary, fixture writers, cache readers
and checkers, and main(), the runner each test file calls. Ragged caches' folder and checker are
in ragged_helpers.py.

A test file is run as `test_X.py CASE` (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the
repo root). Each case generates its fixtures (real PNG/JPEG files written with OpenCV or PIL, idx
files written with numpy) in a fresh temporary directory, runs the binary and checks its output
with numpy, h5py and OpenCV. Exit 0 = pass, 1 = fail, 2 = unknown case. numpy, h5py, cv2 and PIL
are declared test dependencies: a missing one fails the case, it is never a skip.
"""

import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import testrunner  # noqa: E402 - tests/testrunner.py, the runner every Python test shares
from testrunner import Failure, Skip  # noqa: E402,F401 - the cases raise these
from xxh64 import file_xxh64, selftest as _xxh64_selftest, xxh64  # noqa: E402,F401 - re-exported

DSCACHE = os.environ.get("DSCACHE", "")
TIMEOUT_S = 120
CHANNEL_ORDER = {1: "L", 3: "RGB", 4: "RGBA"}  # the manifest's channel_order of C channels


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


# --------------------------------------------------------------------------------------------
# Running the binary.

def run(args, expect_rc=0, env_extra=None, cwd=None, timeout=TIMEOUT_S):
    """Runs dscache with args; raises with stdout/stderr when the exit code is not expect_rc."""
    env = dict(os.environ)
    env.pop("DSCACHE_TEST_KILL_AT", None)
    if env_extra:
        env.update(env_extra)
    return testrunner.run_cmd([DSCACHE] + list(args), expect_rc, env=env, cwd=cwd, timeout=timeout)


# Runs argv[1:] (stdout to /dev/null, stderr kept) and prints its exit code and ru_maxrss (KiB).
# A child's ru_maxrss starts at the RSS of the process that forked it and is kept across exec:
# forked from a test holding numpy and cv2 (~150 MiB, more than most phases) it would measure the
# test. A fresh `python3 -S` (a few MiB) forks it instead.
_PEAK_RSS = """import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def peak_rss_kib(argv, timeout=TIMEOUT_S):
    """The kernel's peak RSS (KiB) of a process running argv to its end; fails on a non-zero
    exit, naming the command and its stderr. Skips the case in a build with AddressSanitizer
    (tests/meson.build sets DSCACHE_ASAN): its shadow memory, redzones and freed-memory
    quarantine make the peak the sanitizer's, several times dscache's own; the plain build runs
    every such case."""
    if os.environ.get("DSCACHE_ASAN") == "1":
        raise Skip("peak RSS under AddressSanitizer measures the sanitizer: run in the plain build")
    argv = [str(a) for a in argv]
    p = subprocess.run([sys.executable, "-S", "-c", _PEAK_RSS] + argv, capture_output=True,
                       text=True, timeout=timeout)
    fields = p.stdout.split()
    check(p.returncode == 0 and len(fields) == 2 and fields[0] == "0",
          f"{' '.join(argv)}: exit {fields[0] if fields else p.returncode}: {p.stderr[-2000:]}")
    return int(fields[1])


def run_json(args, expect_rc=0):
    p = run(args, expect_rc)
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise Failure(f"{' '.join(map(str, args))}: stdout is not JSON: {p.stdout!r}") from e


def build(src, out, *opts, expect_rc=0, env_extra=None, timeout=TIMEOUT_S):
    """`dscache build SRC OUT OPTS`, in source order (`--shuffle none`) unless OPTS say
    otherwise: most cases check samples against their sources position by position. The default
    (a build-time shuffle) is tested on its own (test_build_output.py shuffle_default)."""
    opts = [str(o) for o in opts]
    if "--shuffle" not in opts:
        opts += ["--shuffle", "none"]
    return run(["build", src, out] + opts, expect_rc, env_extra=env_extra, timeout=timeout)


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


def check_pixels_equal(got, want, what):
    """GOT equals WANT value for value; a failure names WHAT and how far they are apart."""
    check(np.array_equal(got, want),
          f"{what}: max abs diff {np.abs(got.astype(int) - want).max()}, "
          f"mismatching values {np.count_nonzero(got != want)}")


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


def kept_shards(out, n, ext=".npy"):
    """After a build of OUT was killed: OUT is absent and its partial dir holds the finished
    shards images-00000 .. n-1 (with ext); returns their paths."""
    part = partial_dir(out)
    check(not out.exists(), "OUTPUT exists after the build was killed")
    check(part.is_dir(), f"{part} missing after the build was killed")
    files = [part / f"images-{k:05d}{ext}" for k in range(n)]
    for f in files:
        check(f.is_file(), f"{f.name} missing from the partial dir: {sorted(os.listdir(part))}")
    return files


def make_mixed_folder(src, classes, n_per_class, spread):
    """PNG and JPEG files of mixed sizes, n_per_class in each class folder: every third a smooth
    JPEG, the rest random PNGs, of 20 + up to spread = (dh, dw) pixels (JPEGs twice that), plus
    the undecodable k2/zz_bad.jpg."""
    dh, dw = spread
    for ci, cls in enumerate(classes):
        for k in range(n_per_class):
            seed = ci * 100 + k
            h, w = 20 + (seed * 7) % dh, 20 + (seed * 13) % dw
            if k % 3 == 0:
                write_img(src / cls / f"f{k:02d}.jpg", smooth_rgb(seed, h * 2, w * 2))
            else:
                write_img(src / cls / f"f{k:02d}.png", rand_rgb(seed, h, w))
    write_bytes(src / "k2" / "zz_bad.jpg", b"nope")


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


def checked_manifest(out, layout, storage):
    """The manifest of the cache in OUT, checked for format_version 1, `layout` and `storage`."""
    m = load_manifest(out)
    check_eq(m.get("format_version"), 1, "manifest format_version")
    check_eq(m.get("layout"), layout, "manifest layout")
    check_eq(m.get("storage"), storage, "manifest storage")
    return m


def check_cache(out, storage="npy"):
    """Structural checks every built cache must pass; returns (manifest, images, labels)."""
    out = Path(out)
    m = checked_manifest(out, "fixed", storage)
    check_eq(m.get("dtype"), "uint8", "manifest dtype")
    H, W, C = m["shape"]
    check_eq(m.get("channel_order"), CHANNEL_ORDER.get(C), "manifest channel_order")
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
# npy headers and side files (ragged_helpers.py checks a ragged cache with them).

def npy_header(path):
    """(dict text, data offset) of a .npy file, checking it is format 1.0."""
    raw = Path(path).read_bytes()[:65536]
    check(raw[:6] == b"\x93NUMPY", f"{path}: not a .npy file")
    check_eq((raw[6], raw[7]), (1, 0), f"{Path(path).name}: npy format version")
    hl = struct.unpack_from("<H", raw, 8)[0]
    return raw[10:10 + hl].decode("latin-1"), 10 + hl


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


def main(cases, argv):
    """Runs the cases named in argv (`cases`: name -> function(tmp Path)) with the shared runner
    (tests/testrunner.py): 0 pass, 1 fail (or no usable DSCACHE), 2 unknown case (usage), 77
    skipped (the case raised Skip)."""
    def preflight():
        if not DSCACHE or not os.access(DSCACHE, os.X_OK):
            return f"DSCACHE={DSCACHE!r} is not an executable dscache binary"
        _xxh64_selftest()
        return None
    return testrunner.main(cases, argv, prefix="dscache-cli-", preflight=preflight)
