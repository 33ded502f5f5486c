#!/usr/bin/python3
"""Tests of caches with fields (docs/FORMAT.md "Fields (format_version 3)"): a table build
(mask, int, float, multi-hot and text columns) read back with numpy and h5py, a COCO build's
boxes against its masks under every resize policy and the ragged layout, bad rows and
annotations as named skips, flipped bytes in field files found by verify, --resume and merge
equal to one build, and inspect's field list, values and pictures.

Usage: test_fields.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import csv
import json
import re
import shutil
import sys
from pathlib import Path

import cv2
import h5py
import numpy as np

from cli_helpers import (
    build, check, check_eq, compare_caches, file_xxh64, imread_rgb, load_manifest, main, partial_dir, read_jsonl,
    run, run_json, write_img, xxh64,
)

WHITE, RED, GREY = (255, 255, 255), (255, 0, 0), (0, 0, 0)
RED_ID = 7  # the mask id of every red rectangle


# --------------------------------------------------------------------------------------------
# Reading a cache's fields with numpy.

def load_npy(path):
    arr = np.load(path, mmap_mode="r")
    check(isinstance(arr, np.memmap), f"{path}: numpy.load(mmap_mode='r') gave {type(arr)}")
    return arr


def load_fields(out):
    """{name: [value of sample i]} read from the field files the manifest lists; each file's
    size and XXH64 checked against the manifest. Fixed kinds: the row; variable kinds: the rows
    [offsets[i], offsets[i + 1])."""
    out = Path(out)
    m = load_manifest(out)
    check_eq(m["format_version"], 3, "manifest format_version of a cache with fields")
    values = {f["name"]: [] for f in m["fields"]}
    for k, s in enumerate(m["shards"]):
        check_eq(list(s["fields"]), [f["name"] for f in m["fields"]], f"shards[{k}].fields keys")
        for f in m["fields"]:
            ent = s["fields"][f["name"]]
            for part in ("values", "offsets"):
                if part not in ent:
                    continue
                p = out / ent[part]["file"]
                check_eq(ent[part]["bytes"], p.stat().st_size, f"{p.name} bytes")
                check_eq(ent[part]["xxh64"].lower(), file_xxh64(p), f"{p.name} xxh64")
            want_name = f"{f['name']}-{k:05d}.npy"
            check_eq(ent["values"]["file"], want_name, f"shards[{k}].fields.{f['name']} file")
            vals = load_npy(out / ent["values"]["file"])
            if "offsets" in ent:
                check_eq(ent["offsets"]["file"], f"{f['name']}-offsets-{k:05d}.npy",
                         f"shards[{k}] offsets file")
                off = load_npy(out / ent["offsets"]["file"])
                check_eq(off.dtype, np.dtype("<i8"), f"{ent['offsets']['file']} dtype")
                check_eq(off.shape, (s["count"] + 1,), f"{ent['offsets']['file']} shape")
                check(off[0] == 0 and off[-1] == len(vals) and np.all(np.diff(off) >= 0),
                      f"{ent['offsets']['file']}: offsets {off.tolist()} vs {len(vals)} rows")
                values[f["name"]] += [np.array(vals[off[j]:off[j + 1]]) for j in range(s["count"])]
            else:
                check_eq(len(vals), s["count"], f"{ent['values']['file']} rows")
                values[f["name"]] += [np.array(vals[j]) for j in range(s["count"])]
    return m, values


def fixed_images(out, m):
    parts = []
    for s in m["shards"]:
        p = Path(out) / s["file"]
        if p.suffix == ".h5":
            with h5py.File(p, "r") as f:
                parts.append(f["images"][...])
        else:
            parts.append(np.array(load_npy(p)))
    return np.concatenate(parts)


def ragged_images(out, m):
    idx = np.load(Path(out) / "ragged-index.npy")
    imgs = []
    for s in m["shards"]:
        data = load_npy(Path(out) / s["file"])
        for j in range(s["count"]):
            off, h, w = idx[s["first"] + j]
            imgs.append(np.array(data[off:off + h * w * 3]).reshape(h, w, 3))
    return imgs


def check_checksums(out, m, values, images):
    """checksums.npy: (count, 1 + F), column 1 + j the XXH64 of field j's bytes."""
    sums = np.load(Path(out) / "checksums.npy")
    check_eq(sums.shape, (m["count"], 1 + len(m["fields"])), "checksums.npy shape")
    for i in range(m["count"]):
        check_eq(int(sums[i, 0]), xxh64(np.ascontiguousarray(images[i]).tobytes()),
                 f"checksums[{i}, 0]")
        for j, f in enumerate(m["fields"]):
            v = np.ascontiguousarray(values[f["name"]][i]).tobytes()
            check_eq(int(sums[i, 1 + j]), xxh64(v), f"checksums[{i}, {1 + j}] ({f['name']})")


