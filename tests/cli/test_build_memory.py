#!/usr/bin/python3
"""What listing and building cost in memory per sample (issue 33): the peak RSS of `dscache
build` (and of its --dry-run) over a folder and over a CSV table of 4,000 and of 40,000 files,
and the marginal bytes per sample between them (the process's fixed base cancels). Each bound is
derived from what the code keeps per entry (written beside it) with room for the allocator and
page rounding; the code before issue 33 measured 334 (folder dry run), 350 (build) and 981 (table)
bytes per sample here and fails every bound. Sizes, not times: nothing here depends on the machine's
speed."""

import os
import subprocess
import sys

from cli_helpers import DSCACHE, check, main

SMALL, BIG = 4000, 40000
CLASSES = 40


def tiny_jpeg():
    import cv2
    import numpy as np
    rgb = (np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3) * 5)
    ok, data = cv2.imencode(".jpg", rgb)
    check(ok, "cv2 cannot encode a JPEG")
    return data.tobytes()


def make_source(root, n):
    """n copies of one 8x8 JPEG in CLASSES class folders (names like c07/0012345.jpg, 15 bytes),
    and table.csv naming them with a label and two fields (an int and a float)."""
    data = tiny_jpeg()
    for c in range(CLASSES):
        os.makedirs(root / f"c{c:02d}", exist_ok=True)
    lines = ["image_path,label,aux_int,aux_float"]
    for i in range(n):
        name = f"c{i % CLASSES:02d}/{i:07d}.jpg"
        with open(root / name, "wb") as f:
            f.write(data)
        lines.append(f"{name},c{i % CLASSES:02d},{i * 7 % 1000},{(i % 997) / 997:.6f}")
    (root / "table.csv").write_text("\n".join(lines) + "\n")


# Runs argv[1:] and prints its exit code and ru_maxrss. A forked child's ru_maxrss starts at its
# parent's RSS (it is kept across exec), and this test's own process holds numpy and OpenCV
# (~150 MiB, more than dscache here): the child is started from this small interpreter instead.
MEASURE = """
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, usage = os.wait4(p.pid, 0)
sys.stderr.buffer.write(err)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def peak_rss_bytes(args):
    """Runs dscache ARGS to its end; returns the kernel's peak RSS of the process (ru_maxrss)."""
    argv = [DSCACHE] + [str(a) for a in args]
    p = subprocess.run(["/usr/bin/python3", "-c", MEASURE] + argv, capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0, f"measuring {' '.join(argv)}: {p.stderr}")
    rc, kib = (int(v) for v in p.stdout.split())
    check(rc == 0, f"{' '.join(argv)}: exit {rc}: {p.stderr}")
    return kib * 1024


def marginal(tmp, what, args_of):
    """(peak RSS at BIG - peak RSS at SMALL) / (BIG - SMALL), the lowest of two runs each (a
    peak can only be raised by noise)."""
    peaks = {}
    for n in (SMALL, BIG):
        src = tmp / f"src-{n}"
        if not src.exists():
            make_source(src, n)
        peaks[n] = min(peak_rss_bytes(args_of(src, tmp / f"out-{what}-{n}-{k}"))
                       for k in range(2))
    per = (peaks[BIG] - peaks[SMALL]) / (BIG - SMALL)
    print(f"{what}: peak RSS {peaks[SMALL] / 2**20:.1f} MiB at {SMALL}, "
          f"{peaks[BIG] / 2**20:.1f} MiB at {BIG}: {per:.0f} bytes per sample")
    return per


def case_folder_dry_run(tmp):
    # Listing: a SourceEntries record (40) and the name (15); the estimate's plan (12) and the
    # build order (8): 75 bytes a sample.
    per = marginal(tmp, "folder dry run",
                   lambda src, out: ["build", src, out, "--size", "8", "--dry-run"])
    check(per <= 120, f"folder --dry-run: {per:.0f} bytes per sample, more than 120")


def case_folder_build(tmp):
    # The listing and the order (63, above); the writer's labels (8), checksums (8) and sources
    # (the JSON line, 18, and its end, 8; the text doubles as it grows: up to 36 more); the
    # open shard's sidecar text (~45 a sample of the shard, up to twice as it grows; one shard
    # here holds every sample): ~220 bytes a sample.
    per = marginal(tmp, "folder build",
                   lambda src, out: ["build", src, out, "--size", "8", "--threads", "1"])
    check(per <= 260, f"folder build: {per:.0f} bytes per sample, more than 260")


def case_table_dry_run(tmp):
    # The table: 4 cells of 16 bytes and their text (~35); the listing (55); the two fields'
    # values and offsets (8 + 8 + 4 + 8); the labels' views (16) and class indexes (8); the
    # plan and order (20): ~226 bytes a sample. The file's own text is freed before listing, and
    # files are stat'ed 4,096 rows at a time (their paths and stats: a fixed ~0.75 MB).
    per = marginal(tmp, "table dry run",
                   lambda src, out: ["build", src / "table.csv", out, "--size", "8",
                                     "--dry-run"])
    check(per <= 240, f"table --dry-run: {per:.0f} bytes per sample, more than 240")


CASES = {
    "folder_dry_run_memory": case_folder_dry_run,
    "folder_build_memory": case_folder_build,
    "table_dry_run_memory": case_table_dry_run,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
