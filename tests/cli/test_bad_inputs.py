#!/usr/bin/python3
"""Hostile and broken inputs to build, inspect, verify, bench and merge (issue 11, reading side).

Each case is a table of bad inputs; every row runs a command under a timeout (a hang fails the
row instead of hanging the suite) and checks its exit code (docs/OPERATIONS.md), that the message
names the file and the reason, and that no library text leaks (std::, vector::, OpenCV
assertions). FIFOs, /dev/zero symlinks, symlinks out of the cache, lying sizes, wrapped shapes,
an empty cache, bad labels, malformed jsonl, Fortran order and truncated shards. The inputs a
user names to build and merge (list files, idx files, a partitioned build's parts) are in
test_bad_build_inputs.py.

Usage: test_bad_inputs.py CASE   (env DSCACHE = the built binary)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures and the runner are in cli_helpers.py.
"""

import json
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np

from cli_helpers import (DSCACHE, build, check, check_eq, file_xxh64, main, make_simple_folder,
                         run)

HANG_S = 20  # a row that takes longer hangs: it fails
BENCH = ["--seconds", "0.1", "--decode-samples", "20"]
LEAKS = ("std::", "vector::", "_M_range_check", "basic_string", "terminate called",
         "Assertion", "OpenCV(", "!_src.empty()", "what():")
SIDE = ["manifest.json", "labels.npy", "checksums.npy", "sources.jsonl", "skipped.jsonl",
        "images-00000.npy"]


# With BAD_INPUTS_SURVEY=FILE, rows do not fail: each appends its outcome (ok, hang, crash,
# silent = exit 0 where an error was due, leak, wrong = another exit or message) to FILE as a JSON
# line, for counting what a binary (an older one, say) does with every bad input.
SURVEY = os.environ.get("BAD_INPUTS_SURVEY", "")


def _survey(args, rc, must, timeout):
    cmd = [DSCACHE] + [str(a) for a in args]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        got = p.returncode
        if got < 0:
            outcome = "crash"
        elif got == 0 and rc not in (0, None):
            outcome = "silent"
        elif any(s in text for s in LEAKS):
            outcome = "leak"
        elif got != rc or not all(s in text for s in must):
            outcome = "wrong"
        else:
            outcome = "ok"
    except subprocess.TimeoutExpired:
        got, text, outcome = None, "", "hang"
    with open(SURVEY, "a") as f:
        f.write(json.dumps({"args": [a if not a.startswith("/tmp") else os.path.basename(a)
                                     for a in map(str, args)],
                            "expected": rc, "got": got, "outcome": outcome,
                            "text": text[-300:]}) + "\n")

    class P:
        stdout, stderr, returncode = text, "", got
    return P


def expect(args, rc, must, timeout=HANG_S):
    """Runs dscache ARGS: exit `rc`, every string of `must` in stdout+stderr, no leaked text."""
    if SURVEY:
        return _survey(args, rc, must, timeout)
    p = run(args, expect_rc=rc, timeout=timeout)
    text = p.stdout + p.stderr
    for s in must:
        check(s in text, f"{' '.join(map(str, args))}: output lacks {s!r}:\n{text}")
    for s in LEAKS:
        check(s not in text, f"{' '.join(map(str, args))}: library text {s!r} leaked:\n{text}")
    return p


def base_cache(tmp, name="base", *opts, classes=("a", "b", "c"), per_class=4):
    src = tmp / f"{name}-src"
    if not src.exists():
        make_simple_folder(src, list(classes), per_class, (16, 16), seed=3)
    out = tmp / name
    build(src, out, *(() if "--layout" in opts else ("--size", "16")), *opts)
    return out


def variant(cache, tmp, name):
    d = tmp / name
    shutil.copytree(cache, d, symlinks=True)
    return d


def refresh(d, name):
    """After NAME was rewritten on purpose: its manifest entry takes the new size and hash, so
    only the lie under test remains."""
    mp = d / "manifest.json"
    m = json.loads(mp.read_text())
    size, digest = (d / name).stat().st_size, file_xxh64(d / name)
    for e in m["shards"]:
        if e["file"] == name:
            e["bytes"], e["xxh64"] = size, digest
    for e in m["files"].values():
        if e.get("file") == name:
            e["bytes"], e["xxh64"] = size, digest
    mp.write_text(json.dumps(m, indent=2))


def edit_manifest(d, f):
    mp = d / "manifest.json"
    m = json.loads(mp.read_text())
    f(m)
    mp.write_text(json.dumps(m, indent=2))


