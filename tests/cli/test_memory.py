#!/usr/bin/python3
"""Peak memory per sample of `dscache verify`, `dscache merge` and dscache-train's start-up
(issue 33: <= 64 bytes per sample beyond a fixed base).

Each case builds the same kind of cache at two sizes from an idx file (MNIST-style, written here
in a blink; its sources are "images-idx3-ubyte#12345", ~28 bytes, so a per-sample string costs
what a real path would), runs the phase as a child and takes its peak RSS from os.wait4
(ru_maxrss: the kernel's own peak, file pages of mapped shards included). The marginal bytes
per sample, (RSS at N2 - RSS at N1) / (N2 - N1), cancel the fixed base (libraries, buffers) and
are compared with a bound derived, in each case, from the compact arrays the phase must hold.
The old phases held every source string (~80 bytes each with its vector slot), the whole text
beside the lines, or mapped the whole cache: each bound fails them.

Usage: test_memory.py CASE   (env DSCACHE = the built binary; memory_train also DSCACHE_TRAIN,
registered by trainer/meson.build)
Exit 0 = pass, 1 = fail, 2 = unknown case, 77 = skipped.
"""

import os
import struct
import subprocess
import sys

from cli_helpers import DSCACHE, Skip, check, main

SIZES = (5_000, 50_000)


def idx_header(*shape):
    return struct.pack(">BBBB", 0, 0, 0x08, len(shape)) + b"".join(struct.pack(">I", d)
                                                                    for d in shape)


def make_idx(d, n, side):
    """d/images-idx3-ubyte (n, side, side) random uint8 with d/labels-idx1-ubyte, 10 classes."""
    d.mkdir(parents=True)
    with open(d / "images-idx3-ubyte", "wb") as f:
        f.write(idx_header(n, side, side))
        for first in range(0, n, 1024):
            f.write(os.urandom(min(1024, n - first) * side * side))
    (d / "labels-idx1-ubyte").write_bytes(idx_header(n) + bytes(i % 10 for i in range(n)))
    return d / "images-idx3-ubyte"


# Runs argv[1:] and prints its ru_maxrss (KiB) last. A fresh `python3 -S` (a few MiB) forks it:
# a child forked from this test process would start with this process's RSS (numpy, cv2: more
# than the phases themselves), and ru_maxrss counts the pages a process had before its exec.
MEASURE = """import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_kib(args):
    """ru_maxrss (KiB) of a child running args; fails the case on a non-zero exit."""
    p = subprocess.run([sys.executable, "-S", "-c", MEASURE, *[str(a) for a in args]],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"{args[:2]} failed: {p.stderr[-2000:]}")
    return int(p.stdout.split()[-1])


def build(src, out, *opts):
    peak_kib([DSCACHE, "build", src, out, "-q", "--threads", "2", *opts])


def marginal(what, kib, bound):
    """Bytes per sample between the two sizes, checked against `bound`."""
    (n1, a), (n2, b) = sorted(kib.items())
    per = (b - a) * 1024 / (n2 - n1)
    print(f"{what}: peak RSS {a} KiB at {n1}, {b} KiB at {n2}: {per:.1f} B/sample "
          f"(bound {bound})")
    check(per <= bound, f"{what}: {per:.1f} bytes per sample, more than {bound} "
          f"(peak RSS {a} KiB at N={n1}, {b} KiB at N={n2})")


def case_memory_verify(tmp):
    # What verify must hold: checksums.npy's image column, 8 B/sample, and while it checks
    # labels.npy the labels, 8 B/sample more (CacheDir::check_open's copy is gone by then);
    # sources.jsonl and skipped.jsonl are streamed (one 1 MiB piece). 16 B/sample, doubled for
    # the allocator's slack: 32. The old verify held the text, its lines and the strings of
    # sources.jsonl (~190 B/sample with these sources).
    kib = {}
    for n in SIZES:
        out = tmp / f"c{n}"
        build(make_idx(tmp / f"src{n}", n, 8), out)
        kib[n] = peak_kib([DSCACHE, "verify", out])
    marginal("verify", kib, 32)


def case_memory_merge(tmp):
    # What merge must hold: the writer's labels and checksums of the whole cache (8 + 8 B/sample;
    # a vector briefly holds its old and new buffers while it grows: at most 3 x 8 B for the one
    # growing), the part being merged's labels and checksums (16 B per sample of the part: 2 B per
    # sample of the cache with 8 parts), and one shard's sources and sidecar text (a part is one
    # shard here: ~120 B per sample of the part, 15 B/sample of the cache). 8 + 24 + 2 + 15 = 49:
    # bound 64. The old merge held every source string twice (the parts' and the writer's).
    kib = {}
    for n in SIZES:
        src = make_idx(tmp / f"src{n}", n, 8)
        parts = []
        for k in range(8):
            parts.append(tmp / f"p{n}-{k}")
            build(src, parts[-1], "--part", f"{k}/8")
        kib[n] = peak_kib([DSCACHE, "merge", *parts, tmp / f"m{n}", "-q"])
    marginal("merge", kib, 64)


def case_memory_train(tmp):
    # dscache-train --max-steps 1, start-up to its first step, on 32x32 grey samples (1 KiB
    # each): the cache's labels (8 B/sample, Cache::open) and the epoch's permutation (8 B/sample,
    # the Loader) are all it holds per sample; --normalize dataset reads its 8192 samples with
    # pread, so none of the cache's pages stay mapped. 16 B/sample, and the pages the first batch
    # maps are a fixed base: bound 64. The old trainer mapped nearly the whole cache through
    # fault-around while measuring the normalization (~1,000 B/sample here).
    train = os.environ.get("DSCACHE_TRAIN", "")
    if not train or not os.access(train, os.X_OK):
        raise Skip("DSCACHE_TRAIN is not set to a dscache-train binary (trainer not built)")
    kib = {}
    for n in SIZES:
        out = tmp / f"c{n}"
        build(make_idx(tmp / f"src{n}", n, 32), out)
        kib[n] = peak_kib([train, "--train", out, "--max-steps", "1", "--batch", "8",
                           "--no-progress", "--output", tmp / f"t{n}", "--force"])
    marginal("dscache-train start-up", kib, 64)


CASES = {
    "memory_verify": case_memory_verify,
    "memory_merge": case_memory_merge,
    "memory_train": case_memory_train,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
