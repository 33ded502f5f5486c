#!/usr/bin/python3
"""Tests of `dscache build`: folder, csv/tsv list and idx sources, resize modes, reduced
decode, HDF5 storage and its interop, bad inputs, --max-pixels, --strict, symlinks, an existing
OUTPUT and --force, --resume after SIGKILL, --threads determinism, usage errors, --shard-size, and
the ragged layout (build, hdf5, usage, resume and threads).

Usage: test_build.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import gzip
import os
import re
import struct
import sys
import time
import zlib
from pathlib import Path

import cv2
import h5py
import numpy as np
from PIL import Image

from cli_helpers import (
    BASE_FILES, build, cache_files, check, check_cache, check_eq, check_ragged_cache,
    class_counts_list, compare_caches, encode, huge_png_bytes, imread_grey, imread_rgb,
    load_images, load_labels, load_manifest, load_shard, main, make_ragged_folder, make_simple_folder, partial_dir,
    rand_rgb, read_jsonl, run, run_json, smooth_rgb, summary_mentions_skipped, write_bytes,
    write_img,
)


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
    p = run(["build", lst, out, "--size", "16", "--classes", "cat,dog,bird", "--shuffle", "none"],
            cwd=str(tmp))
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


def case_csv_header(tmp):
    """A CSV as pandas writes it (`image_path,label` header) with 12 integer classes: the header
    is not a sample, no class `label` appears, and integer labels keep their values (before: exit
    0 with the header skipped, a 13th class `label`, and labels sorted as strings, so CSV label 2
    became index 4)."""
    root = tmp / "data"
    rows = []
    for k in range(24):
        rel = f"imgs/{k:02d}.png"
        write_img(root / rel, rand_rgb(100 + k, 12, 12))
        rows.append((rel, (k * 5) % 12))
    for head in ("image_path,label", "filename,class"):
        lst = root / f"list_{head.split(',')[0]}.csv"
        lst.write_text(head + "\n" + "".join(f"{p},{l}\n" for p, l in rows))
        out = tmp / f"out_{head.split(',')[0]}"
        p = build(lst, out, "--size", "12")
        m, _, labels = check_cache(out)
        check_eq(m["skipped"], 0, f"{head}: skipped")
        check("skipped" in p.stdout and "(0 skipped)" in p.stdout, f"{head}: {p.stdout!r}")
        check_eq(m["classes"], [str(c) for c in range(12)], f"{head}: classes")
        check_eq(labels.tolist(), [l for _, l in rows], f"{head}: labels keep their values")
        check_eq(read_jsonl(out / "sources.jsonl"), [r[0] for r in rows], f"{head}: sources")


def png_with_bad_iccp(pixels):
    """A valid PNG of `pixels` (RGB) with an iCCP chunk whose profile libpng rejects ("iCCP: too
    short"): a warning, and the image still decodes."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ok, png = cv2.imencode(".png", cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))
    check(ok, "fixture: imencode")
    png = png.tobytes()
    profile = struct.pack(">I", 132) + bytes(128)
    return png[:33] + chunk(b"iCCP", b"bad\0\0" + zlib.compress(profile)) + png[33:]  # after IHDR


