#!/usr/bin/python3
"""Tests of `dscache build` from image folders: the folder source (byte order, nested folders,
symlinks), pixels against OpenCV and numpy, resize modes, reduced decode, HDF5 storage and its
interop, bad inputs, --max-pixels, --strict, libpng's warnings. List and idx sources are in
test_build_lists.py, the output (--force, --resume, --threads, --shard-size, --shuffle) in
test_build_output.py, the ragged layout in test_build_ragged.py.

Usage: test_build.py CASE
(env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import os
import re
import struct
import sys
import zlib
from pathlib import Path

import cv2
import h5py
import numpy as np
from PIL import Image

from cli_helpers import (
    build, check, check_cache, check_eq, check_pixels_equal, class_counts_list, encode,
    huge_png_bytes, imread_grey, imread_rgb, main, make_simple_folder, partial_dir, rand_rgb,
    read_jsonl, run_json, smooth_rgb, summary_mentions_skipped, write_bytes, write_img,
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
        check_pixels_equal(images[i], ref, f"sample {i} ({rel}) differs from cv2.imread+BGR2RGB")
    ref = cv2.resize(imread_rgb(src / "c/shrink.png"), (32, 32), interpolation=cv2.INTER_AREA)
    check_pixels_equal(images[5], ref, "c/shrink.png: stretch != cv2.resize INTER_AREA")
    ref = cv2.resize(imread_rgb(src / "c/grow.png"), (32, 32), interpolation=cv2.INTER_LINEAR)
    check_pixels_equal(images[4], ref, "c/grow.png: stretch != cv2.resize INTER_LINEAR")

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
        check_pixels_equal(gimages[i][..., 0], ref,
                           f"grey sample {i} ({rel}) differs from IMREAD_GRAYSCALE")


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
            check_pixels_equal(got, ref, f"--resize {mode}: {name} differs from the reference")


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
    check_pixels_equal(imf[0], ref, "--no-reduced-decode: sample != full decode + INTER_AREA")
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
        check_pixels_equal(images[i], ref, f"{rel}: pixels differ from the expected RGB")
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
    write_img(src / "a/too_65x64.bmp", rand_rgb(101, 65, 64))
    write_img(src / "a/too_64x65.jpg", smooth_rgb(102, 64, 65))
    # A PNG shrunk while it is decoded never sits whole in memory: not held to the limit.
    write_img(src / "a/streamed_65x64.png", rand_rgb(103, 65, 64))
    out = tmp / "out"
    build(src, out, "--size", "16", "--max-pixels", "4096")
    m, _, _ = check_cache(out)
    check_eq(m["recipe"]["max_pixels"], 4096, "recipe.max_pixels")
    check_eq(read_jsonl(out / "sources.jsonl"), ["a/ok_64x64.png", "a/streamed_65x64.png"],
             "kept (64*64 == limit; a streamed PNG)")
    skips = read_jsonl(out / "skipped.jsonl")
    check_eq(sorted(s["source"] for s in skips), ["a/too_64x65.jpg", "a/too_65x64.bmp"],
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


def case_png_streamed(tmp):
    """PNGs decoded row by row into their shrink (docs/BUILD.md "Large PNGs"): the samples equal
    cv2.imread + cv2.resize(INTER_AREA) exactly, for RGB, RGBA, palette, 16-bit and grey sources
    at fractional and integer ratios. --max-pixels 1000 (below every source) shows they were
    streamed: the whole-image path would have skipped them."""
    src = tmp / "src"
    files = {
        "a/rgb_517x311.png": rand_rgb(1, 311, 517),
        "a/smooth_640x480.png": smooth_rgb(2, 480, 640),
        "a/rgba_300x200.png": np.concatenate([rand_rgb(3, 200, 300), rand_rgb(4, 200, 300, 1)], 2),
        "a/rgb16_250x170.png": np.random.default_rng(5).integers(0, 65536, (170, 250, 3),
                                                                 dtype=np.uint16),
        "a/grey_370x185.png": rand_rgb(6, 185, 370, 1)[..., 0],
    }
    for rel, arr in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        bgr = arr if arr.ndim == 2 else cv2.cvtColor(arr, cv2.COLOR_RGBA2BGRA if arr.shape[2] == 4
                                                      else cv2.COLOR_RGB2BGR)
        check(cv2.imwrite(str(path), bgr), f"fixture {rel}")
    pal = Image.fromarray(smooth_rgb(7, 222, 333)).convert("P", palette=Image.ADAPTIVE, colors=64)
    pal.save(src / "a/palette_333x222.png")
    for size in ("37", "74"):
        out = tmp / f"out{size}"
        build(src, out, "--size", size, "--resize", "stretch", "--max-pixels", "1000")
        m, images, _ = check_cache(out)
        sources = read_jsonl(out / "sources.jsonl")
        check_eq(len(sources), 6, "every PNG built, none skipped by --max-pixels")
        for img, rel in zip(images, sources):
            want = cv2.resize(imread_rgb(src / rel), (int(size), int(size)),
                              interpolation=cv2.INTER_AREA)
            check_pixels_equal(img, want, f"{rel} at --size {size}")


CASES = {
    "folder_basic": case_folder_basic,
    "folder_symlinks": case_folder_symlinks,
    "folder_pixels_interop_npy": case_folder_pixels_interop_npy,
    "resize_modes": case_resize_modes,
    "reduced_decode": case_reduced_decode,
    "hdf5_interop": case_hdf5_interop,
    "png_warnings_quiet": case_png_warnings_quiet,
    "bad_inputs": case_bad_inputs,
    "max_pixels": case_max_pixels,
    "png_streamed": case_png_streamed,
    "strict": case_strict,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