def cut_to_empty(d):
    """Cuts the 16x16 npy cache in D to count 0 (FORMAT.md allows it; a build refuses to make
    one): empty side files and first shard, the other shards dropped, the manifest to match."""
    (d / "labels.npy").write_bytes(npy_bytes(np.zeros(0, "<i8")))
    (d / "checksums.npy").write_bytes(npy_bytes(np.zeros(0, "<u8")))
    (d / "sources.jsonl").write_bytes(b"")
    (d / "images-00000.npy").write_bytes(npy_bytes(np.zeros((0, 16, 16, 3), np.uint8)))
    for name in ("labels.npy", "checksums.npy", "sources.jsonl", "images-00000.npy"):
        refresh(d, name)

    def zero(m):
        m["count"] = 0
        m["class_counts"] = [0] * len(m["classes"])
        m["shards"] = m["shards"][:1]
        m["shards"][0]["count"] = 0
        m["source"]["entries"] = 0
    edit_manifest(d, zero)


def npy_bytes(arr, header_shape=None, fortran=False):
    """An .npy file of ARR whose header may lie about the shape or the order."""
    shape = arr.shape if header_shape is None else header_shape
    shape_text = "(" + ", ".join(str(int(x)) for x in shape) + ("," if len(shape) == 1 else "") + ")"
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        arr.dtype.str, "True" if fortran else "False", shape_text)
    total = (10 + len(d) + 1 + 63) // 64 * 64
    header = b"\x93NUMPY\x01\x00" + struct.pack("<H", total - 10) + d.encode()
    header += b" " * (total - len(header) - 1) + b"\n"
    return header + np.ascontiguousarray(arr).tobytes()


def fifo(path):
    path.unlink()
    os.mkfifo(path)


def link(path, target):
    path.unlink()
    os.symlink(target, path)


# ---------------------------------------------------------------------------------------------

def case_fifo_and_devices(tmp):
    """Every cache file as a FIFO and as a /dev/zero symlink: verify and inspect name it at
    once (before: both hung), bench and a ragged cache's index too."""
    out = base_cache(tmp)
    rows = 0
    for name in SIDE:
        for kind in ("fifo", "zero"):
            d = variant(out, tmp, f"{kind}-{name}")
            if kind == "fifo":
                fifo(d / name)
                reason = "not a regular file (a FIFO)"
            else:
                link(d / name, "/dev/zero")
                reason = "symlink leads outside the cache directory (to /dev/zero)"
            expect(["verify", d], 5, [name, reason])
            expect(["inspect", d], 5, [name, reason])
            rows += 2
    for name in ("labels.npy", "images-00000.npy"):
        d = tmp / f"fifo-{name}"
        expect(["bench", d, *BENCH], 5, [name, "not a regular file"])
        rows += 1
    rag = base_cache(tmp, "ragged", "--layout", "ragged", "--max-side", "20")
    for kind in ("fifo", "zero"):
        d = variant(rag, tmp, f"rag-{kind}")
        fifo(d / "ragged-index.npy") if kind == "fifo" else link(d / "ragged-index.npy",
                                                                 "/dev/zero")
        expect(["verify", d], 5, ["ragged-index.npy"])
        expect(["inspect", d, "--sample", "0"], 5, ["ragged-index.npy"])
        rows += 2
    check(rows == 30, f"{rows} rows")


def case_symlinks_out(tmp):
    """Symlinks leading out of the cache: refused by verify and inspect as by Cache::open; a
    symlink that stays inside is still accepted."""
    out = base_cache(tmp)
    outside = tmp / "outside"
    outside.mkdir()
    attacks = [
        ("skipped.jsonl", "/etc/passwd"),
        ("sources.jsonl", "/etc/passwd"),
        ("labels.npy", None),  # a faithful copy outside: the link alone is the problem
        ("images-00000.npy", None),
        ("checksums.npy", None),
        ("manifest.json", None),
    ]
    for name, target in attacks:
        d = variant(out, tmp, f"out-{name}")
        if target is None:
            target = outside / f"{d.name}-{name}"
            shutil.copy(d / name, target)
        link(d / name, target)
        must = [name, "symlink leads outside the cache directory"]
        expect(["verify", d], 5, must)
        expect(["inspect", d], 5, must)
        expect(["inspect", d, "--sample", "0"], 5, must)
    # Inside: moved to a sub-folder, linked back; still a valid cache.
    d = variant(out, tmp, "inside")
    (d / "store").mkdir()
    shutil.move(d / "labels.npy", d / "store" / "labels.npy")
    os.symlink("store/labels.npy", d / "labels.npy")
    expect(["verify", d], 0, ["OK"])


