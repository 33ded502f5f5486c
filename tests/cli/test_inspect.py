#!/usr/bin/python3
"""Tests of `dscache inspect`: the text summary, --json, --sample (text, --json, --out
PNG, grey), --grid and out-of-range samples.

Usage: test_inspect.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import re
import sys

import cv2
import numpy as np

from cli_helpers import (
    build, check, check_cache, check_eq, imread_rgb, main, make_simple_folder, run, run_json,
)
from fields_helpers import COCO_IMAGES, make_coco


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


def case_inspect_coco_ragged(tmp):
    """The summary of COCO caches says what is true: the image root is not "labels", a ragged
    build did no --resize (it kept each image's aspect), and a mask is as large as its image."""
    src = tmp / "coco"
    js = make_coco(src, COCO_IMAGES)
    fixed, ragged = tmp / "fixed", tmp / "ragged"
    build(js, fixed, "--image-root", src, "--coco-mask", "semantic", "--size", "32",
          "--resize", "pad", "--quiet")
    build(js, ragged, "--image-root", src, "--coco-mask", "semantic", "--layout", "ragged",
          "--max-side", "24", "--quiet")
    for out, layout in ((fixed, "fixed"), (ragged, "ragged")):
        text = run(["inspect", out]).stdout
        lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip()}
        check(re.search(r"^images\s+" + re.escape(str(src)) + "$", text, re.M),
              f"{layout}: the image root is not printed as images:\n{text}")
        check(not re.search(r"^labels\s", text, re.M), f"{layout}: a labels line:\n{text}")
        mask = [ln for ln in text.splitlines() if ln.split()[:2] == ["mask", "mask"]]
        check_eq(len(mask), 1, f"{layout}: the mask field's line in\n{text}")
        want = "shape [32,32]" if layout == "fixed" else "shape [h,w] (its image's)"
        check(want in mask[0] and "shape []" not in mask[0], f"{layout}: {mask[0]!r}")
        check("shape [n,4]" in lines.get("boxes", ""), f"{layout}: boxes line:\n{text}")
        recipe = lines["recipe"]
        if layout == "fixed":
            check("resize pad" in recipe, f"fixed: {recipe!r}")
        else:
            check("resize" not in recipe and "at most 24 px (aspect kept)" in recipe,
                  f"ragged: {recipe!r}")


CASES = {
    "inspect_outputs": case_inspect_outputs,
    "inspect_coco_ragged": case_inspect_coco_ragged,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
