#!/usr/bin/python3
"""Hostile and broken inputs a user names to `dscache build` and `dscache merge` (issue 11): FIFOs
and devices as list files, idx files that are gzip bombs or lie about their count, and parts of
a partitioned build with a FIFO, a /dev/zero shard link or a side file linked out. Each row runs
under a timeout and checks its exit code and message, as test_bad_inputs.py's rows do (its
`expect` runs them).

Usage: test_bad_build_inputs.py CASE   (env DSCACHE = the built binary)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures and the runner are in cli_helpers.py.
"""

import gzip
import json
import os
import struct
import sys

import numpy as np

from cli_helpers import build, check, main, make_simple_folder
from test_bad_inputs import expect, fifo, link, variant


def idx_images(n, rows=28, cols=28, declared=None):
    head = struct.pack(">IIII", 0x803, n if declared is None else declared, rows, cols)
    return head + np.random.default_rng(1).integers(0, 256, n * rows * cols, np.uint8).tobytes()


def idx_labels(n):
    return struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))


def case_build_inputs(tmp):
    """Sources a user names: FIFOs and devices as list files, idx files and images; an idx gzip
    bomb and an idx that lies about its count. Named errors (or named skips), never a hang."""
    d = tmp / "in"
    d.mkdir()
    os.mkfifo(d / "list.csv")
    expect(["build", d / "list.csv", tmp / "o1", "--size", "8"], 5,
           ["list.csv", "not a regular file (a FIFO)"])
    os.symlink("/dev/zero", d / "zero.csv")
    expect(["build", d / "zero.csv", tmp / "o2", "--size", "8"], 5,
           ["zero.csv", "not a regular file (a character device)"])
    os.mkfifo(d / "fifo-images-idx3-ubyte")
    expect(["build", d / "fifo-images-idx3-ubyte", tmp / "o3"], 1,
           ["fifo-images-idx3-ubyte", "or an idx3 images file"])  # sniffed without blocking
    # A gzip bomb: the header declares 2 images of 28x28, the stream inflates to 200 MB.
    bomb = gzip.compress(idx_images(2) + bytes(200 << 20), 9)
    check(len(bomb) < 1 << 20, f"bomb is {len(bomb)} bytes")
    (d / "bomb-images-idx3-ubyte.gz").write_bytes(bomb)
    (d / "bomb-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_labels(2)))
    expect(["build", d / "bomb-images-idx3-ubyte.gz", tmp / "o4"], 5,
           ["bomb-images-idx3-ubyte.gz", "file holds more"])
    (d / "lie-images-idx3-ubyte").write_bytes(idx_images(10, declared=100))
    (d / "lie-labels-idx1-ubyte").write_bytes(idx_labels(100))
    expect(["build", d / "lie-images-idx3-ubyte", tmp / "o5"], 5,
           ["lie-images-idx3-ubyte", "header says 100 images"])
    (d / "ok-images-idx3-ubyte").write_bytes(idx_images(10))
    (d / "ok-labels-idx1-ubyte").write_bytes(idx_labels(10) + b"\x01" * 5)
    expect(["build", d / "ok-images-idx3-ubyte", tmp / "o6"], 5,
           ["ok-labels-idx1-ubyte", "header says 10 labels"])
    # Inside a class folder: a FIFO and a /dev/zero link are skipped with a reason, not read.
    src = tmp / "src"
    make_simple_folder(src, ["a", "b"], 3, (16, 16), seed=5)
    os.mkfifo(src / "a" / "fifo.png")
    os.symlink("/dev/zero", src / "b" / "zero.png")
    p = expect(["build", src, tmp / "o7", "--size", "16", "--shuffle", "none"], 0, [])
    skips = (tmp / "o7" / "skipped.jsonl").read_text()
    m = json.loads((tmp / "o7" / "manifest.json").read_text())
    check(m["count"] == 6, f"count {m['count']} (expected the 6 real images)")
    check("fifo.png" in skips or "fifo.png" not in p.stdout, f"skips: {skips}")


def case_merge_parts(tmp):
    """Parts of a partitioned build with a FIFO, a /dev/zero shard link and a side file linked
    out: merge names the part's file (exit 5) instead of hanging or copying /etc/passwd."""
    src = tmp / "src"
    make_simple_folder(src, ["a", "b"], 4, (16, 16), seed=6)
    parts = []
    for i in range(2):
        p = tmp / f"part{i}"
        build(src, p, "--size", "16", "--part", f"{i}/2")
        parts.append(p)

    def merged(name, attack, must):
        ps = [variant(p, tmp, f"{name}-p{i}") for i, p in enumerate(parts)]
        attack(ps[1])
        expect(["merge", *ps, tmp / f"{name}-out"], 5, must)

    merged("fifo", lambda p: fifo(p / "labels.npy"), ["labels.npy", "not a regular file"])
    merged("zero", lambda p: link(p / "images-00000.npy", "/dev/zero"),
           ["images-00000.npy", "symlink"])
    merged("passwd", lambda p: link(p / "sources.jsonl", "/etc/passwd"),
           ["sources.jsonl", "symlink leads outside the cache directory"])
    merged("manifest", lambda p: fifo(p / "manifest.json"), ["manifest.json", "not a regular"])


CASES = {
    "build_inputs": case_build_inputs,
    "merge_parts": case_merge_parts,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