def case_lying_sizes(tmp):
    """Headers that claim more than the file holds: named errors, nothing allocated (before:
    verify allocated 2^28 labels and was OOM-killed)."""
    out = base_cache(tmp)
    n = json.loads((out / "manifest.json").read_text())["count"]
    all_tools, verify_only = ("verify", "inspect", "bench"), ("verify",)  # who reads the file
    rows = [
        ("labels.npy", npy_bytes(np.zeros(n, "<i8"), header_shape=(1 << 28,)),
         "shape is (268435456,), expected", all_tools),
        ("checksums.npy", npy_bytes(np.zeros(n, "<u8"), header_shape=(1 << 28,)),
         "shape is (268435456,), expected", verify_only),
        ("images-00000.npy", npy_bytes(np.zeros((n, 16, 16, 3), np.uint8),
                                       header_shape=(n + 5, 16, 16, 3)), "header says",
         all_tools),
        ("images-00000.npy", npy_bytes(np.zeros((n, 16, 16, 3), np.uint8),
                                       header_shape=(1 << 62, 16, 16, 3)), "overflows", all_tools),
    ]
    for k, (name, data, reason, tools) in enumerate(rows):
        d = variant(out, tmp, f"lie-{k}")
        (d / name).write_bytes(data)
        refresh(d, name)
        commands = {"verify": ["verify", d], "inspect": ["inspect", d, "--sample", "0"],
                    "bench": ["bench", d, *BENCH]}
        for t in tools:
            expect(commands[t], 5, [name, reason])
    # The manifest's size, not the header, lies: a labels.npy 8 bytes short.
    d = variant(out, tmp, "short-labels")
    with open(d / "labels.npy", "r+b") as f:
        f.truncate((d / "labels.npy").stat().st_size - 8)
    expect(["verify", d], 5, ["labels.npy", "bytes, manifest says"])
    expect(["inspect", d], 5, ["labels.npy", "bytes, manifest says"])


def case_wrapped_shapes(tmp):
    """Index rows whose h*w*C wraps 2^64, and an HDF5 shard whose shape overflows: named
    Corruption (before: inspect --sample/--grid crashed in cvtColor)."""
    rag = base_cache(tmp, "ragged", "--layout", "ragged", "--max-side", "20")
    idx = np.load(rag / "ragged-index.npy")
    # 1437049164 * 4278847826 * 3 = 776 mod 2^64: a row whose wrapped size fits in the shard, the
    # one that reached cvtColor with a negative width.
    for k, (h, w) in enumerate([(1437049164, 4278847826), ((1 << 32) - 1, (1 << 32) - 1),
                                (1 << 31, 1 << 31), (0, 5), (-3, 5)]):
        d = variant(rag, tmp, f"wrap-{k}")
        bad = idx.copy()
        bad[0, 1], bad[0, 2] = h, w
        (d / "ragged-index.npy").write_bytes(npy_bytes(bad))
        refresh(d, "ragged-index.npy")
        must = ["ragged-index.npy", "row 0"]
        expect(["verify", d], 5, must)
        expect(["inspect", d], 5, must)
        expect(["inspect", d, "--sample", "0", "--out", tmp / f"w{k}.png"], 5, must)
        expect(["inspect", d, "--grid", "4", "--out", tmp / f"g{k}.png"], 5, must)
    # HDF5, chunked: a dataset of 2^62 samples of 16x16x3 (never allocated) overflows 2^64 bytes.
    h5 = base_cache(tmp, "h5", "--storage", "hdf5")
    d = variant(h5, tmp, "h5-overflow")
    shard = d / "images-00000.h5"
    shard.unlink()
    with h5py.File(shard, "w") as f:
        f.create_dataset("images", shape=(1 << 62, 16, 16, 3), maxshape=(None, 16, 16, 3),
                         chunks=(1, 16, 16, 3), dtype="u1")
        f.create_dataset("labels", shape=(1,), dtype="<i8")
    refresh(d, "images-00000.h5")
    expect(["verify", d], 5, ["images-00000.h5", "overflows 64 bits"])
    expect(["inspect", d, "--sample", "0"], 5, ["images-00000.h5", "overflows 64 bits"])


