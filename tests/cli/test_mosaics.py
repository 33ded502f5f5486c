#!/usr/bin/python3
"""Tests of scripts/make-mosaics (the README's multi-label and segmentation dataset, made from
Debian's Fashion-MNIST): its tables built into caches by `dscache build` and read back with numpy
(every mask agrees with its image and its label columns), the same bytes for the same seed and
others for another, and missing, malformed or FIFO idx files refused with the file and the reason.

Usage: test_mosaics.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case, 77 = skipped (no dataset-fashion-mnist).
"""

import csv
import gzip
import os
import sys
from pathlib import Path

import cv2
import numpy as np

from cli_helpers import Skip, build, check, check_eq, main, testrunner
from fields_helpers import fixed_images, load_fields, verify_ok

ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
SCRIPT = ROOT / "scripts" / "make-mosaics"
FMNIST = Path("/usr/share/datasets/fashion-mnist")
CLASSES = ["t_shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle_boot"]


def make_mosaics(*args, expect_rc=0):
    return testrunner.run_cmd([sys.executable, SCRIPT] + [str(a) for a in args], expect_rc,
                              timeout=120)


def read_table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_sample(i, img, mask, row, png_img, png_mask):
    """Sample i of a cache against its table row and its PNG files."""
    check(np.array_equal(img, png_img),
          f"sample {i}: cache image differs from {row['image_path']}")
    check(np.array_equal(mask, png_mask), f"sample {i}: cache mask differs from {row['mask']}")
    ids = set(np.unique(mask).tolist()) - {0, 255}
    labelled = {k + 1 for k, c in enumerate(CLASSES) if row[c] == "1"}
    check_eq(ids, labelled, f"sample {i}: mask ids vs the label columns set to 1")
    check(ids, f"sample {i}: a mosaic with no item")
    item = (mask != 0) & (mask != 255)
    bright = img >= 32
    check(np.array_equal(item, bright), f"sample {i}: {int((item != bright).sum())} pixels where "
          "'pixel >= 32' and 'mask is a class id' disagree")
    rim = (img > 0) & (img < 32)
    check(np.array_equal(rim, mask == 255), f"sample {i}: the 255 (ignore) pixels are not the rim")
    check(np.all(img[mask == 0] == 0), f"sample {i}: background (mask 0) pixels are not 0")


def case_mosaics_build(tmp):
    if not FMNIST.is_dir():
        raise Skip(f"{FMNIST} is missing (apt-get install dataset-fashion-mnist)")
    out = tmp / "a"
    p = make_mosaics("--out", out, "--train", 40, "--val", 12, "--seed", 3)
    check("dscache build" in p.stdout and "--field mask=mask" in p.stdout,
          f"make-mosaics does not print the build commands: {p.stdout!r}")
    for split, count in (("train", 40), ("val", 12)):
        rows = read_table(out / f"{split}.csv")
        check_eq(len(rows), count, f"{split}.csv rows")
        check_eq(list(rows[0]), ["image_path", "mask"] + CLASSES, f"{split}.csv columns")
        cache = tmp / f"{split}-cache"
        build(out / f"{split}.csv", cache, "--size", 56, "--channels", 1, "--field", "mask=mask",
              "--quiet")
        verify_ok(cache)
        m, values = load_fields(cache)
        check_eq(m["fields"][0]["kind"], "mask", f"{split}: field 'mask' kind")
        images = fixed_images(cache, m)
        check_eq(images.shape, (count, 56, 56, 1), f"{split}: images shape")
        for i, row in enumerate(rows):
            for c in CLASSES:
                check_eq(int(values[c][i]), int(row[c]), f"{split} sample {i}: field {c}")
            png_img = cv2.imread(str(out / row["image_path"]), cv2.IMREAD_UNCHANGED)
            png_mask = cv2.imread(str(out / row["mask"]), cv2.IMREAD_UNCHANGED)
            check_sample(i, images[i, :, :, 0], values["mask"][i], row, png_img, png_mask)
    # Deterministic given the seed; another seed, other mosaics.
    make_mosaics("--out", tmp / "b", "--train", 40, "--val", 12, "--seed", 3)
    make_mosaics("--out", tmp / "c", "--train", 40, "--val", 12, "--seed", 4)
    files = sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file())
    check_eq(len(files), 2 + 2 * 52, "files written (2 tables, 52 images, 52 masks)")
    same = [f for f in files if (out / f).read_bytes() == (tmp / "b" / f).read_bytes()]
    check_eq(same, files, "files equal to those of a second run with --seed 3")
    differ = [f for f in files
              if f.endswith(".png") and (out / f).read_bytes() != (tmp / "c" / f).read_bytes()]
    check(len(differ) > 90, f"--seed 4: only {len(differ)} of 104 PNGs differ from --seed 3's")


def write_idx(path, magic, array):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    path.write_bytes(gzip.compress(header + array.tobytes()))


def case_mosaics_bad_inputs(tmp):
    rng = np.random.default_rng(0)
    good = {
        "images": (0x803, rng.integers(0, 256, (6, 28, 28), dtype=np.uint8)),
        "labels": (0x801, np.arange(6, dtype=np.uint8)),
    }
    train_images = "train-images-idx3-ubyte.gz"
    # (what, file to spoil, its bytes or None to delete, the words stderr must hold)
    cases = [
        ("missing", train_images, None, [train_images, "No such file", "dataset-fashion-mnist"]),
        ("not gzip", train_images, b"\x1f\x8bnot really", [train_images, "gzip"]),
        ("truncated", train_images, "truncate", [train_images, "header says (6, 28, 28)",
                                                 "holds 4703"]),
        ("labels as images", train_images, "labels", [train_images, "magic 0x00000801"]),
        ("fifo", train_images, "fifo", [train_images, "not a regular file"]),
        ("label count", "train-labels-idx1-ubyte.gz", "short-labels",
         ["train-labels-idx1-ubyte.gz", "5 labels for the 6 images"]),
    ]
    for what, name, spoil, words in cases:
        src = tmp / what.replace(" ", "-")
        src.mkdir()
        for split in ("train", "t10k"):
            for kind, idx in (("images", "idx3"), ("labels", "idx1")):
                write_idx(src / f"{split}-{kind}-{idx}-ubyte.gz", *good[kind])
        target = src / name
        if spoil is None:
            target.unlink()
        elif spoil == "truncate":
            target.write_bytes(gzip.compress(gzip.decompress(target.read_bytes())[:-1]))
        elif spoil == "fifo":
            target.unlink()
            os.mkfifo(target)
        elif spoil == "labels":
            write_idx(target, *good["labels"])
        elif spoil == "short-labels":
            write_idx(target, 0x801, good["labels"][1][:5])
        else:
            target.write_bytes(spoil)
        out = tmp / (src.name + "-out")
        p = make_mosaics("--out", out, "--train", 4, "--val", 2, "--fashion-mnist", src,
                         expect_rc=1)
        for w in words:
            check(w in p.stderr, f"{what}: stderr lacks {w!r}: {p.stderr!r}")
        check(not (out / "train.csv").exists(), f"{what}: a train.csv was written")
    # Usage errors: exit 2, nothing written.
    for args in (["--fill", "0"], ["--train", "-1"], ["--train", "0", "--val", "0"], []):
        out = tmp / "usage"
        full = (["--out", out] if args else []) + args
        make_mosaics(*full, expect_rc=2)
        check(not (out / "train.csv").exists(), f"{args}: a train.csv was written")


CASES = {
    "mosaics_build": case_mosaics_build,
    "mosaics_bad_inputs": case_mosaics_bad_inputs,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
