#!/usr/bin/python3
"""Tests of builds with fields (docs/FORMAT.md "Fields (format_version 3)"): a table build (mask,
int, float, multi-hot and text columns) read back with numpy and h5py, in the ragged layout and
shuffled; a COCO build's boxes against its masks under every resize policy and the ragged
layout; bad rows and annotations as named skips (exit 3 with --strict). The side-file tests
(verify, resume, merge, inspect) are in test_fields_ops.py; fixtures in fields_helpers.py.

Usage: test_fields.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case.
"""

import re
import sys
from pathlib import Path

import numpy as np

from cli_helpers import (
    build, check, check_eq, load_manifest, main, partial_dir, read_jsonl, write_img,
)
from fields_helpers import (
    CAT_INDEX, COCO_CATS, COCO_IMAGES, GREY, RED, RED_ID, TABLE_ROWS, WHITE, check_checksums,
    fixed_images, load_fields, load_npy, make_coco, make_table, ragged_images, verify_ok,
)


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

CASES = {
    "table_fields": case_table_fields,
    "coco_boxes": case_coco_boxes,
    "bad_field_rows": case_bad_rows,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
