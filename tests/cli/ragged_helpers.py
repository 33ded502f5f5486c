"""Ragged caches in the CLI tests (test_build_ragged.py, test_verify.py, test_alpha.py,
test_merge.py): a folder of PNGs and JPEGs of many sizes, and the check that a ragged cache
holds them (ragged-index.npy, shards, side files, pixels as stored)."""

from pathlib import Path

import h5py
import numpy as np

from cli_helpers import (
    BASE_FILES, CHANNEL_ORDER, check, check_eq, check_side_files, checked_manifest,
    class_counts_list, file_xxh64, load_labels, npy_header, partial_dir, rand_rgb, read_jsonl,
    smooth_rgb, write_img, xxh64,
)


def check_ragged_cache(out, storage="npy", max_side=None, channels=3):
    """Structural checks of a ragged cache; returns (manifest, [sample arrays], labels, index)."""
    out = Path(out)
    m = checked_manifest(out, "ragged", storage)
    check_eq(m.get("dtype"), "uint8", "manifest dtype")
    check_eq(m.get("shape"), [0, 0, channels], "ragged manifest shape")
    C = channels
    check_eq(m.get("channel_order"), CHANNEL_ORDER.get(C), "manifest channel_order")
    if max_side is not None:
        check_eq(m["recipe"].get("max_side"), max_side, "recipe.max_side")
    check(isinstance(m["recipe"].get("max_side"), int) and m["recipe"]["max_side"] > 0,
          f"recipe.max_side must be > 0: {m['recipe']}")
    count = m["count"]
    check_eq(sum(class_counts_list(m)), count, "sum(class_counts)")
    check_side_files(out, m)
    ext = ".npy" if storage == "npy" else ".h5"
    expected_files = BASE_FILES | {"ragged-index.npy"} | {s["file"] for s in m["shards"]}
    check_eq(sorted(p.name for p in out.iterdir()), sorted(expected_files),
             "files in the ragged cache directory")
    check(not partial_dir(out).exists(), f"{partial_dir(out)} left behind after success")

    idx = np.load(out / "ragged-index.npy")
    check_eq(idx.dtype, np.dtype("<i8"), "ragged-index.npy dtype")
    check_eq(idx.shape, (count, 3), "ragged-index.npy shape")
    check(idx.flags["C_CONTIGUOUS"], "ragged-index.npy not C order")
    check(count == 0 or (idx[:, 1].min() >= 1 and idx[:, 2].min() >= 1),
          "ragged-index.npy: a sample with h or w < 1")
    if max_side is not None and count:
        shorter = np.minimum(idx[:, 1], idx[:, 2])
        check(shorter.max() <= max_side, f"a sample's shorter side {shorter.max()} > {max_side}")
    labels = load_labels(out)
    check_eq(labels.shape, (count,), "labels.npy shape")
    sums = np.load(out / "checksums.npy")
    check_eq(sums.dtype, np.dtype("<u8"), "checksums.npy dtype")
    check_eq(sums.shape, (count,), "checksums.npy shape")

    samples = []
    first = 0
    for k, s in enumerate(m["shards"]):
        check_eq(s["file"], f"images-{k:05d}{ext}", f"shards[{k}].file")
        check_eq(s["first"], first, f"shards[{k}].first")
        check(s["count"] >= 1, f"shards[{k}] is empty")
        p = out / s["file"]
        check_eq(s["bytes"], p.stat().st_size, f"shards[{k}].bytes vs file size")
        check_eq(s["xxh64"].lower(), file_xxh64(p), f"shards[{k}].xxh64 vs file")
        rows = idx[s["first"]:s["first"] + s["count"]]
        sizes = rows[:, 1] * rows[:, 2] * C
        want_off = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        check_eq(rows[:, 0].tolist(), want_off.tolist(),
                 f"{s['file']}: index offsets (samples back to back from 0)")
        nbytes = int(sizes.sum())
        if storage == "npy":
            text, data_off = npy_header(p)
            check_eq(text.rstrip(" \n"),
                     "{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }" % nbytes,
                     f"{s['file']} npy dict text")
            check_eq(data_off % 64, 0, f"{s['file']} data offset % 64")
            check_eq(p.stat().st_size, data_off + nbytes, f"{s['file']} size = offset + bytes")
            data = np.load(p, mmap_mode="r")
            check(isinstance(data, np.memmap), f"{p}: numpy.load(mmap_mode='r') gave {type(data)}")
            check_eq(data.offset, data_off, f"{s['file']} numpy data offset")
        else:
            with h5py.File(p, "r") as f:
                ds = f["images"]
                check_eq(ds.dtype, np.dtype(np.uint8), f"{s['file']} images dtype")
                co = ds.attrs.get("channel_order")
                co = co.decode() if isinstance(co, bytes) else str(co)
                check_eq(co, CHANNEL_ORDER.get(C), f"{s['file']} channel_order attr")
                data = ds[...]
                lab = f["labels"][...]
            check_eq(lab.dtype, np.dtype("int64"), f"{s['file']} labels dtype")
            check_eq(lab.tolist(), labels[s["first"]:s["first"] + s["count"]].tolist(),
                     f"{s['file']} labels")
        check_eq(data.dtype, np.dtype(np.uint8), f"{s['file']} dtype")
        check_eq(data.shape, (nbytes,), f"{s['file']} 1-d shape (sum of h*w*C)")
        for j, (off, h, w) in enumerate(rows.tolist()):
            samples.append(np.array(data[off:off + h * w * C]).reshape(h, w, C))
        first += s["count"]
    check_eq(first, count, "sum of shard counts")
    for i, smp in enumerate(samples):
        want = xxh64(smp.tobytes())
        check(int(sums[i]) == want,
              f"checksums.npy[{i}] = {int(sums[i]):016x}, xxh64 of sample = {want:016x}")
    check_eq(len(read_jsonl(out / "sources.jsonl")), count, "lines in sources.jsonl")
    return m, samples, labels, idx


# (h, w) of PNG fixtures: tall, wide, smaller than S, exactly S, far from square.
RAGGED_PNG_SIZES = [(60, 40), (30, 100), (20, 50), (24, 70), (17, 13), (97, 53), (25, 25),
                    (200, 31), (41, 77), (3, 200), (24, 24), (90, 26)]


def make_ragged_folder(src, sizes=RAGGED_PNG_SIZES, seed=0, jpeg=True):
    """PNGs of the given sizes split over classes a/b/c (+ one big JPEG); returns {rel: (h, w)}."""
    made = {}
    for k, (h, w) in enumerate(sizes):
        rel = f"{'abc'[k % 3]}/p{k:02d}.png"
        write_img(Path(src) / rel, rand_rgb(seed * 1000 + k, h, w))
        made[rel] = (h, w)
    if jpeg:
        write_img(Path(src) / "b/zphoto.jpg", smooth_rgb(seed * 1000 + 999, 300, 200))
        made["b/zphoto.jpg"] = (300, 200)
    return made


# --------------------------------------------------------------------------------------------
# The runner (tests/testrunner.py, shared with the Python module's tests).