def verify_ok(out):
    p = run(["verify", out])
    check(re.search(r"\bOK\b", p.stdout), f"verify {out}: stdout lacks OK: {p.stdout!r}")


# --------------------------------------------------------------------------------------------
# A table with every column type.

def rect_image(h, w, white, red):
    """A grey picture with a white and a red rectangle ((x0, y0, x1, y1), edges), and its mask
    (white: its id, red: RED_ID)."""
    img = np.zeros((h, w, 3), np.uint8)
    mask = np.zeros((h, w), np.uint8)
    (x0, y0, x1, y1), wid = white
    img[y0:y1, x0:x1] = WHITE
    mask[y0:y1, x0:x1] = wid
    rx0, ry0, rx1, ry1 = red
    img[ry0:ry1, rx0:rx1] = RED
    mask[ry0:ry1, rx0:rx1] = RED_ID
    return img, mask


TABLE_ROWS = [
    # count, score, tags, caption
    (3, 0.5, "b;a", "a cat"),
    (-2, -2e3, "c", "caf\u00e9 \u2615, two words"),
    (2 ** 40, 1.25, "a;c;b", ""),
    (0, 0.0, "", "line \"quoted\""),
    (7, 3.5, "b", "x"),
    (11, -0.125, "a", "\u65e5\u672c"),
]


