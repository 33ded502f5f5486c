#!/usr/bin/python3
"""Fixtures and readers shared by the tests of caches with fields (test_fields.py,
test_fields_ops.py): a table of rectangles with mask, int, float, multi-hot and text columns, a
COCO instances file, and the field files read back with numpy (docs/FORMAT.md "Fields").
"""

import csv
import re
import json
from pathlib import Path

import h5py
import numpy as np

from cli_helpers import check, check_eq, file_xxh64, load_manifest, run, write_img, xxh64

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


# --------------------------------------------------------------------------------------------
# COCO.

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


# --------------------------------------------------------------------------------------------
# Damage and comparison.

def flip(path, offset):
    """XORs one byte of a file (0x5A)."""
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x5A
    Path(path).write_bytes(bytes(data))


def field_files(out):
    """{file name: bytes} of every field file the manifest lists."""
    m = load_manifest(out)
    return {e[part]["file"]: (Path(out) / e[part]["file"]).read_bytes()
            for s in m["shards"] for e in s["fields"].values() for part in ("values", "offsets")
            if part in e}
