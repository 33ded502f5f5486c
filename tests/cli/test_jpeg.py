#!/usr/bin/python3
"""Tests of JPEG caches (`dscache build --codec jpeg[:Q]`): the format read back by numpy, h5py
and OpenCV with the reader BUILD.md documents, pixels close to a raw build of the same source,
checksums of the stored bytes, inspect's codec report, verify (and --source), corrupt samples
named by verify and inspect, --threads and --resume byte-identical, and usage errors.

Usage: test_jpeg.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case.
"""

import os
import re
import sys
from pathlib import Path

import cv2
import h5py
import numpy as np

from cli_helpers import (
    build, cache_files, check, check_eq, compare_caches, load_manifest, main, partial_dir,
    run, run_json, smooth_rgb, write_img, xxh64,
)

SOURCE_ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", Path(__file__).resolve().parents[2]))


def usage_reader(storage="npy"):
    """The numpy + OpenCV reader of docs/BUILD.md's "JPEG caches" paragraph, as a function; for
    HDF5 storage with the substitution BUILD.md gives (h5py in place of np.load)."""
    text = (SOURCE_ROOT / "docs" / "BUILD.md").read_text()
    at = text.index("**JPEG caches (`--codec jpeg[:Q]`).**")
    block = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    check(len(block.strip().splitlines()) <= 5, f"the reader is longer than 5 lines:\n{block}")
    if storage == "hdf5":
        np_load = 'np.load(f"{d}/{s[\'file\']}", mmap_mode="r")'
        h5_read = 'h5py.File(f"{d}/{s[\'file\']}")["images"]'
        check(np_load in block and h5_read in text[at:at + 3000],
              "BUILD.md's reader and its HDF5 note no longer match this test")
        block = "import h5py\n" + block.replace(np_load, h5_read)

    def read(d, i):
        scope = {"d": str(d), "i": i}
        exec(block, scope)  # noqa: S102 - the documented snippet is what is tested
        return scope["img"]
    return read


def make_photo_like_folder(src, n_per_class=8, sizes=((48, 64), (64, 48), (40, 40), (90, 30))):
    """Smooth, photo-like PNG/JPEG images of varied sizes in classes a/b/c."""
    k = 0
    for c in "abc":
        for j in range(n_per_class):
            h, w = sizes[(k + j) % len(sizes)]
            ext = ".png" if j % 2 else ".jpg"
            write_img(Path(src) / c / f"img{j:02d}{ext}", smooth_rgb(100 + k, h, w))
            k += 1


def stored_streams(out):
    """Each sample's JPEG bytes, read straight from the shards with numpy/h5py and the index."""
    m = load_manifest(out)
    index = np.load(out / "jpeg-index.npy")
    check_eq(index.shape, (m["count"], 4), "jpeg-index.npy shape")
    check_eq(index.dtype, np.dtype("<i8"), "jpeg-index.npy dtype")
    streams = []
    for s in m["shards"]:
        if m["storage"] == "npy":
            data = np.load(out / s["file"], mmap_mode="r")
        else:
            with h5py.File(out / s["file"], "r") as f:
                data = f["images"][()]
        check_eq(data.dtype, np.dtype("uint8"), f"{s['file']} dtype")
        check_eq(data.ndim, 1, f"{s['file']} is a flat byte array")
        end = 0
        for i in range(s["first"], s["first"] + s["count"]):
            off, n, h, w = (int(v) for v in index[i])
            check_eq(off, end, f"sample {i} starts where the previous one ended")
            streams.append(bytes(np.asarray(data[off:off + n])))
            end = off + n
        check_eq(end, data.shape[0], f"{s['file']}: the streams cover its bytes")
    return m, index, streams


