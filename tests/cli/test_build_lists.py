#!/usr/bin/python3
"""Tests of `dscache build` from list and idx sources: CSV (with and without a header), TSV with
class names, a listed file that is missing, idx files (plain and gzip), and --shuffle over an
idx source.

Usage: test_build_lists.py CASE
(env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import gzip
import struct
import sys

import cv2
import numpy as np

from cli_helpers import (
    build, check, check_cache, check_eq, class_counts_list, load_images, load_labels,
    load_manifest, main, partial_dir, rand_rgb, read_jsonl, run, summary_mentions_skipped,
    write_img,
)


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
    "csv_list": case_csv_list,
    "csv_header": case_csv_header,
    "tsv_list_names": case_tsv_list_names,
    "list_missing_file": case_list_missing_file,
    "idx_source": case_idx_source,
    "shuffle_idx": case_shuffle_idx,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