def case_empty_cache(tmp):
    """count 0 (allowed by FORMAT.md): a valid cache, not a usage error. inspect and verify work,
    --grid and bench say there is nothing to show or time and exit 0 (before: SIGFPE, SIGABRT,
    then exit 2), --sample is out of range (a bad value: exit 2)."""
    # A build refuses to make one (nothing decoded); so cut a real cache down to 0 samples.
    out = variant(base_cache(tmp), tmp, "empty")
    cut_to_empty(out)
    check(json.loads((out / "manifest.json").read_text())["count"] == 0, "count is not 0")
    expect(["inspect", out], 0, ["samples    0"])
    expect(["verify", out], 0, ["OK"])
    expect(["inspect", out, "--grid", "4", "--out", tmp / "g.png"], 0, ["holds no samples"])
    check(not (tmp / "g.png").exists(), "--grid wrote a contact sheet of no samples")
    expect(["inspect", out, "--sample", "0"], 2, ["out of range"])
    expect(["bench", out, *BENCH], 0, ["holds no samples"])
    j = json.loads(expect(["bench", out, *BENCH, "--json"], 0, ["holds no samples"]).stdout)
    check_eq((j["samples"], j["rows"]), (0, []), "bench --json of an empty cache")


def case_bad_labels(tmp):
    """Labels out of range, an unlabeled cache, Fortran order, another dtype: verify and inspect
    agree with Cache::open (before: _M_range_check leaked, and verify called an unlabeled cache
    corrupt)."""
    out = base_cache(tmp)
    n = json.loads((out / "manifest.json").read_text())["count"]
    labels = np.load(out / "labels.npy")

    d = variant(out, tmp, "label99")
    bad = labels.copy()
    bad[2] = 99
    (d / "labels.npy").write_bytes(npy_bytes(bad))
    refresh(d, "labels.npy")
    must = ["labels.npy", "label of sample 2 is 99, outside [0, 3) classes"]
    expect(["verify", d], 5, must)
    expect(["inspect", d, "--sample", "2"], 5, must)
    expect(["bench", d, *BENCH], 5, must)

    d = variant(out, tmp, "unlabeled")
    edit_manifest(d, lambda m: (m.__setitem__("classes", []), m.__setitem__("class_counts", [])))
    expect(["verify", d], 0, ["OK"])
    expect(["inspect", d, "--sample", "0"], 0, ["label"])

    d = variant(out, tmp, "unlabeled99")
    (d / "labels.npy").write_bytes(npy_bytes(bad))
    refresh(d, "labels.npy")
    edit_manifest(d, lambda m: (m.__setitem__("classes", []), m.__setitem__("class_counts", [])))
    p = expect(["inspect", d, "--sample", "2"], 0, ["sample 2: label 99, source"])
    check("(label 99)" not in p.stdout, f"an unlabeled cache's sample names a class:\n{p.stdout}")
    expect(["inspect", d, "--grid", "4", "--out", tmp / "u.png"], 0, ["wrote"])

    d = variant(out, tmp, "fortran")
    (d / "labels.npy").write_bytes(npy_bytes(labels, fortran=True))
    refresh(d, "labels.npy")
    expect(["verify", d], 5, ["labels.npy", "Fortran order"])
    expect(["inspect", d, "--sample", "0"], 5, ["labels.npy", "Fortran order"])

    d = variant(out, tmp, "int32")
    (d / "labels.npy").write_bytes(npy_bytes(labels.astype("<i4")))
    refresh(d, "labels.npy")
    expect(["verify", d], 5, ["labels.npy", "dtype is '<i4'"])
    check(n == len(labels), "label count")


def case_malformed_jsonl(tmp):
    """sources.jsonl / skipped.jsonl that are not what FORMAT.md says: verify now reports them
    as inspect and Cache::open do (before: verify said OK)."""
    out = base_cache(tmp)
    src = (out / "sources.jsonl").read_bytes()
    rows = [
        ("sources.jsonl", b"{" + src[1:], "line 1 is not a JSON string"),
        ("sources.jsonl", src + b'"extra"\n', "lines, manifest says"),
        ("sources.jsonl", src.replace(b"\n", b"\n\n", 1), "lines, manifest says"),
        ("skipped.jsonl", b'{"source": "x"}\n', "lines, manifest says 0"),
    ]
    for k, (name, data, reason) in enumerate(rows):
        d = variant(out, tmp, f"jsonl-{k}")
        (d / name).write_bytes(data)
        refresh(d, name)
        expect(["verify", d], 5, [name, reason])
        # inspect reads sources.jsonl for --sample, skipped.jsonl for its summary.
        expect(["inspect", d] + (["--sample", "0"] if name == "sources.jsonl" else []), 5,
               [name, reason])
    d = variant(out, tmp, "skip-shape")
    (d / "skipped.jsonl").write_bytes(b'["not", "a record"]\n')
    refresh(d, "skipped.jsonl")
    edit_manifest(d, lambda m: m.__setitem__("skipped", 1))
    expect(["verify", d], 5, ["skipped.jsonl", "is not a skip record"])


