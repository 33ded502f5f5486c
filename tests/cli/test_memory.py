#!/usr/bin/python3
"""Peak memory per sample of listing (`dscache build --dry-run` over a folder and a table), of
`dscache build`, `dscache verify`, `dscache merge` and dscache-train's start-up (issue 33: <= 64
bytes per sample beyond a fixed base, or the bound what a phase must hold allows).

The listing and build cases list 4,000 and 40,000 copies of one 8x8 JPEG in 40 class folders
(names like c07/0012345.jpg) and a CSV table naming them with a label and two fields; the code
before issue 33 measured 334 (folder dry run), 350 (build) and 981 (table) bytes per sample
there. The other cases build the same kind of cache at two sizes from an idx file (MNIST-style, written here
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
import sys

from cli_helpers import DSCACHE, Skip, check, main, peak_rss_kib

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


def peak_kib(args):
    """ru_maxrss (KiB) of a child running args (cli_helpers.peak_rss_kib: from a small process)."""
    return peak_rss_kib(args, timeout=600)


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


LIST_SIZES = (4_000, 40_000)
CLASSES = 40


def make_folder(root, n):
    """n copies of one 8x8 JPEG in CLASSES class folders, and table.csv naming them with a label
    and two fields (an int and a float)."""
    import cv2
    import numpy as np
    ok, data = cv2.imencode(".jpg", np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3) * 5)
    check(ok, "cv2 cannot encode a JPEG")
    for c in range(CLASSES):
        (root / f"c{c:02d}").mkdir(parents=True, exist_ok=True)
    lines = ["image_path,label,aux_int,aux_float"]
    for i in range(n):
        name = f"c{i % CLASSES:02d}/{i:07d}.jpg"
        (root / name).write_bytes(data.tobytes())
        lines.append(f"{name},c{i % CLASSES:02d},{i * 7 % 1000},{(i % 997) / 997:.6f}")
    (root / "table.csv").write_text("\n".join(lines) + "\n")
    return root


def listing_marginal(tmp, what, bound, args_of):
    """marginal() of dscache ARGS_OF(source folder, output) over LIST_SIZES, the lower of two
    runs at each size (noise only raises a peak)."""
    kib = {}
    for n in LIST_SIZES:
        src = tmp / f"src{n}"
        if not src.exists():
            make_folder(src, n)
        kib[n] = min(peak_kib([DSCACHE, *args_of(src, tmp / f"out{n}-{k}")]) for k in range(2))
    marginal(what, kib, bound)


def case_folder_dry_run_memory(tmp):
    # Listing: a SourceEntries record (40) and the name (15); the estimate's plan (12) and the
    # build order (8): 75 bytes a sample, with room for the allocator: 120.
    listing_marginal(tmp, "folder --dry-run", 120,
                     lambda src, out: ["build", src, out, "--size", "8", "--dry-run"])


def case_folder_build_memory(tmp):
    # The listing and the order (63, above); the writer's labels (8) and checksums (8, up to 24
    # while a vector grows); the open shard's sources and sidecar text (~100 a sample of the
    # shard; one shard here holds every sample), committed shards' sources are on disk: ~180.
    listing_marginal(tmp, "folder build", 260,
                     lambda src, out: ["build", src, out, "--size", "8", "--threads", "1"])


def case_table_dry_run_memory(tmp):
    # The table: 4 cells of 16 bytes and their text (~35); the listing (55); the two fields'
    # values and offsets (8 + 8 + 4 + 8); the labels' views (16) and class indexes (8); the
    # plan and order (20): ~226 bytes a sample. The file's own text is freed before listing, and
    # files are stat'ed 4,096 rows at a time (their paths and stats: a fixed ~0.75 MB).
    listing_marginal(tmp, "table --dry-run", 240,
                     lambda src, out: ["build", src / "table.csv", out, "--size", "8",
                                       "--dry-run"])


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
    "folder_dry_run_memory": case_folder_dry_run_memory,
    "folder_build_memory": case_folder_build_memory,
    "table_dry_run_memory": case_table_dry_run_memory,
    "memory_verify": case_memory_verify,
    "memory_merge": case_memory_merge,
    "memory_train": case_memory_train,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
