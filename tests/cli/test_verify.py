#!/usr/bin/python3
"""Tests of `dscache verify`: OK on an intact cache; the file and sample named for a
flipped byte, a truncated shard, missing or corrupt labels and a corrupt manifest (npy and hdf5);
--source on folder and list sources; and inspect + verify of a ragged cache.

Usage: test_verify.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import json
import re
import shutil
import sys
from pathlib import Path

import cv2
import h5py
import numpy as np

from cli_helpers import (
    build, check, check_cache, check_eq, file_xxh64, imread_rgb, main, make_simple_folder,
    npy_header, rand_rgb, read_jsonl, run, run_json, smooth_rgb, write_img, xxh64,
)
from ragged_helpers import check_ragged_cache, make_ragged_folder


def _sample_offset_npy(path, local_index):
    arr = np.load(path, mmap_mode="r")
    return arr.offset + local_index * arr[0].nbytes


def _flip(path, offset):
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x5A
    Path(path).write_bytes(bytes(data))


def case_verify_ok_and_flipped_byte(tmp):
    src, out = tmp / "src", tmp / "out"
    make_simple_folder(src, ["a", "b", "c", "d", "e"], 5, (16, 16), seed=9)
    build(src, out, "--size", "16", "--shard-size", str(16 * 16 * 3 * 10))
    m, _, _ = check_cache(out)
    check_eq([s["count"] for s in m["shards"]], [10, 10, 5], "shard counts")
    p = run(["verify", out])
    check(re.search(r"\bOK\b", p.stdout), f"verify: stdout lacks OK: {p.stdout!r}")
    run_json(["verify", out, "--json"])

    def variant_of(cache, name):
        d = tmp / name
        shutil.copytree(cache, d)
        return d

    def variant(name):
        return variant_of(out, name)

    def bad_verify(d, must_name, what):
        p = run(["verify", d], expect_rc=5)
        text = p.stdout + p.stderr
        for s in must_name:
            check(re.search(r"(?<![\w.-])%s(?![\w.-])" % re.escape(s), text),
                  f"{what}: verify output does not name {s!r}:\n{text}")
        return text

    # One byte of sample 13 (shard 1, local 3).
    d = variant("flip")
    _flip(d / "images-00001.npy", _sample_offset_npy(d / "images-00001.npy", 3) + 100)
    text = bad_verify(d, ["images-00001.npy", "13"], "flipped byte")
    check(any("images-00001.npy" in l and re.search(r"(?<!\d)13(?!\d)", l)
              for l in text.splitlines()),
          f"flipped byte: no single line names both images-00001.npy and sample 13:\n{text}")
    # Truncated shard: an error, never a crash.
    d = variant("trunc")
    f = d / "images-00002.npy"
    f.write_bytes(f.read_bytes()[:-100])
    bad_verify(d, ["images-00002.npy"], "truncated shard")
    # Missing labels.npy.
    d = variant("nolabels")
    (d / "labels.npy").unlink()
    bad_verify(d, ["labels.npy"], "deleted labels.npy")
    # A flipped byte in labels.npy data.
    d = variant("labelflip")
    lab = np.load(d / "labels.npy", mmap_mode="r")
    _flip(d / "labels.npy", lab.offset + 8 * 7)
    bad_verify(d, ["labels.npy"], "flipped labels.npy")
    # A flipped byte inside an HDF5 shard's contiguous images data.
    h5out = tmp / "h5"
    build(src, h5out, "--size", "16", "--shard-size", str(16 * 16 * 3 * 10), "--storage", "hdf5",
          "--quiet")
    run(["verify", h5out])
    d = variant_of(h5out, "h5flip")
    with h5py.File(d / "images-00002.h5", "r") as f:
        off = f["images"].id.get_offset()
    _flip(d / "images-00002.h5", off + 16 * 16 * 3 * 4 + 7)  # sample 24 (shard 2, local 4)
    text = bad_verify(d, ["images-00002.h5", "24"], "hdf5 flipped byte")
    check(any("images-00002.h5" in l and re.search(r"(?<!\d)24(?!\d)", l)
              for l in text.splitlines()),
          f"hdf5 flipped byte: no single line names both images-00002.h5 and sample 24:\n{text}")
    # Corrupt manifest: verify and inspect exit 5.
    d = variant("manifest")
    (d / "manifest.json").write_text('{"format_version": 1, "count": ')
    run(["verify", d], expect_rc=5)
    run(["inspect", d], expect_rc=5)
    # The original cache was not touched by any of this.
    run(["verify", out])


def case_verify_source(tmp):
    src, out = tmp / "src", tmp / "out"
    make_simple_folder(src, ["a", "b"], 3, (24, 24), seed=12)
    write_img(src / "b/x.png", rand_rgb(120, 24, 24))
    write_img(src / "b/big.jpg", smooth_rgb(121, 200, 160))  # reduced decode + crop
    build(src, out, "--size", "24")
    check_cache(out)
    p = run(["verify", out, "--source"])
    check(re.search(r"\bOK\b", p.stdout), f"verify --source: stdout lacks OK: {p.stdout!r}")
    write_img(src / "b/x.png", rand_rgb(999, 24, 24))
    p = run(["verify", out, "--source"], expect_rc=5)
    text = p.stdout + p.stderr
    check("b/x.png" in text, f"verify --source does not name b/x.png:\n{text}")
    for rel in ("b/big.jpg", "a/img000.png"):
        check(rel not in text, f"verify --source blames unchanged {rel}:\n{text}")
    run(["verify", out])  # the cache itself is still intact
    # A list source: the changed file is named as written in the list.
    lroot = tmp / "listsrc"
    for k in range(4):
        write_img(lroot / f"i/{k}.png", rand_rgb(130 + k, 24, 24))
    (lroot / "l.csv").write_text("".join(f"i/{k}.png,{k % 2}\n" for k in range(4)))
    lout = tmp / "lout"
    build(lroot / "l.csv", lout, "--size", "24", "--quiet")
    run(["verify", lout, "--source"])
    write_img(lroot / "i/2.png", rand_rgb(999, 24, 24))
    p = run(["verify", lout, "--source"], expect_rc=5)
    check("i/2.png" in p.stdout + p.stderr,
          f"verify --source (list) does not name i/2.png:\n{p.stdout}{p.stderr}")


def case_ragged_inspect_verify(tmp):
    src, out = tmp / "src", tmp / "out"
    made = make_ragged_folder(src, seed=8)
    S = 24
    build(src, out, "--layout", "ragged", "--max-side", str(S), "--shard-size", "6000")
    m, samples, labels, idx = check_ragged_cache(out, "npy", S)
    info = run_json(["inspect", out, "--json"])
    check_eq(info["layout"], "ragged", "inspect --json layout")
    check_eq(info["count"], len(made), "inspect --json count")
    check_eq(info["shape"][2], 3, "inspect --json channels")
    check_eq(info["shards"], len(m["shards"]), "inspect --json shards")
    check_eq(info["recipe"].get("max_side"), S, "inspect --json recipe.max_side")
    p = run(["inspect", out])
    check("ragged" in p.stdout, f"inspect summary does not say ragged:\n{p.stdout}")
    sources = read_jsonl(out / "sources.jsonl")
    # Samples of several sizes (tall, wide, unchanged) written at their own size.
    for i in range(len(samples)):
        png = tmp / f"s{i}.png"
        smp = run_json(["inspect", out, "--sample", str(i), "--out", png, "--json"])
        check_eq((smp["index"], smp["label"], smp["source"]), (i, int(labels[i]), sources[i]),
                 f"inspect --sample {i} --json")
        shard = next(s for s in m["shards"] if s["first"] <= i < s["first"] + s["count"])
        check_eq(smp.get("shard"), shard["file"], f"inspect --sample {i} shard")
        check(png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"--sample {i} --out: not a PNG")
        got = imread_rgb(png)
        check_eq(got.shape, samples[i].shape, f"--sample {i} --out PNG size")
        check(np.array_equal(got, samples[i]), f"--sample {i} --out PNG != stored sample")
    gp = tmp / "grid.png"
    run(["inspect", out, "--grid", "6", "--out", gp])
    gi = cv2.imread(str(gp), cv2.IMREAD_UNCHANGED)
    check(gi is not None and gi.shape[0] >= 128 and gi.shape[1] >= 128,
          f"--grid 6: unreadable or tiny PNG {None if gi is None else gi.shape}")
    run(["inspect", out, "--sample", str(len(samples))], expect_rc=2)
    # verify OK.
    p = run(["verify", out])
    check(re.search(r"\bOK\b", p.stdout), f"verify: stdout lacks OK: {p.stdout!r}")
    # A flipped byte inside one sample of a later shard.
    k = 2
    s = m["shards"][k]
    i = s["first"] + s["count"] - 1
    d = tmp / "flip"
    shutil.copytree(out, d)
    _, data_off = npy_header(d / s["file"])
    off, h, w = idx[i].tolist()
    _flip(d / s["file"], data_off + off + (h * w * 3) // 2)
    p = run(["verify", d], expect_rc=5)
    text = p.stdout + p.stderr
    check(any(s["file"] in l and re.search(r"(?<!\d)%d(?!\d)" % i, l) for l in text.splitlines()),
          f"flipped byte: no line names both {s['file']} and sample {i}:\n{text}")
    check(not any(o["file"] in text for o in m["shards"] if o is not s),
          f"flipped byte: verify blames another shard:\n{text}")
    # An index row pointing outside its shard.
    d2 = tmp / "badindex"
    shutil.copytree(out, d2)
    bad = np.load(d2 / "ragged-index.npy")
    bad[0, 1] += 1000
    np.save(d2 / "ragged-index.npy", bad)
    p = run(["verify", d2], expect_rc=5)
    check("ragged-index.npy" in p.stdout + p.stderr,
          f"corrupt index: verify does not name ragged-index.npy:\n{p.stdout}{p.stderr}")
    # verify --source: OK, then a changed source is named.
    p = run(["verify", out, "--source"])
    check(re.search(r"\bOK\b", p.stdout), f"verify --source: stdout lacks OK: {p.stdout!r}")
    victim = next(r for r in sources if r.endswith(".png") and min(made[r]) > S)
    h0, w0 = made[victim]
    write_img(src / victim, rand_rgb(4242, h0, w0))
    p = run(["verify", out, "--source"], expect_rc=5)
    text = p.stdout + p.stderr
    check(victim in text, f"verify --source does not name {victim}:\n{text}")
    for rel in sources:
        if rel != victim:
            check(rel not in text, f"verify --source blames unchanged {rel}:\n{text}")
    run(["verify", out])  # the cache itself is intact


def _refresh(d, *names):
    """Manifest entries of NAMES take their new size and hash: only the lie under test stays."""
    mp = d / "manifest.json"
    m = json.loads(mp.read_text())
    for name in names:
        size, digest = (d / name).stat().st_size, file_xxh64(d / name)
        for e in list(m["shards"]) + list(m["files"].values()):
            if e.get("file") == name:
                e["bytes"], e["xxh64"] = size, digest
    mp.write_text(json.dumps(m, indent=2))


def case_verify_decodes_jpeg(tmp):
    """verify decodes every JPEG stream: a torn stream with EOI appended, garbage entropy data
    and a stream followed by a second image, each with its checksums rewritten to match, are
    Corruption (exit 5) naming the shard and the sample. --quick (header only) still passes the
    first two, as documented; the trailing image fails even there (and in inspect: the library
    rejects bytes after EOI)."""
    src = tmp / "src"
    for c in "ab":
        for j in range(6):
            write_img(src / c / f"i{j}.png", smooth_rgb(10 * j + ord(c), 48, 48))
    out = tmp / "c"
    build(src, out, "--size", "48", "--codec", "jpeg:90", "--shuffle", "none")
    run(["verify", out])
    m = json.loads((out / "manifest.json").read_text())
    i = 5
    s = next(s for s in m["shards"] if s["first"] <= i < s["first"] + s["count"])
    index = np.load(out / "jpeg-index.npy")
    off, n = int(index[i][0]), int(index[i][1])

    def mutate(name, f):
        d = tmp / name
        shutil.copytree(out, d)
        shard = d / s["file"]
        arr = np.load(shard, mmap_mode="r")
        data_offset = shard.stat().st_size - arr.shape[0]
        del arr
        raw = bytearray(shard.read_bytes())
        stream = bytes(raw[data_offset + off:data_offset + off + n])
        new = f(stream)
        check_eq(len(new), n, f"{name}: mutated stream length")
        raw[data_offset + off:data_offset + off + n] = new
        shard.write_bytes(bytes(raw))
        sums = np.load(d / "checksums.npy")
        sums[i] = xxh64(new)
        with open(d / "checksums.npy", "wb") as fh:
            np.save(fh, sums)
        _refresh(d, s["file"], "checksums.npy")
        return d

    def torn(b):  # first half kept, the rest zeroed, EOI put back at the end
        return b[:n // 2] + bytes(n - n // 2 - 2) + b"\xff\xd9"

    def garbage(b):  # the middle third of the entropy-coded data: 0xFE, no valid Huffman code
        sos = b.index(b"\xff\xda")
        start = sos + 2 + (b[sos + 2] << 8 | b[sos + 3])
        lo, hi = start + (n - start) // 3, start + 2 * (n - start) // 3
        return b[:lo] + b"\xfe" * (hi - lo) + b[hi:]

    def trailing(b):  # a smaller encoding of the same image, then a second "image" to fill
        img = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
        ok, small = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 10])
        small = small.tobytes()
        check(ok and len(small) + 4 <= n, f"re-encoded stream too long: {len(small)} vs {n}")
        return small + b"\xff\xd8" + bytes(n - len(small) - 4) + b"\xff\xd9"

    for name, f, quick_rc in (("torn", torn, 0), ("garbage", garbage, 0),
                              ("trailing", trailing, 5)):
        d = mutate(name, f)
        p = run(["verify", d], expect_rc=5)
        check(s["file"] in p.stdout and f"sample {i}" in p.stdout,
              f"verify {name}: does not name {s['file']} and sample {i}:\n{p.stdout}")
        run(["verify", d, "--quick"], expect_rc=quick_rc)
        if name == "garbage":
            check("bad Huffman code" in p.stdout, f"verify {name}: {p.stdout}")
        if name == "trailing":
            check("after the end-of-image marker" in p.stdout, f"verify {name}: {p.stdout}")
            p = run(["inspect", d, "--sample", str(i), "--out", tmp / "t.png"], expect_rc=5)
            check(s["file"] in p.stderr and "after the end-of-image marker" in p.stderr,
                  f"inspect {name}: {p.stderr}")
    p = run(["verify", out])
    check("every JPEG stream decodes" in p.stdout, f"verify OK line: {p.stdout}")


CASES = {
    "verify_ok_and_flipped_byte": case_verify_ok_and_flipped_byte,
    "verify_source": case_verify_source,
    "ragged_inspect_verify": case_ragged_inspect_verify,
    "verify_decodes_jpeg": case_verify_decodes_jpeg,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