def case_truncated_shards(tmp):
    """Shards shorter than the manifest says: named Corruption everywhere (npy and HDF5)."""
    out = base_cache(tmp)
    h5 = base_cache(tmp, "h5", "--storage", "hdf5")
    for k, (cache, name, cut) in enumerate([(out, "images-00000.npy", 100),
                                            (out, "images-00000.npy", None),
                                            (h5, "images-00000.h5", 100)]):
        d = variant(cache, tmp, f"trunc-{k}")
        p = d / name
        with open(p, "r+b") as f:
            f.truncate(0 if cut is None else p.stat().st_size - cut)
        must = [name, "bytes, manifest says"]
        expect(["verify", d], 5, must)
        expect(["inspect", d], 5, must)
        expect(["inspect", d, "--sample", "0"], 5, must)
        expect(["bench", d, *BENCH], 5, must)


def lying_jpeg_row(tmp, name, side):
    """A ragged JPEG cache whose jpeg-index.npy row 0 claims side x side over its real stream,
    with the index's manifest entry refreshed (only the lie remains)."""
    d = base_cache(tmp, name, "--layout", "ragged", "--max-side", "64", "--codec", "jpeg")
    index = np.load(d / "jpeg-index.npy")
    index[0][2] = index[0][3] = side
    with open(d / "jpeg-index.npy", "wb") as f:
        np.save(f, index)
    refresh(d, "jpeg-index.npy")
    shard = json.loads((d / "manifest.json").read_text())["shards"][0]["file"]
    return d, shard


def case_jpeg_lying_index_row(tmp):
    """inspect --sample/--grid over one lying jpeg-index row (65500 x 65500 over a 16x16 stream):
    the stream's own header is read first, so under a 4 GB address-space limit this is
    Corruption (exit 5) naming the shard and sample, not a 12.9 GB allocation (bad_alloc)."""
    d, shard = lying_jpeg_row(tmp, "lie", 65500)
    limit, env = ["prlimit", "--as=4294967296", "--"], None
    if os.environ.get("DSCACHE_ASAN") == "1":
        # AddressSanitizer's shadow memory needs far more address space than 4 GB: its allocator
        # refuses the same sizes instead (a 12.9 GB request fails, so exit 5 still proves that
        # none was made).
        limit = []
        env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                   ":allocator_may_return_null=1:max_allocation_size_mb=4096")
    for args in (["--sample", "0"], ["--grid", "4"]):
        cmd = limit + [DSCACHE, "inspect", str(d), *args, "--out", str(tmp / "lie.png")]
        p = subprocess.run(cmd, capture_output=True, timeout=HANG_S, env=env)
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        check(p.returncode == 5, f"inspect {' '.join(args)} on a lying row: exit {p.returncode} "
              f"(want 5):\n{text}")
        for want in (shard, "sample 0", "stream is 16x16"):
            check(want in text, f"inspect {' '.join(args)}: output lacks {want!r}:\n{text}")
        for leak in LEAKS + ("bad_alloc",):
            check(leak not in text, f"inspect {' '.join(args)}: {leak!r} leaked:\n{text}")


def case_jpeg_side_cap(tmp):
    """A jpeg-index row of 65520 x 65520 (under the frame header's 65535, over libjpeg's 65500):
    Corruption at open (exit 5) naming jpeg-index.npy, the sample and its shard, for inspect
    and verify, not an InvalidArgument naming neither (exit 1)."""
    d, shard = lying_jpeg_row(tmp, "cap", 65520)
    for args in (["inspect", d, "--sample", "0", "--out", tmp / "cap.png"], ["inspect", d],
                 ["verify", d]):
        expect(args, 5, ["jpeg-index.npy", "sample 0", shard, "65500"])


CASES = {
    "fifo_and_devices": case_fifo_and_devices,
    "symlinks_out": case_symlinks_out,
    "lying_sizes": case_lying_sizes,
    "wrapped_shapes": case_wrapped_shapes,
    "empty_cache": case_empty_cache,
    "bad_labels": case_bad_labels,
    "malformed_jsonl": case_malformed_jsonl,
    "truncated_shards": case_truncated_shards,
    "jpeg_lying_index_row": case_jpeg_lying_index_row,
    "jpeg_side_cap": case_jpeg_side_cap,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
