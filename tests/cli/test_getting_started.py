#!/usr/bin/python3
"""docs/GETTING_STARTED.md, run as written: every ```sh and ```python block of the page, in order,
in one temp dir holding a tiny dataset of the layout the page describes (class folders, a CSV of
images and masks, a COCO instances file), with the built `dscache` and `dscache-train` first on
PATH and the built module on PYTHONPATH. Each block must exit 0 (so a flag or an option the page
shows that stops existing fails this test), and what the page says it makes must be there: the
caches, the inspect pictures, model.pt and model.json, a third epoch after --resume, predicted
class names. Needs python3-torch (exit 77 without it). Env: DSCACHE, DSCACHE_TRAIN, PYTHONPATH;
registered by trainer/meson.build.
"""

import json
import os
import re
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np

from cli_helpers import (DSCACHE, Skip, check, check_eq, load_manifest, main, read_jsonl,
                         smooth_rgb, testrunner, write_img)
from fields_helpers import COCO_IMAGES, make_coco

DSCACHE_TRAIN = os.environ.get("DSCACHE_TRAIN", "")
SOURCE_ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
PAGE = SOURCE_ROOT / "docs" / "GETTING_STARTED.md"
MAX_LINES = 200  # issue 38: "a Getting started of at most ~200 lines"
BLOCK_TIMEOUT_S = 300


def page_blocks(text):
    """[(language, code)] of the page's ```sh and ```python blocks, in order; other fences (the
    data layout, output) are not commands."""
    return [(m.group(1), m.group(2))
            for m in re.finditer(r"^```(sh|python)\n(.*?)^```$", text, re.M | re.S)]


def make_data(root):
    """The page's data: photos/{train,val}/{cat,dog}/*.png, seg.csv with images/ and masks/
    (class ids 0..2), coco/annotations.json with its images in coco/images/."""
    for split, n in (("train", 12), ("val", 4)):
        for ci, cls in enumerate(("cat", "dog")):
            for k in range(n):
                img = smooth_rgb(1000 * ci + 100 * (split == "val") + k, 72, 80)
                img[..., ci] //= 2  # a colour cast per class: something to learn
                write_img(root / f"photos/{split}/{cls}/{k:03d}.png", img)
    rows = ["image_path,mask"]
    for k in range(12):
        img = smooth_rgb(5000 + k, 64, 64)
        mask = np.zeros((64, 64), np.uint8)
        mask[8 + k:30 + k, 6:28] = 1
        mask[34:58, 30 + k // 2:60] = 2
        img[mask == 1] = (255, 255, 255)
        img[mask == 2] = (220, 30, 30)
        write_img(root / f"images/{k}.png", img)
        write_img(root / f"masks/{k}.png", mask)
        rows.append(f"images/{k}.png,masks/{k}.png")
    (root / "seg.csv").write_text("\n".join(rows) + "\n")
    coco = make_coco(root / "coco/images", COCO_IMAGES)
    shutil.move(coco, root / "coco/annotations.json")


def run_block(root, lang, code, env, n):
    cmd = (["bash", "-euo", "pipefail", "-c", code] if lang == "sh"
           else [sys.executable, "-c", code])
    p = testrunner.run_cmd(cmd, None, env=env, cwd=root, timeout=BLOCK_TIMEOUT_S)
    if p.returncode != 0:
        check(False, f"GETTING_STARTED.md block {n} ({lang}) exited {p.returncode}:\n{code}\n"
                     f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}")
    return p


def check_outcomes(root, outs):
    """What the page says the blocks made."""
    for cache, count in (("pets-train", 24), ("pets-val", 8), ("seg", 12), ("coco-cache", 4)):
        check_eq(load_manifest(root / cache)["count"], count, f"{cache}'s sample count")
    fields = json.dumps(load_manifest(root / "seg").get("fields"))
    check('"mask"' in fields and '["background", "person", "car"]' in fields,
          f"seg's fields lack the mask and its class names: {fields}")
    check_eq(json.loads((root / "seg-run/model.json").read_text())["classes"],
             ["background", "person", "car"], "seg-run/model.json's classes")
    for png in ("seg0.png", "coco.png"):
        img = cv2.imread(str(root / png))
        check(img is not None and img.size > 0, f"inspect did not write a readable {png}")
    for run in ("run", "seg-run"):
        for f in ("model.pt", "model.json", "checkpoint.pt", "metrics.jsonl"):
            check((root / run / f).is_file(), f"dscache-train left no {run}/{f}")
    lines = read_jsonl(root / "run/metrics.jsonl")
    epochs = [r["epoch"] for r in lines if r.get("kind") == "epoch"]
    check_eq(epochs, [0, 1, 2], "run/'s epoch lines (0-based) after --resume --epochs 3")
    joined = "\n".join(outs)
    check("torch.Size([8, 3, 56, 56]) torch.int64" in joined,
          f"the Loader example printed no (8, 3, 56, 56) batch:\n{joined}")
    check("torch.Size([4, 48, 48])" in joined,
          f"the mask example printed no (4, 48, 48):\n{joined}")
    check(re.fullmatch(r"\['(cat|dog)'(, '(cat|dog)'){3}\]", outs[-1].strip()),
          f"the inference example (the last block) printed no 4 class names:\n{outs[-1]}")


def test_getting_started(tmp):
    try:
        import torch  # noqa: F401 - the page's Python blocks need it
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")
    if not DSCACHE_TRAIN or not os.access(DSCACHE_TRAIN, os.X_OK):
        raise Skip("DSCACHE_TRAIN is not set to a dscache-train binary (trainer not built)")
    text = PAGE.read_text()
    check(len(text.splitlines()) <= MAX_LINES,
          f"{PAGE.name} is {len(text.splitlines())} lines (at most {MAX_LINES})")
    blocks = page_blocks(text)
    langs = [lang for lang, _ in blocks]
    check(langs.count("sh") >= 6 and langs.count("python") >= 4,
          f"{PAGE.name}: expected at least 6 sh and 4 python blocks, found {langs}")
    make_data(tmp)
    env = dict(os.environ)
    env.pop("DSCACHE_TEST_KILL_AT", None)
    env["PATH"] = os.pathsep.join([str(Path(DSCACHE).parent), str(Path(DSCACHE_TRAIN).parent),
                                   env.get("PATH", "/usr/bin:/bin")])
    env["COLUMNS"] = "100"
    outs = []
    for n, (lang, code) in enumerate(blocks, 1):
        p = run_block(tmp, lang, code, env, n)
        outs.append(p.stdout)
    check_outcomes(tmp, outs)


CASES = {"getting_started": test_getting_started}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
