#!/usr/bin/python3
"""One validation serves every reader (docs/FORMAT.md "Opening a cache", STYLE.md "One truth per
rule"): each open-time check is met by damaging a small cache with fields (fixed layout, and
ragged for the index and masks of their image's size) -- the manifest's sizes and XXH64
rewritten to match where the check is deeper than them, so that only it can catch it -- and every
reader must refuse every damage: the C++ Cache::open (loader_dump), `dscache verify`, `dscache
inspect` in each mode, and Python's dscache.Cache; the CLI with exit 5 (corruption), each with a
message naming the damaged file."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import dscache
from pyhelpers import DSCACHE, LOADER_DUMP, Skip, main, restamp

H, W = 8, 6
PER_SHARD = 4


def write_cache(path):
    """10 samples in 3 shards with a mask, a float scalar, boxes, their labels (rows_of) and a
    caption; every sample has one or two boxes."""
    fields = {"mask": dscache.Mask("uint8"), "score": dscache.Scalar("float32"),
              "boxes": dscache.Boxes(), "box_labels": dscache.Rows("int64", rows_of="boxes"),
              "caption": dscache.Text()}
    rng = np.random.default_rng(5)
    with dscache.Writer(path, shape=(H, W, 3), classes=["a", "b"], fields=fields,
                        shard_size=H * W * 3 * PER_SHARD) as w:
        for j in range(10):
            n = 1 + j % 2
            w.write(rng.integers(0, 256, (H, W, 3), dtype=np.uint8), j % 2,
                    mask=rng.integers(0, 3, (H, W), dtype=np.uint8), score=j / 4,
                    boxes=[[0, 0, 3, 3]] * n, box_labels=[1] * n, caption=f"sample {j}")


def write_ragged_cache(path):
    """8 ragged samples (sizes vary) in 2 or more shards with a mask each."""
    rng = np.random.default_rng(6)
    with dscache.Writer(path, layout="ragged", classes=["a"], fields={"mask": dscache.Mask()},
                        shard_size=600) as w:
        for j in range(8):
            h, w_ = 5 + j % 3, 6 + j % 4
            w.write(rng.integers(0, 256, (h, w_, 3), dtype=np.uint8), 0,
                    mask=rng.integers(0, 2, (h, w_), dtype=np.uint8))


def npy_edit(name, change):
    """A damage: NAME rewritten with np.save(change(array))."""
    def damage(path):
        p = os.path.join(path, name)
        np.save(p, change(np.load(p)))
    return damage


def bytes_edit(name, change):
    def damage(path):
        p = Path(path, name)
        p.write_bytes(change(p.read_bytes()))
    return damage


def manifest_edit(change):
    def damage(path):
        p = os.path.join(path, "manifest.json")
        with open(p) as f:
            m = json.load(f)
        change(m)
        with open(p, "w") as f:
            json.dump(m, f, indent=2)
    return damage


def with_(a, k, v):
    a = a.copy()
    a[k] = v
    return a


def symlink_out(name):
    """NAME replaced by a symlink to an identical file outside the cache directory."""
    def damage(path):
        outside = os.path.join(os.path.dirname(path), "outside-" + name)
        shutil.copyfile(os.path.join(path, name), outside)
        os.remove(os.path.join(path, name))
        os.symlink(outside, os.path.join(path, name))
    return damage


def fifo(name):
    def damage(path):
        os.remove(os.path.join(path, name))
        os.mkfifo(os.path.join(path, name))
    return damage


def ragged_mask_offsets(a):
    """Sample 0's mask one pixel longer, sample 1's one shorter: the total still matches."""
    a = a.copy()
    a[1] += 1
    return a


def v1_with_fields(m):
    m["format_version"] = 1
    del m["codec"]


# (what, damage, the file the message must name, whether the manifest is restamped after it)
CASES = [
    ("rows_of counts differ from the boxes'", npy_edit(
        "box_labels-offsets-00000.npy", lambda a: with_(a, 1, a[1] + 1)),
     "box_labels-offsets-00000.npy", True),
    ("field values truncated", bytes_edit("score-00000.npy", lambda b: b[:-4]),
     "score-00000.npy", True),
    ("field values extended", bytes_edit("score-00001.npy", lambda b: b + b"\0" * 4),
     "score-00001.npy", True),
    ("field dtype changed", npy_edit("score-00000.npy", lambda a: a.astype("<f8")),
     "score-00000.npy", True),
    ("mask shape changed", npy_edit("mask-00001.npy", lambda a: a.reshape(len(a), W, H)),
     "mask-00001.npy", True),
    ("rows shape changed", npy_edit("box_labels-00000.npy", lambda a: a.reshape(-1, 1)),
     "box_labels-00000.npy", True),
    ("offsets decrease", npy_edit("boxes-offsets-00001.npy", lambda a: with_(a, 2, a[1] - 1)),
     "boxes-offsets-00001.npy", True),
    ("offsets start above 0", npy_edit("boxes-offsets-00002.npy", lambda a: with_(a, 0, 1)),
     "boxes-offsets-00002.npy", True),
    ("offsets end before the rows", npy_edit(
        "boxes-offsets-00000.npy", lambda a: with_(a, len(a) - 1, a[-1] - 1)),
     "boxes-00000.npy", True),
    ("image shard truncated", bytes_edit("images-00000.npy", lambda b: b[:-10]),
     "images-00000.npy", True),
    ("image shard of fewer samples", npy_edit("images-00001.npy", lambda a: a[:-1]),
     "images-00001.npy", True),
    ("checksums (count,)", npy_edit("checksums.npy", lambda a: a[:, 0].copy()),
     "checksums.npy", True),
    ("checksums (count, F + 2)", npy_edit(
        "checksums.npy", lambda a: np.concatenate([a, a[:, :1]], axis=1)),
     "checksums.npy", True),
    ("checksums transposed", npy_edit("checksums.npy", lambda a: np.ascontiguousarray(a.T)),
     "checksums.npy", True),
    ("checksums in Fortran order", npy_edit("checksums.npy", np.asfortranarray),
     "checksums.npy", True),
    ("a label out of range", npy_edit("labels.npy", lambda a: with_(a, 3, 5)), "labels.npy",
     True),
    ("labels of another dtype", npy_edit("labels.npy", lambda a: a.astype("<i4")), "labels.npy",
     True),
    ("a v1 manifest with fields", manifest_edit(v1_with_fields), "manifest.json", False),
    ("a size other than the manifest's", bytes_edit("caption-00001.npy", lambda b: b + b" "),
     "caption-00001.npy", False),
    ("a symlink out of the cache", symlink_out("labels.npy"), "labels.npy", False),
    ("a FIFO for a side file", fifo("skipped.jsonl"), "skipped.jsonl", False),
]

# The ragged layout's own checks (its index, masks of their image's h*w), on a ragged cache.
RAGGED_CASES = [
    ("a ragged mask of another size than its image", npy_edit(
        "mask-offsets-00000.npy", ragged_mask_offsets), "mask-offsets-00000.npy", True),
    ("an index row past its shard", npy_edit(
        "ragged-index.npy", lambda a: with_(a, 0, [a[0][0], a[0][1] + 50, a[0][2]])),
     "ragged-index.npy", True),
    ("index rows overlapping", npy_edit(
        "ragged-index.npy", lambda a: with_(a, 1, [a[1][0] - 3, a[1][1], a[1][2]])),
     "ragged-index.npy", True),
]

# Every reader, as (name, argv or None for Python's dscache.Cache); {c} is the cache, {o} a PNG.
READERS = [
    ("Cache::open (C++)", None),
    ("dscache.Cache (Python)", None),
    ("verify", ["verify", "{c}"]),
    ("inspect", ["inspect", "{c}"]),
    ("inspect --json", ["inspect", "{c}", "--json"]),
    ("inspect --sample", ["inspect", "{c}", "--sample", "0"]),
    ("inspect --sample --json", ["inspect", "{c}", "--sample", "0", "--json"]),
    ("inspect --sample --out", ["inspect", "{c}", "--sample", "0", "--out", "{o}"]),
    ("inspect --grid", ["inspect", "{c}", "--grid", "4", "--out", "{o}"]),
]


def refusal(reader, argv, cache, png):
    """How `reader` answered on `cache`: (refused as corruption?, its message)."""
    if reader == "dscache.Cache (Python)":
        try:
            dscache.Cache(cache)
        except dscache.CorruptionError as e:
            return True, str(e)
        except Exception as e:  # noqa: BLE001 - another kind is a failure, reported
            return False, f"{type(e).__name__}: {e}"
        return False, "opened"
    if argv is None:  # C++ Cache::open, through the Loader's reference dumper
        r = subprocess.run([LOADER_DUMP, cache, png + ".dump", "0", "0", "4", "none", "0", "1",
                            "0", "0", "1", "none", "0", "0", "0", "0"],
                           capture_output=True, text=True, timeout=60)
        return r.returncode == 1 and r.stderr.startswith("Corruption: "), r.stderr
    r = subprocess.run([DSCACHE] + [a.format(c=cache, o=png) for a in argv],
                       capture_output=True, text=True, timeout=60)
    return r.returncode == 5, f"rc {r.returncode}: {r.stdout[-600:]} {r.stderr}"


def test_every_reader_refuses_every_open_check(tmp):
    if not DSCACHE or not LOADER_DUMP:
        raise Skip("DSCACHE and LOADER_DUMP not set (run through meson test)")
    png = os.path.join(tmp, "out.png")
    failures, runs = [], 0
    for write, cases in ((write_cache, CASES), (write_ragged_cache, RAGGED_CASES)):
        good = os.path.join(tmp, "good")
        shutil.rmtree(good, ignore_errors=True)
        write(good)
        # The undamaged cache: every reader accepts it (so a refusal below is the damage's).
        for reader, argv in READERS:
            refused, msg = refusal(reader, argv, good, png)
            assert not refused, f"{reader} refuses the undamaged cache: {msg}"
        r = subprocess.run([DSCACHE, "verify", good], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout
        for what, damage, name, stamp in cases:
            cache = os.path.join(tmp, "bad")
            shutil.rmtree(cache, ignore_errors=True)
            shutil.copytree(good, cache)
            damage(cache)
            if stamp:
                restamp(cache)
            for reader, argv in READERS:
                runs += 1
                refused, msg = refusal(reader, argv, cache, png)
                if not refused:
                    failures.append(f"{what}: {reader} did not refuse it: {msg}")
                elif name not in msg:
                    failures.append(f"{what}: {reader}'s message does not name {name}: {msg}")
    assert runs == (len(CASES) + len(RAGGED_CASES)) * len(READERS), runs
    assert not failures, f"{len(failures)} of {runs}:\n" + "\n".join(failures)


if __name__ == "__main__":
    sys.exit(main(globals()))