def check_jpeg_cache(out, raw_out, quality, storage, layout):
    """A JPEG cache agrees with the raw build of the same source: same labels, sources and
    geometry, pixels within JPEG's error, checksums of the stored streams; the documented reader
    returns the same pixels as a plain imdecode."""
    m, index, streams = stored_streams(out)
    check_eq(m["format_version"], 2, "format_version")
    check_eq(m["codec"], "jpeg", "codec")
    check_eq(m["recipe"]["quality"], quality, "recipe.quality")
    check_eq(m["storage"], storage, "storage")
    check_eq(m["layout"], layout, "layout")
    check_eq(m["files"]["index"]["file"], "jpeg-index.npy", "files.index")
    raw = load_manifest(raw_out)
    check_eq(m["count"], raw["count"], "count vs raw build")
    check_eq(m["class_counts"], raw["class_counts"], "class counts vs raw build")
    check(np.array_equal(np.load(out / "labels.npy"), np.load(raw_out / "labels.npy")),
          "labels differ from the raw build's")
    check_eq((out / "sources.jsonl").read_text(), (raw_out / "sources.jsonl").read_text(),
             "sources.jsonl vs raw build")
    sums = np.load(out / "checksums.npy")
    reader = usage_reader(storage)
    raw_index = np.load(raw_out / "ragged-index.npy") if layout == "ragged" else None
    C = m["shape"][2]
    diffs = []
    for i, stream in enumerate(streams):
        check_eq(int(sums[i]), xxh64(stream), f"checksums.npy[{i}] (XXH64 of the stored stream)")
        check(stream[:3] == b"\xff\xd8\xff", f"sample {i} is not a JPEG stream")
        img = cv2.imdecode(np.frombuffer(stream, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
        h, w = int(index[i][2]), int(index[i][3])
        check_eq(img.shape, (h, w, C), f"sample {i} decoded shape")
        doc = reader(out, i)
        check(np.array_equal(doc[..., ::-1], img), f"BUILD.md's reader differs on sample {i}")
        # The raw build's pixels for the same sample.
        if layout == "ragged":
            s = next(s for s in raw["shards"] if s["first"] <= i < s["first"] + s["count"])
            data = (np.load(raw_out / s["file"], mmap_mode="r") if storage == "npy"
                    else h5py.File(raw_out / s["file"], "r")["images"][()])
            off, rh, rw = (int(v) for v in raw_index[i])
            check_eq((rh, rw), (h, w), f"sample {i} size vs raw build")
            want = np.asarray(data[off:off + h * w * C]).reshape(h, w, C)
        else:
            s = next(s for s in raw["shards"] if s["first"] <= i < s["first"] + s["count"])
            data = (np.load(raw_out / s["file"], mmap_mode="r") if storage == "npy"
                    else h5py.File(raw_out / s["file"], "r")["images"][()])
            want = np.asarray(data[i - s["first"]])
        diffs.append(np.abs(img.astype(int) - want.astype(int)).mean())
    check(max(diffs) < 6.0, f"JPEG pixels far from raw: mean abs diff up to {max(diffs):.2f}")
    return m


def case_jpeg_build_interop(tmp):
    """Every storage and layout: build --codec jpeg, read back with numpy/h5py/OpenCV, inspect
    and verify (with --source)."""
    src = tmp / "src"
    make_photo_like_folder(src)
    for storage in ("npy", "hdf5"):
        for layout, geo in (("fixed", ["--size", "32x40"]), ("ragged", ["--max-side", "36"])):
            opts = ["--layout", layout, *geo, "--storage", storage, "--shard-size", "3K"]
            raw, jpg = tmp / f"raw_{storage}_{layout}", tmp / f"jpg_{storage}_{layout}"
            build(src, raw, *opts)
            q = 90 if storage == "npy" else 75
            build(src, jpg, *opts, "--codec", "jpeg" if q == 90 else f"jpeg:{q}")
            m = check_jpeg_cache(jpg, raw, q, storage, layout)
            check(len(m["shards"]) > 1, f"{jpg.name}: expected several 3K shards")
            info = run_json(["inspect", jpg, "--json"])
            check_eq(info["codec"], "jpeg", "inspect codec")
            check_eq(info["quality"], q, "inspect quality")
            stored = sum(int(r[1]) for r in np.load(jpg / "jpeg-index.npy"))
            check_eq(info["stored_bytes"], stored, "inspect stored_bytes")
            check(0 < info["ratio_to_raw"] < 0.5,
                  f"inspect ratio_to_raw {info['ratio_to_raw']} (smooth images compress well)")
            text = run(["inspect", jpg]).stdout
            check(f"jpeg, quality {q}" in text, f"inspect text lacks the codec line:\n{text}")
            raw_info = run_json(["inspect", raw, "--json"])
            check_eq(raw_info["codec"], "raw", "inspect codec of a raw cache")
            check_eq(raw_info["ratio_to_raw"], 1.0, "raw ratio")
            ok = run(["verify", jpg, "--source"]).stdout
            check("OK" in ok, f"verify --source: {ok}")
            run(["inspect", jpg, "--sample", "3", "--out", tmp / "s.png"])
            png = cv2.imread(str(tmp / "s.png"), cv2.IMREAD_COLOR)
            check(png is not None and png.size > 0, "inspect --sample wrote no PNG")
            run(["inspect", jpg, "--grid", "6", "--out", tmp / "g.png"])


def restart_markers(stream):
    """The restart interval (DRI) of a stream's header and the RSTn markers after its SOS."""
    interval, p = 0, 2
    while stream[p + 1] != 0xDA:  # walk the marker segments up to SOS
        n = int.from_bytes(stream[p + 2:p + 4], "big")
        if stream[p + 1] == 0xDD:
            interval = int.from_bytes(stream[p + 4:p + 6], "big")
        p += 2 + n
    data = stream[p:]
    return interval, sum(data.count(bytes([0xFF, 0xD0 + k])) for k in range(8))


def case_jpeg_restart_segments(tmp):
    """Streams of 128x128 px and more carry restart markers, every 4 MCUs (64 px) where the MCUs
    per row allow it; they decode to exactly the pixels of the same build without markers (the
    streams dscache wrote before them, DSCACHE_TEST_JPEG_NO_RESTART), and `verify --source`
    accepts both kinds."""
    src = tmp / "src"
    make_photo_like_folder(src, n_per_class=2, sizes=((200, 260), (180, 200)))
    new, old = tmp / "new", tmp / "old"
    opts = ["--size", "160x192", "--codec", "jpeg"]
    build(src, new, *opts)
    build(src, old, *opts, env_extra={"DSCACHE_TEST_JPEG_NO_RESTART": "1"})
    _, _, a = stored_streams(new)
    _, _, b = stored_streams(old)
    check_eq(len(a), 6, "samples")
    for i, (x, y) in enumerate(zip(a, b)):
        # 4:2:0: 12 MCUs of 16 px per row -> a segment of 4 MCUs; 10 MCU rows x 3 segments.
        check_eq(restart_markers(x), (4, 10 * 3 - 1), f"sample {i}: interval and markers")
        check_eq(restart_markers(y), (0, 0), f"sample {i} of the old-style build")
        check(x != y, f"sample {i}: the streams differ")
        px = cv2.imdecode(np.frombuffer(x, np.uint8), cv2.IMREAD_COLOR)
        py = cv2.imdecode(np.frombuffer(y, np.uint8), cv2.IMREAD_COLOR)
        check(px is not None and px.shape == (160, 192, 3), f"sample {i} decodes")
        check(np.array_equal(px, py), f"sample {i}: restart markers changed pixels")
    for out in (new, old):
        ok = run(["verify", out, "--source"]).stdout
        check("OK" in ok, f"verify --source {out.name}: {ok}")
    # A small image gets none: 32x40 is below 128x128 pixels.
    small = tmp / "small"
    build(src, small, "--size", "32x40", "--codec", "jpeg")
    check(all(restart_markers(x) == (0, 0) for x in stored_streams(small)[2]), "small: none")


def case_jpeg_threads_resume(tmp):
    """--threads 1 and 2 give byte-identical JPEG caches, and a build killed after 2 shards and
    resumed equals an uninterrupted one (shards kept, not rewritten)."""
    src = tmp / "src"
    make_photo_like_folder(src, n_per_class=10)
    base = ["--size", "32", "--shard-size", "4K", "--shuffle", "5"]
    opts = base + ["--codec", "jpeg:85"]
    a, b = tmp / "a", tmp / "b"
    build(src, a, *opts, "--threads", "1")
    build(src, b, *opts, "--threads", "2")
    compare_caches(a, b, "--threads 1 vs 2")
    c = tmp / "c"
    build(src, c, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:2"})
    part = partial_dir(c)
    kept = {p.name: p.stat().st_ino for p in part.glob("images-*.npy")}
    check_eq(len(kept), 2, "shards in the partial dir after the kill")
    p = run(["build", src, c, *base, "--codec", "jpeg:80", "--resume"], expect_rc=1)
    check("other options" in p.stderr, f"a resume with another quality: {p.stderr}")
    run(["build", src, c, *opts, "--resume"])
    for name, ino in kept.items():
        check_eq((c / name).stat().st_ino, ino, f"{name} was rewritten, not resumed")
    compare_caches(a, c, "resumed vs uninterrupted")
    check_eq(sorted(cache_files(a)), sorted(cache_files(c)), "files")


def case_jpeg_corrupt(tmp):
    """A damaged stream is reported by verify (shard and sample) and by inspect --sample, never
    a crash; a cache whose stream is damaged but whose checksums were rewritten to match is still
    caught by verify's header check or named by inspect's decode."""
    src = tmp / "src"
    make_photo_like_folder(src)
    out = tmp / "c"
    build(src, out, "--size", "32", "--codec", "jpeg", "--shard-size", "3K")
    m = load_manifest(out)
    index = np.load(out / "jpeg-index.npy")
    i = 5
    s = next(s for s in m["shards"] if s["first"] <= i < s["first"] + s["count"])
    shard = out / s["file"]
    arr = np.load(shard, mmap_mode="r")
    data_offset = shard.stat().st_size - arr.shape[0]
    del arr
    off, n = int(index[i][0]), int(index[i][1])
    raw = bytearray(shard.read_bytes())
    for k in range(n // 2, n):  # the second half of the stream zeroed: a torn write
        raw[data_offset + off + k] = 0
    shard.write_bytes(bytes(raw))
    p = run(["verify", out], expect_rc=5)
    check(s["file"] in p.stdout and "sample 5" in p.stdout,
          f"verify does not name {s['file']} and sample 5:\n{p.stdout}")
    p = run(["inspect", out, "--sample", str(i), "--out", tmp / "x.png"], expect_rc=None)
    check(p.returncode > 0, f"inspect --sample of a corrupt stream exited {p.returncode}")
    check(s["file"] in p.stderr and "sample 5" in p.stderr,
          f"inspect does not name the shard and sample:\n{p.stderr}")


def case_jpeg_usage(tmp):
    """Bad --codec values are usage errors (exit 2) that say what is expected."""
    src = tmp / "src"
    make_photo_like_folder(src, n_per_class=2)
    for bad in ("webp", "jpeg:0", "jpeg:101", "jpeg:", "jpeg:9x", "raw:90"):
        p = build(src, tmp / "o", "--size", "16", "--codec", bad, expect_rc=2)
        check("--codec" in p.stderr and "jpeg:Q" in p.stderr, f"--codec {bad}: {p.stderr}")
    check(not (tmp / "o").exists(), "a refused build left OUTPUT")


def case_jpeg_bench(tmp):
    """`dscache bench` serves a JPEG cache: the Loader rows decode, the disk rows count stored
    bytes, and there is no memcpy row (no pixels to copy)."""
    src = tmp / "src"
    make_photo_like_folder(src, n_per_class=20)
    out = tmp / "c"
    build(src, out, "--size", "32", "--codec", "jpeg")
    j = run_json(["bench", out, "--json", "--seconds", "0.2", "--decode-samples", "20"])
    check_eq(j.get("codec"), "jpeg", "bench codec")
    check_eq(j.get("sample_bytes"), 32 * 32 * 3, "bench sample_bytes (decoded)")
    stored = sum(int(r[1]) for r in np.load(out / "jpeg-index.npy")) / 60
    check(abs(j.get("stored_bytes_per_sample", 0) - stored) < 1e-6 * stored,
          f"bench stored_bytes_per_sample {j.get('stored_bytes_per_sample')} != {stored}")
    names = [r["name"] for r in j["rows"]]
    check(not any(n.startswith("memcpy") for n in names), f"memcpy rows on a JPEG cache: {names}")
    for r in j["rows"]:
        check(r["samples_per_s"] > 0, f"row {r['name']}: {r['samples_per_s']}")
    check(j["loader_samples_per_s"] > 0, "loader_samples_per_s")
    check(abs(j["windowed_out_of_core_bytes_per_s"]
              - j["windowed_out_of_core_samples_per_s"] * stored) < 1e-3 * j["windowed_out_of_core_bytes_per_s"],
          "out-of-core bytes/s are not stored bytes")


CASES = {
    "jpeg_build_interop": case_jpeg_build_interop,
    "jpeg_threads_resume": case_jpeg_threads_resume,
    "jpeg_restart_segments": case_jpeg_restart_segments,
    "jpeg_corrupt": case_jpeg_corrupt,
    "jpeg_usage": case_jpeg_usage,
    "jpeg_bench": case_jpeg_bench,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