def case_png_warnings_quiet(tmp):
    """PNGs with a bad iCCP profile: libpng's warnings (one line per file, through OpenCV) do not
    reach stderr; a --quiet build prints nothing there, a plain one a single summary line
    (before: 24 "libpng warning: iCCP: too short" lines under --quiet). The pixels are built."""
    src = tmp / "src"
    imgs = {}
    for k in range(24):
        rel = f"c{k % 2}/f{k:02d}.png"
        imgs[rel] = rand_rgb(300 + k, 16, 16)
        write_bytes(src / rel, png_with_bad_iccp(imgs[rel]))
    check(cv2.imread(str(src / "c0/f00.png")) is not None, "fixture: OpenCV decodes it")
    out = tmp / "out"
    p = build(src, out, "--size", "16", "--quiet", "--threads", "2")
    check_eq(p.stderr, "", "stderr of a --quiet build")
    m, images, _ = check_cache(out)
    check_eq((m["count"], m["skipped"]), (24, 0), "count, skipped")
    names = read_jsonl(out / "sources.jsonl")
    for i, rel in enumerate(names):
        check(np.array_equal(images[i], imgs[rel]), f"sample {i} ({rel}) pixels")
    p = build(src, tmp / "out2", "--size", "16", "--threads", "2")
    lines = p.stderr.splitlines()
    check(not any(x.startswith("libpng") for x in lines), f"libpng lines on stderr: {p.stderr!r}")
    check_eq(sum("24x libpng warning: iCCP: too short" in x for x in lines), 1,
             f"one summary of the warnings: {p.stderr!r}")


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
    p = build(src, out, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:3"})
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
    run(["build", src, out] + opts + ["--shuffle", "none", "--resume"])
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
        (["build", src, out, "--size", "8", "--storage", "foo"],
         "--storage: 'foo' is not one of npy, hdf5"),
        (["build", src, out, "--size", "8", "--layout", "jagged"],
         "--layout: 'jagged' is not one of fixed, ragged"),
        (["build", src, out, "--size", "8", "--channels", "2"], "--channels"),
        (["build", src, out, "--size", "8", "--resize", "wobble"],
         "--resize: 'wobble' is not one of stretch, crop, pad"),
        (["build", src, out, "--size", "8", "--shard-size", "12X"],
         "--shard-size '12X': expected a positive byte count"),
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
          env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:2"})
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
    build(src, out2, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:1"})
    other = ["--layout", "ragged", "--max-side", "20", "--shard-size", "5000"]
    p = build(src, out2, *other, "--resume", expect_rc=None)
    check(p.returncode not in (0, -9), f"--resume with another --max-side: exit {p.returncode}")
    check(not out2.exists(), "--resume with another --max-side produced a cache")


def case_shuffle_build(tmp):
    """--shuffle SEED: a seeded permutation of the source order, the same samples (each still
    named in sources.jsonl), identical for any thread count, resumable, verifiable."""
    src = tmp / "src"
    make_mixed_folder(src)  # 4 class folders, 41 files, one of them bad
    opts = ["--size", "24", "--shard-size", str(24 * 24 * 3 * 7), "--quiet"]
    plain = tmp / "plain"
    build(src, plain, *opts)
    mp = load_manifest(plain)
    check("shuffle_seed" not in mp["recipe"], "an unshuffled build records no shuffle_seed")
    names_p = read_jsonl(plain / "sources.jsonl")
    imgs_p, labs_p = load_images(plain, mp), load_labels(plain)
    by_name = {n: (imgs_p[i], labs_p[i]) for i, n in enumerate(names_p)}

    outs = []
    for t in (1, 2):
        out = tmp / f"shuf_t{t}"
        build(src, out, *opts, "--shuffle", "7", "--threads", str(t))
        outs.append(out)
        time.sleep(1.05)  # so a timestamp inside a file would differ
    compare_caches(outs[0], outs[1], "--shuffle 7: --threads 1 vs 2")
    out = outs[0]
    m, _, _ = check_cache(out)
    check_eq(m["recipe"].get("shuffle_seed"), 7, "recipe.shuffle_seed")
    check_eq((m["count"], m["skipped"]), (mp["count"], mp["skipped"]), "count, skipped")
    check_eq(m["class_counts"], mp["class_counts"], "class_counts")
    names = read_jsonl(out / "sources.jsonl")
    check_eq(sorted(names), sorted(names_p), "the same source files, each once")
    check(names != names_p, "--shuffle 7 stored the samples in source order")
    imgs, labs = load_images(out, m), load_labels(out)
    for i, n in enumerate(names):
        check(np.array_equal(imgs[i], by_name[n][0]), f"sample {i} ({n}): pixels differ")
        check_eq(int(labs[i]), int(by_name[n][1]), f"sample {i} ({n}): label")
    # A class-sorted source no longer comes in runs of one class.
    runs = 1 + sum(1 for a, b in zip(labs, labs[1:]) if a != b)
    check(runs > 10, f"labels still come in {runs} runs of one class")
    other = tmp / "shuf_seed8"
    build(src, other, *opts, "--shuffle", "8")
    check(read_jsonl(other / "sources.jsonl") != names, "seeds 7 and 8 gave the same order")
    p = run(["verify", out, "--source"])
    check("OK" in p.stdout, f"verify --source: {p.stdout!r}")
    r = run(["inspect", out])
    check("--shuffle 7" in r.stdout, f"inspect does not show the shuffle: {r.stdout}")

    # Killed after 2 shards, resumed: identical to the uninterrupted build.
    killed = tmp / "killed"
    build(src, killed, *opts, "--shuffle", "7", expect_rc=-9,
          env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:2"})
    check(partial_dir(killed).is_dir(), "no partial dir after the kill")
    p = build(src, killed, *opts, "--shuffle", "8", "--resume", expect_rc=1)
    check("other options" in p.stderr, f"another seed resumed: {p.stderr}")
    run(["build", src, killed] + opts + ["--shuffle", "7", "--resume"])
    compare_caches(killed, out, "--shuffle 7: resumed vs uninterrupted")

    # Usage: a seed is a non-negative integer.
    for bad in ("-1", "x", "", "18446744073709551616", "1.5"):
        p = build(src, tmp / "bad", *opts, "--shuffle", bad, expect_rc=2)
        check("--shuffle" in p.stderr, f"--shuffle {bad!r}: stderr does not name it: {p.stderr}")


def case_shuffle_default(tmp):
    """Without --shuffle a build stores the samples in build_order(n, 0): byte-identical to
    --shuffle 0, not the source order (--shuffle none), and the manifest says so."""
    src = tmp / "src"
    make_simple_folder(src, ["a", "b", "c"], 12, (8, 8), seed=3)
    default, zero, none = tmp / "default", tmp / "zero", tmp / "none"
    run(["build", src, default, "--size", "8"])
    run(["build", src, zero, "--size", "8", "--shuffle", "0"])
    run(["build", src, none, "--size", "8", "--shuffle", "none"])
    compare_caches(default, zero, "default build vs --shuffle 0")
    check_eq(load_manifest(default)["recipe"].get("shuffle_seed"), 0, "default shuffle_seed")
    check("shuffle_seed" not in load_manifest(none)["recipe"], "--shuffle none wrote a seed")
    d_src = read_jsonl(default / "sources.jsonl")
    n_src = read_jsonl(none / "sources.jsonl")
    check_eq(sorted(d_src), sorted(n_src), "the same samples")
    check(d_src != n_src, "the default build kept the source order")
    check_eq(n_src, sorted(n_src), "--shuffle none keeps the (sorted) source order")
    p = run(["build", src, tmp / "bad", "--size", "8", "--shuffle", "nope"], expect_rc=2)
    check("or none" in p.stderr, f"--shuffle nope: {p.stderr}")


def case_shuffle_idx(tmp):
    """--shuffle on an idx source: sample i holds image k of the idx file, k from its name."""
    rng = np.random.default_rng(3)
    imgs = rng.integers(0, 256, (50, 8, 8), dtype=np.uint8)
    labels = (np.arange(50) // 5).astype(np.uint8)  # class-sorted, 10 classes
    (tmp / "train-images-idx3-ubyte").write_bytes(idx_bytes(imgs))
    (tmp / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    out = tmp / "out"
    build(tmp / "train-images-idx3-ubyte", out, "--shuffle", "123", "--quiet")
    m = load_manifest(out)
    got, lab = load_images(out, m), load_labels(out)
    names = read_jsonl(out / "sources.jsonl")
    ks = [int(n.rsplit("#", 1)[1]) for n in names]
    check_eq(sorted(ks), list(range(50)), "every idx image once")
    check(ks != list(range(50)), "not shuffled")
    for i, k in enumerate(ks):
        check(np.array_equal(got[i][..., 0], imgs[k]), f"sample {i}: not idx image {k}")
        check_eq(int(lab[i]), int(labels[k]), f"sample {i}: label of idx image {k}")
    p = run(["verify", out, "--source"])
    check("OK" in p.stdout, f"verify --source: {p.stdout!r}")


CASES = {
    "folder_basic": case_folder_basic,
    "folder_symlinks": case_folder_symlinks,
    "folder_pixels_interop_npy": case_folder_pixels_interop_npy,
    "resize_modes": case_resize_modes,
    "reduced_decode": case_reduced_decode,
    "hdf5_interop": case_hdf5_interop,
    "csv_list": case_csv_list,
    "csv_header": case_csv_header,
    "png_warnings_quiet": case_png_warnings_quiet,
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
    "usage_errors": case_usage_errors,
    "shard_split": case_shard_split,
    "ragged_build": case_ragged_build,
    "ragged_hdf5": case_ragged_hdf5,
    "ragged_usage": case_ragged_usage,
    "ragged_resume_threads": case_ragged_resume_threads,
    "shuffle_build": case_shuffle_build,
    "shuffle_idx": case_shuffle_idx,
    "shuffle_default": case_shuffle_default,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