def make_table(root, rows=TABLE_ROWS, name="list.csv", extra=None):
    """Images (40x48, rectangles) and masks for each row, and the CSV; returns the rows as
    dicts (what the CSV says) in order."""
    root = Path(root)
    recs = []
    for i, (count, score, tags, caption) in enumerate(rows):
        white = ((4 + 2 * i, 5, 22 + 2 * i, 25), 1 + i % 3)
        red = (28, 18 + i, 46, 36 + i % 3)
        img, mask = rect_image(40, 48, white, red)
        write_img(root / f"img/{i}.png", img)
        write_img(root / f"mask/{i}.png", mask)
        recs.append({"image_path": f"img/{i}.png", "label": "odd" if i % 2 else "even",
                     "mask_path": f"mask/{i}.png", "count": str(count), "score": repr(score),
                     "tags": tags, "caption": caption})
    if extra:
        recs += extra
    with open(root / name, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    return recs


def check_table_values(out, recs, size):
    m, values = load_fields(out)
    names = [f["name"] for f in m["fields"]]
    check_eq(names, ["mask_path", "count", "score", "tags", "caption"], "field order")
    kinds = {f["name"]: (f["kind"], f["dtype"], f["shape"]) for f in m["fields"]}
    check_eq(kinds, {"mask_path": ("mask", "uint8", []), "count": ("scalar", "int64", []),
                     "score": ("scalar", "float32", []), "tags": ("array", "uint8", [3]),
                     "caption": ("text", "uint8", [])}, "field kinds")
    tag_names = sorted({t for r in recs for t in r["tags"].split(";") if t})
    check_eq(next(f for f in m["fields"] if f["name"] == "tags")["classes"], tag_names,
             "multi-hot classes (sorted names)")
    check_eq(m["classes"], ["even", "odd"], "classes")
    n = len(recs)
    check_eq(m["count"], n, "count")
    labels = np.load(Path(out) / "labels.npy")
    check_eq(labels.tolist(), [0 if r["label"] == "even" else 1 for r in recs], "labels")
    # Fixed kinds as whole arrays too.
    count = np.concatenate([load_npy(Path(out) / s["fields"]["count"]["values"]["file"])
                            for s in m["shards"]])
    check_eq(count.dtype, np.dtype("<i8"), "count dtype")
    check_eq(count.tolist(), [int(r["count"]) for r in recs], "count values")
    score = np.concatenate([load_npy(Path(out) / s["fields"]["score"]["values"]["file"])
                            for s in m["shards"]])
    check_eq(score.dtype, np.dtype("<f4"), "score dtype")
    check_eq(score.tolist(), [float(np.float32(float(r["score"]))) for r in recs], "score values")
    for i, r in enumerate(recs):
        want = [1 if t in r["tags"].split(";") else 0 for t in tag_names]
        check_eq(values["tags"][i].tolist(), want, f"tags of sample {i} ({r['tags']!r})")
        check_eq(values["tags"][i].dtype, np.dtype("u1"), "tags dtype")
        check_eq(values["caption"][i].tobytes().decode("utf-8"), r["caption"],
                 f"caption of sample {i}")
    images = fixed_images(out, m)
    check_eq(images.shape, (n, size, size, 3), "images shape")
    for i in range(n):
        check_eq(values["mask_path"][i].shape, (size, size), f"mask {i} shape")
        check_mask_pixels(images[i], values["mask_path"][i], i)
    check_checksums(out, m, values, images)
    return m, values, images


def check_mask_pixels(img, mask, i):
    """Where sample i's stored image is pure white, red or grey (not blended by the resize),
    its mask holds the rectangle's id, RED_ID or 0."""
    white = np.all(img == WHITE, axis=-1)
    red = np.all(img == RED, axis=-1)
    grey = np.all(img == GREY, axis=-1)
    check(white.sum() > 10 and red.sum() > 10 and grey.sum() > 10,
          f"sample {i}: the fixture's colours did not survive the resize")
    wid = 1 + i % 3
    for sel, want, what in ((white, wid, "white"), (red, RED_ID, "red"), (grey, 0, "grey")):
        bad = np.argwhere(sel & (mask != want))
        check(len(bad) == 0, f"sample {i}: {len(bad)} pure {what} pixels whose mask is not "
              f"{want}, e.g. (y, x) {bad[:3].tolist()}: {mask[tuple(bad[0])] if len(bad) else ''}")
    check_eq(sorted(np.unique(mask).tolist()), [0, wid, RED_ID], f"mask {i} ids")


def case_table_fields(tmp):
    src = tmp / "src"
    recs = make_table(src)
    opts = ["--size", "24", "--field", "mask_path=mask", "--field", "tags=multi-hot"]
    out = tmp / "out"
    build(src / "list.csv", out, *opts, "--quiet")
    verify_ok(out)
    m, values, images = check_table_values(out, recs, 24)
    # HDF5: the images shard read with h5py, the field files (always npy) with numpy.
    h5 = tmp / "h5"
    build(src / "list.csv", h5, *opts, "--storage", "hdf5", "--quiet")
    verify_ok(h5)
    mh, vh, ih = check_table_values(h5, recs, 24)
    # The ragged layout: each mask as large as its image, stored with offsets.
    rag = tmp / "ragged"
    build(src / "list.csv", rag, *opts[2:], "--layout", "ragged", "--max-side", "30", "--quiet")
    verify_ok(rag)
    mr, vr = load_fields(rag)
    rimgs = ragged_images(rag, mr)
    check("offsets" in mr["shards"][0]["fields"]["mask_path"], "ragged mask without offsets")
    for i, img in enumerate(rimgs):
        check_eq(img.shape, (30, 36, 3), f"ragged sample {i} shape")
        check_mask_pixels(img, vr["mask_path"][i].reshape(img.shape[:2]), i)
        check_eq(vr["caption"][i].tobytes().decode(), recs[i]["caption"], f"ragged caption {i}")
    check_checksums(rag, mr, vr, rimgs)
    # A build-time shuffle moves every field with its image (sources.jsonl says from where).
    shuf = tmp / "shuf"
    build(src / "list.csv", shuf, *opts, "--shuffle", "5", "--quiet")
    verify_ok(shuf)
    ms, vs = load_fields(shuf)
    order = [recs.index(next(r for r in recs if r["image_path"] == s))
             for s in read_jsonl(shuf / "sources.jsonl")]
    check(order != list(range(len(recs))), f"--shuffle 5 kept the source order {order}")
    for f in m["fields"]:
        for i, j in enumerate(order):
            check(np.array_equal(vs[f["name"]][i], values[f["name"]][j]),
                  f"--shuffle 5: {f['name']} of sample {i} is not that of source row {j}")
    check_eq([s["file"] for s in mh["shards"]], ["images-00000.h5"], "hdf5 shard names")
    check(np.array_equal(ih, images), "hdf5 images differ from the npy build's")
    for f in m["fields"]:
        for ext in ("values", "offsets"):
            if ext in m["shards"][0]["fields"][f["name"]]:
                name = m["shards"][0]["fields"][f["name"]][ext]["file"]
                check_eq((h5 / name).read_bytes(), (out / name).read_bytes(),
                         f"{name}: hdf5 build vs npy build")


# --------------------------------------------------------------------------------------------
# COCO: boxes against masks.

COCO_CATS = [{"id": 12, "name": "person"}, {"id": 3, "name": "car"}, {"id": 40, "name": "dog"}]
CAT_INDEX = {c["id"]: k for k, c in enumerate(COCO_CATS)}


def rle_rect(h, w, x0, y0, x1, y1):
    """Uncompressed COCO RLE (column-major counts) of the rectangle [x0, x1) x [y0, y1)."""
    m = np.zeros((h, w), np.uint8)
    m[y0:y1, x0:x1] = 1
    flat = m.T.reshape(-1)
    counts, cur, run_ = [], 0, 0
    for v in flat:
        if v != cur:
            counts.append(run_)
            cur, run_ = v, 0
        run_ += 1
    counts.append(run_)
    return {"size": [h, w], "counts": counts}


def make_coco(root, images_spec, extra_anns=(), extra_images=()):
    """images_spec: [(h, w, [(category id, kind, (x0, y0, x1, y1), crowd)])]; kind 'poly'
    (a rectangle as a polygon), 'cut' (a hexagon: the rectangle with two corners cut off),
    'rle'. Every bbox is the region's exact extent, and each of its sides is a straight edge of
    the region (a sharp corner would lose its thin tip to a nearest-neighbour resize). Returns
    the JSON's path."""
    root = Path(root)
    images, anns = [], []
    for k, (h, w, objs) in enumerate(images_spec):
        rng = np.random.default_rng(k)
        write_img(root / f"im{k}.png", rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        images.append({"id": 1000 + k, "file_name": f"im{k}.png", "height": h, "width": w})
        for cat, kind, (x0, y0, x1, y1), crowd in objs:
            if kind == "poly":
                seg = [[x0, y0, x1, y0, x1, y1, x0, y1]]
            elif kind == "cut":  # two corners cut off: every side keeps an edge
                c = min(x1 - x0, y1 - y0) // 3
                seg = [[x0 + c, y0, x1, y0, x1, y1 - c, x1 - c, y1, x0, y1, x0, y0 + c]]
            else:
                seg = rle_rect(h, w, x0, y0, x1, y1)
            anns.append({"id": len(anns) + 1, "image_id": 1000 + k, "category_id": cat,
                         "bbox": [x0, y0, x1 - x0, y1 - y0], "iscrowd": crowd,
                         "segmentation": seg, "area": float((x1 - x0) * (y1 - y0))})
    for k, (name, h, w) in enumerate(extra_images):
        write_img(root / name, np.zeros((h, w, 3), np.uint8))
        images.append({"id": 5000 + k, "file_name": name, "height": h, "width": w})
    anns += [dict(a, id=900 + j) for j, a in enumerate(extra_anns)]
    p = root / "instances.json"
    p.write_text(json.dumps({"images": images, "annotations": anns, "categories": COCO_CATS}))
    return p


# Objects kept away from the centre crop's cut (crop of 60x80 removes 10 px left and right).
COCO_IMAGES = [
    (60, 80, [(12, "poly", (14, 8, 40, 30), 0), (3, "rle", (44, 30, 66, 55), 1)]),
    (60, 80, [(40, "cut", (20, 20, 50, 50), 0)]),
    (50, 50, [(3, "poly", (5, 5, 20, 45), 0), (12, "rle", (25, 10, 45, 30), 0),
              (40, "cut", (30, 35, 48, 48), 0)]),
    (70, 40, []),
]


def mask_extent(mask, mid):
    ys, xs = np.nonzero(mask == mid)
    if len(xs) == 0:
        return None
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


def check_coco(out, ragged):
    m, values = load_fields(out)
    check_eq([f["name"] for f in m["fields"]], ["boxes", "box_labels", "box_crowd", "image_id",
                                                "mask"], "COCO field order")
    lab = next(f for f in m["fields"] if f["name"] == "box_labels")
    check_eq(lab["classes"], [c["name"] for c in COCO_CATS], "box_labels classes")
    check_eq(lab.get("rows_of"), "boxes", "box_labels rows_of")
    msk = next(f for f in m["fields"] if f["name"] == "mask")
    check_eq(msk["classes"], ["background"] + [c["name"] for c in COCO_CATS], "mask classes")
    check_eq(m["count"], len(COCO_IMAGES), "COCO count")
    images = ragged_images(out, m) if ragged else list(fixed_images(out, m))
    for i, (h0, w0, objs) in enumerate(COCO_IMAGES):
        img = images[i]
        h, w = img.shape[:2]
        mask = values["mask"][i].reshape(h, w)
        boxes = values["boxes"][i]
        labels = values["box_labels"][i].tolist()
        check_eq(int(values["image_id"][i]), 1000 + i, f"image_id of sample {i}")
        check_eq(labels, [CAT_INDEX[c] for c, _, _, _ in objs],
                 f"box_labels of sample {i} (category indexes)")
        check_eq(values["box_crowd"][i].tolist(), [cr for _, _, _, cr in objs],
                 f"box_crowd of sample {i}")
        check_eq(boxes.shape, (len(objs), 4), f"boxes of sample {i}")
        ids = sorted(set(np.unique(mask).tolist()) - {0})
        check_eq(ids, sorted(L + 1 for L in labels), f"mask ids of sample {i}")
        for b, L in zip(boxes, labels):
            ext = mask_extent(mask, L + 1)
            check(ext is not None, f"sample {i}: no mask pixels for label {L}")
            diff = np.abs(np.array(ext, np.float64) - b.astype(np.float64))
            check(np.all(diff <= 1.0), f"sample {i} ({h}x{w}): box {b.tolist()} vs the mask's "
                  f"extent {list(map(int, ext))} of id {L + 1}: off by {diff.tolist()}")
            check(0 <= b[0] < b[2] <= w and 0 <= b[1] < b[3] <= h,
                  f"sample {i}: box {b.tolist()} outside {w}x{h}")
    check_checksums(out, m, values, images)


def case_coco_boxes(tmp):
    src = tmp / "coco"
    js = make_coco(src, COCO_IMAGES)
    for mode in ("crop", "stretch", "pad"):
        out = tmp / f"out_{mode}"
        build(js, out, "--image-root", src, "--coco-mask", "semantic", "--size", "32",
              "--resize", mode, "--quiet")
        verify_ok(out)
        check_coco(out, ragged=False)
    out = tmp / "ragged"
    build(js, out, "--image-root", src, "--coco-mask", "semantic", "--layout", "ragged",
          "--max-side", "24", "--quiet")
    verify_ok(out)
    check_coco(out, ragged=True)


# --------------------------------------------------------------------------------------------
# Bad input: named skips, exit 3 with --strict.

def case_bad_rows(tmp):
    good = TABLE_ROWS[:3]
    cases = []
    # A mask of another size than its image.
    d = tmp / "masksize"
    make_table(d, good)
    write_img(d / "mask/1.png", np.zeros((20, 20), np.uint8))
    cases.append(("mask size", d / "list.csv", ["--field", "mask_path=mask"], "img/1.png",
                  r"mask.*(size|20x20|40|48)|(size|20x20).*mask"))
    # A row with a missing column.
    d = tmp / "missing"
    make_table(d, good)
    lines = (d / "list.csv").read_text().splitlines()
    lines[2] = ",".join(lines[2].split(",")[:4])
    (d / "list.csv").write_text("\n".join(lines) + "\n")
    cases.append(("missing column", d / "list.csv", ["--field", "mask_path=mask"], "line 3",
                  r"column|fields"))
    # A non-number in a float column.
    d = tmp / "nonnum"
    make_table(d, good)
    lines = (d / "list.csv").read_text().splitlines()
    cells = lines[3].split(",")
    cells[4] = "abc"
    lines[3] = ",".join(cells)
    (d / "list.csv").write_text("\n".join(lines) + "\n")
    cases.append(("non-numeric", d / "list.csv", ["--field", "score=float"], "line 4",
                  r"'abc' is not a number"))
    # COCO: a category id not in categories; a box outside its image.
    d = tmp / "cococat"
    js = make_coco(d, COCO_IMAGES[:2], extra_images=[("bad.png", 30, 30)],
                   extra_anns=[{"image_id": 5000, "category_id": 99, "bbox": [1, 1, 5, 5],
                                "iscrowd": 0, "segmentation": [[1, 1, 6, 1, 6, 6]]}])
    cases.append(("unknown category", js, ["--image-root", d, "--coco-mask", "semantic"],
                  "bad.png", r"category id 99 is not in categories"))
    d = tmp / "cocobox"
    js = make_coco(d, COCO_IMAGES[:2], extra_images=[("bad.png", 30, 30)],
                   extra_anns=[{"image_id": 5000, "category_id": 3, "bbox": [20, 20, 25, 5],
                                "iscrowd": 0, "segmentation": [[20, 20, 29, 20, 29, 24]]}])
    cases.append(("box outside", js, ["--image-root", d], "bad.png", r"outside"))
    for what, src, opts, source, reason in cases:
        out = src.parent / "out"
        p = build(src, out, "--size", "24", *opts)
        skips = read_jsonl(out / "skipped.jsonl")
        check_eq(len(skips), 1, f"{what}: skipped.jsonl lines ({skips})")
        s = skips[0]
        check(source in s["source"] or source in s["reason"],
              f"{what}: the skip does not name {source!r}: {s}")
        check(re.search(reason, s["reason"]), f"{what}: skip reason {s['reason']!r} !~ {reason!r}")
        check_eq(load_manifest(out)["skipped"], 1, f"{what}: manifest skipped")
        verify_ok(out)
        sout = src.parent / "strict"
        p = build(src, sout, "--size", "24", "--strict", *opts, expect_rc=3)
        check(source in p.stderr, f"{what}: --strict stderr does not name {source!r}: {p.stderr}")
        check(not sout.exists() and not partial_dir(sout).exists(),
              f"{what}: --strict left {sout} or its partial dir behind")


# --------------------------------------------------------------------------------------------
# verify: a flipped byte in each kind of side file.

def _flip(path, offset):
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x5A
    Path(path).write_bytes(bytes(data))


def case_verify_fields(tmp):
    src = tmp / "src"
    make_table(src)
    out = tmp / "out"
    # Two samples per shard: sample 3 is shard 1's second sample.
    build(src / "list.csv", out, "--size", "16", "--field", "mask_path=mask", "--field",
          "tags=multi-hot", "--shard-size", str(16 * 16 * 3 * 2), "--quiet")
    verify_ok(out)
    m = load_manifest(out)
    check_eq([s["count"] for s in m["shards"]], [2, 2, 2], "shard counts")

    def variant(name, file, offset_of, must):
        d = tmp / name
        shutil.copytree(out, d)
        p = d / file
        _flip(p, offset_of(p))
        r = run(["verify", d], expect_rc=5)
        text = r.stdout + r.stderr
        for s in must:
            check(re.search(r"(?<![\w.-])%s(?![\w.-])" % re.escape(s), text),
                  f"{name}: verify output does not name {s!r}:\n{text}")
        if len(must) > 1:
            check(any(all(re.search(r"(?<![\w.-])%s(?![\w.-])" % re.escape(s), line)
                          for s in must) for line in text.splitlines()),
                  f"{name}: no one line names {must}:\n{text}")
        vj = run_json(["verify", d, "--json"], expect_rc=5)
        check(file in json.dumps(vj), f"{name}: verify --json does not name {file}: {vj}")

    # A values file: sample 3's score (float32), a fixed kind.
    variant("values", "score-00001.npy", lambda p: load_npy(p).offset + 4 * 1 + 2,
            ["score-00001.npy", "3"])
    # A variable kind's values: sample 3's caption bytes.
    def caption_at(p):
        off = np.load(p.parent / "caption-offsets-00001.npy")
        check(off[2] > off[1], "sample 3's caption is empty")
        return load_npy(p).offset + int(off[1])
    variant("text_values", "caption-00001.npy", caption_at, ["caption-00001.npy", "3"])
    # A mask.
    variant("mask_values", "mask_path-00002.npy", lambda p: load_npy(p).offset + 16 * 16 + 40,
            ["mask_path-00002.npy", "5"])
    # An offsets file: offset 1 of shard 1, the end of sample 2 (now past the next one).
    variant("offsets", "caption-offsets-00001.npy", lambda p: load_npy(p).offset + 8 + 1,
            ["caption-offsets-00001.npy", "2"])
    # checksums.npy: sample 4's field column.
    variant("checksums", "checksums.npy", lambda p: load_npy(p).offset + (4 * 6 + 3) * 8,
            ["checksums.npy"])
    verify_ok(out)


# --------------------------------------------------------------------------------------------
# --resume and merge equal one build.

def field_files(out):
    m = load_manifest(out)
    return {e[part]["file"]: (Path(out) / e[part]["file"]).read_bytes()
            for s in m["shards"] for e in s["fields"].values() for part in ("values", "offsets")
            if part in e}


# Where the resumed build was killed: after shard 3 was committed (the brief's case), while a
# shard's side files (field files among them) were written, after a shard's rename and before
# its sidecar, after a sidecar.
KILL_POINTS = ["shard-committed:3", "side-file:3", "shard-renamed:2", "sidecar-written:2"]


def case_resume_fields(tmp):
    src = tmp / "src"
    rows = [(i * 3 - 5, i / 4, ";".join("abc"[: 1 + i % 3]), f"caption {i}") for i in range(12)]
    make_table(src, rows)
    opts = ["--size", "16", "--field", "mask_path=mask", "--field", "tags=multi-hot",
            "--shard-size", str(16 * 16 * 3 * 2)]
    ref = tmp / "ref"
    build(src / "list.csv", ref, *opts, "--quiet")
    b = field_files(ref)
    check(len(b) == 6 * 6, f"expected 6 shards x 6 field files, got {len(b)}")
    for point in KILL_POINTS:
        out = tmp / point.replace(":", "_")
        build(src / "list.csv", out, *opts, "--quiet", expect_rc=-9,
              env_extra={"DSCACHE_TEST_KILL_AT": point})
        check(not out.exists() and partial_dir(out).is_dir(), f"{point}: no partial dir")
        run(["build", src / "list.csv", out] + opts + ["--shuffle", "none", "--quiet", "--resume"])
        a = field_files(out)
        check_eq(sorted(a), sorted(b), f"{point}: field files, resumed vs uninterrupted")
        for name in a:
            check(a[name] == b[name], f"{point}: {name} differs from the uninterrupted build's")
        compare_caches(out, ref, f"{point}: resumed vs uninterrupted")
        verify_ok(out)


def case_merge_fields(tmp):
    src = tmp / "src"
    # Tag z only in part 1's rows: the parts still agree on the classes (typing reads the whole
    # table). Two samples per shard: each part has several shards of field files.
    rows = [(i, i * 1.5, ("b;z" if i > 5 else "b") if i % 2 else "a;c", f"c{i}" * (i % 4))
            for i in range(9)]
    make_table(src, rows)
    opts = ["--size", "16", "--field", "mask_path=mask", "--field", "tags=multi-hot",
            "--shard-size", str(16 * 16 * 3 * 2)]
    one = tmp / "one"
    build(src / "list.csv", one, *opts, "--quiet")
    parts = []
    for k in range(2):
        p = tmp / f"part{k}"
        build(src / "list.csv", p, *opts, "--part", f"{k}/2", "--quiet")
        parts.append(p)
    merged = tmp / "merged"
    run(["merge"] + parts + [merged])
    verify_ok(merged)
    m1, v1 = load_fields(one)
    mm, vm = load_fields(merged)
    check_eq(mm["fields"], m1["fields"], "merged fields")
    check_eq(next(f for f in mm["fields"] if f["name"] == "tags")["classes"], ["a", "b", "c", "z"],
             "merged multi-hot classes")
    check(len(mm["shards"]) >= 4, f"merged cache has {len(mm['shards'])} shards")
    check_eq(mm["count"], m1["count"], "merged count")
    check(np.array_equal(fixed_images(merged, mm), fixed_images(one, m1)), "merged images")
    check_eq(np.load(merged / "labels.npy").tolist(), np.load(one / "labels.npy").tolist(),
             "merged labels")
    check(np.array_equal(np.load(merged / "checksums.npy"), np.load(one / "checksums.npy")),
          "merged checksums.npy")
    for f in m1["fields"]:
        for i in range(m1["count"]):
            check(np.array_equal(vm[f["name"]][i], v1[f["name"]][i]),
                  f"merged {f['name']} of sample {i}: {vm[f['name']][i]} vs {v1[f['name']][i]}")


# --------------------------------------------------------------------------------------------
# inspect.

def case_inspect_fields(tmp):
    src = tmp / "src"
    recs = make_table(src)
    out = tmp / "out"
    build(src / "list.csv", out, "--size", "24", "--field", "mask_path=mask", "--field",
          "tags=multi-hot", "--quiet")
    p = run(["inspect", out])
    block = p.stdout[p.stdout.find("fields"):]
    for s in ("mask_path", "mask", "score", "float32", "tags", "array", "[3]", "3 classes",
              "caption", "text"):
        check(s in block, f"inspect summary's fields block lacks {s!r}:\n{p.stdout}")
    info = run_json(["inspect", out, "--json"])
    check_eq([(f["name"], f["kind"], f["dtype"], f["shape"]) for f in info["fields"]],
             [("mask_path", "mask", "uint8", []), ("count", "scalar", "int64", []),
              ("score", "scalar", "float32", []), ("tags", "array", "uint8", [3]),
              ("caption", "text", "uint8", [])], "inspect --json fields")
    check_eq(info["fields"][3]["classes"], ["a", "b", "c"], "inspect --json tags classes")
    smp = run_json(["inspect", out, "--sample", "1", "--json"])
    f = smp["fields"]
    check_eq(f["count"], -2, "--sample 1 count")
    check_eq(f["score"], -2000.0, "--sample 1 score")
    check_eq(f["tags"], [0, 0, 1], "--sample 1 tags")
    check_eq(f["caption"], recs[1]["caption"], "--sample 1 caption")
    check_eq({d["id"] for d in f["mask_path"]["ids"]}, {0, 2, RED_ID}, "--sample 1 mask ids")
    p = run(["inspect", out, "--sample", "1"])
    for s in ("-2", "-2000", "[0 0 1] (c)", recs[1]["caption"]):
        check(s in p.stdout, f"inspect --sample 1 lacks {s!r}:\n{p.stdout}")
    png = tmp / "s.png"
    run(["inspect", out, "--sample", "1", "--out", png])
    pic = imread_rgb(png)
    check(pic.shape[0] >= 256 and pic.shape[1] >= 256, f"--sample picture {pic.shape} not scaled")
    # The mask blended over the picture: inside the red rectangle the colour is no longer red.
    check(not np.any(np.all(pic == RED, axis=-1)), "no mask drawn over the red rectangle")
    # COCO: boxes drawn in their label's colour.
    csrc = tmp / "coco"
    js = make_coco(csrc, COCO_IMAGES)
    cout = tmp / "cout"
    build(js, cout, "--image-root", csrc, "--size", "32", "--resize", "stretch", "--quiet")
    p = run(["inspect", cout, "--sample", "2"])
    for s in ("box 0", "box_labels 1 (car)", "box_labels 0 (person)", "image_id", "1002"):
        check(s in p.stdout, f"inspect --sample 2 of COCO lacks {s!r}:\n{p.stdout}")
    for k, n in ((0, 1), (1, 4)):
        g = tmp / f"g{k}.png"
        run(["inspect", cout, "--grid", str(n), "--out", g])
        check(cv2.imread(str(g)) is not None, f"--grid {n}: unreadable PNG")
    # A damaged offsets file: exit 5 naming it, never a wrong picture.
    bad = tmp / "bad"
    shutil.copytree(cout, bad)
    _flip(bad / "boxes-offsets-00000.npy", load_npy(bad / "boxes-offsets-00000.npy").offset + 9)
    p = run(["inspect", bad, "--sample", "0"], expect_rc=5)
    check("boxes-" in p.stderr, f"inspect of a damaged offsets file: {p.stderr}")
    plain = tmp / "plain.png"
    run(["inspect", cout, "--sample", "3", "--out", plain])  # no boxes: still a picture
    check(imread_rgb(plain).shape[0] >= 256, "--sample 3 picture not scaled")


CASES = {
    "table_fields": case_table_fields,
    "coco_boxes": case_coco_boxes,
    "bad_field_rows": case_bad_rows,
    "verify_fields": case_verify_fields,
    "resume_fields": case_resume_fields,
    "merge_fields": case_merge_fields,
    "inspect_fields": case_inspect_fields,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
