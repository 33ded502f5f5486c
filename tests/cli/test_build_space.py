#!/usr/bin/python3
"""`dscache build --dry-run` and the space check (docs/BUILD.md "Dry run and space check"): the
estimate against the real build's bytes, nothing written by a dry run, the same errors as a
build, and the refusal (exit 7) on a real small filesystem (a tmpfs; skipped when it cannot be
mounted: root and CAP_SYS_ADMIN)."""

import os
import re
import subprocess
import sys
from pathlib import Path

from cli_helpers import (build, check, check_eq, main, make_mixed_folder,
                         make_simple_folder, partial_dir, run)
import numpy as np

from fields_helpers import make_coco, make_table
from test_build_lists import idx_bytes
from test_disk_full import small_tmpfs
from test_fields import COCO_IMAGES

EXIT_NO_SPACE = 7


def tree(d):
    """Every path under d (hidden ones included) with its size: what a dry run must not change."""
    return sorted((str(p.relative_to(d)), p.stat().st_size if p.is_file() else -1)
                  for p in Path(d).rglob("*"))


def cache_bytes(out):
    return sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())


def estimate_of(stdout):
    m = re.search(r"^estimate: .*\((\d+) bytes\)", stdout, re.M)
    check(m, f"dry run: no 'estimate:' line with bytes in {stdout!r}")
    return int(m.group(1))


def on_disk_of(stdout):
    m = re.search(r"^on disk: .*\((\d+) bytes\)", stdout, re.M)
    check(m, f"dry run: no 'on disk:' line with bytes in {stdout!r}")
    return int(m.group(1))


def dry_run(src, out, opts):
    before = tree(Path(out).parent)
    p = build(src, out, *opts, "--dry-run")
    check_eq(tree(Path(out).parent), before, f"files under {Path(out).parent} after --dry-run")
    check("nothing was written" in p.stdout, f"dry run does not say so: {p.stdout!r}")
    return p.stdout


# [name, source maker, options, tolerance]: raw npy and HDF5 are within 5% by contract; JPEG is
# an extrapolation from a few encoded sources.
def estimate_cases(tmp):
    folder = tmp / "folder"
    make_simple_folder(folder, ["a", "b", "c"], 20, (40, 30), seed=3)
    mixed = tmp / "mixed"
    make_mixed_folder(mixed, ["x", "y"], 12, (20, 300))
    table = tmp / "table"
    make_table(table)
    fields = ["--field", "mask_path=mask", "--field", "tags=multi-hot"]
    coco = make_coco(tmp / "coco", COCO_IMAGES)
    coco_opts = ["--image-root", tmp / "coco", "--coco-mask", "semantic"]
    idx = tmp / "train-images-idx3-ubyte"
    idx.write_bytes(idx_bytes(np.random.default_rng(1).integers(0, 256, (50, 28, 28), np.uint8)))
    (tmp / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.arange(50) % 10))
    return [
        ("npy tiny, one shard", folder, ["--size", "8"], 0.05),
        ("npy large, several shards", folder, ["--size", "96", "--shard-size", "100K"], 0.05),
        ("npy grey, part 1/3", folder, ["--size", "32", "--channels", "1", "--part", "1/3",
                                        "--shard-size", "8K"], 0.05),
        ("hdf5 small, several shards", folder, ["--size", "16", "--storage", "hdf5",
                                                "--shard-size", "4K"], 0.05),
        ("hdf5 large, shuffled", folder, ["--size", "128x64", "--storage", "hdf5",
                                          "--shard-size", "200K", "--shuffle", "7"], 0.05),
        ("npy ragged from headers", mixed, ["--layout", "ragged", "--max-side", "64",
                                            "--shard-size", "20K"], 0.05),
        ("hdf5 ragged from headers", mixed, ["--layout", "ragged", "--max-side", "400",
                                             "--storage", "hdf5", "--shard-size", "64K"], 0.05),
        ("fields table npy", table / "list.csv", ["--size", "24", "--shard-size", "4K"] + fields,
         0.05),
        ("fields table hdf5 ragged", table / "list.csv",
         ["--layout", "ragged", "--max-side", "20", "--storage", "hdf5"] + fields, 0.05),
        ("coco boxes and mask, crop", coco, coco_opts + ["--size", "32", "--shard-size", "4K"],
         0.05),
        ("coco ragged hdf5", coco, coco_opts + ["--layout", "ragged", "--max-side", "24",
                                                "--storage", "hdf5"], 0.05),
        ("idx native size", idx, ["--shard-size", "8K"], 0.05),
        ("idx ragged", idx, ["--layout", "ragged", "--max-side", "20"], 0.05),
        ("jpeg fixed", folder, ["--size", "48", "--codec", "jpeg:80"], 0.25),
        ("jpeg ragged", mixed, ["--layout", "ragged", "--max-side", "48", "--codec", "jpeg"],
         0.25),
    ]


def case_dry_run_estimate(tmp):
    """The estimate within 5% of the real build's files (raw npy/HDF5, fixed and ragged, fields,
    a part), JPEG within 25% with its basis stated; the dry run writes nothing."""
    rows = []
    for k, (name, src, opts, tol) in enumerate(estimate_cases(tmp)):
        out = tmp / f"out{k}"
        est = estimate_of(dry_run(src, out, opts))
        build(src, out, *opts, "--quiet")
        real = cache_bytes(out)
        rows.append(f"{name}: estimate {est} real {real} ({(est - real) / real:+.2%})")
        check(abs(est - real) <= tol * real, f"{name}: estimate {est} vs real {real} bytes "
              f"(tolerance {tol:.0%})")
    jpeg = dry_run(tmp / "folder", tmp / "j", ["--size", "48", "--codec", "jpeg"])
    check(re.search(r"estimate from \d+ of 60 sources encoded at quality 90", jpeg),
          f"JPEG estimate does not state its basis: {jpeg!r}")
    print("\n".join(rows))


def case_dry_run_like_build(tmp):
    """A dry run lists as the build does: the same exit code and message for a bad source or a
    bad recipe, and nothing written either way."""
    make_simple_folder(tmp / "src", ["a"], 2, (8, 8))
    (tmp / "empty").mkdir()
    cases = [
        ("missing source", [tmp / "nope", tmp / "o1", "--size", "8"]),
        ("no class folders", [tmp / "empty", tmp / "o2", "--size", "8"]),
        ("no --size", [tmp / "src", tmp / "o3"]),
        ("ragged without --max-side", [tmp / "src", tmp / "o4", "--layout", "ragged"]),
    ]
    for what, args in cases:
        before = tree(tmp)
        real = run(["build", *args], expect_rc=None)
        check(real.returncode != 0, f"{what}: the build succeeded")
        dry = run(["build", *args, "--dry-run"], expect_rc=None)
        check_eq(dry.returncode, real.returncode, f"{what}: exit code of --dry-run")
        check_eq(dry.stderr, real.stderr, f"{what}: message of --dry-run")
        check_eq(tree(tmp), before, f"{what}: files after the refused builds")


def case_dry_run_fifo(tmp):
    """The ragged estimate reads image headers: a FIFO a list names is counted as a skip, never
    opened for reading (no hang), as the build skips it."""
    src = tmp / "src"
    make_simple_folder(src, ["a"], 3, (20, 30))
    os.mkfifo(src / "fifo.png")
    names = sorted(str(p.relative_to(src)) for p in src.rglob("*.png") if p.is_file())
    (src / "list.csv").write_text("path,label\n" + "".join(f"{n},0\n" for n in names) +
                                  "fifo.png,0\n")
    opts = ["--layout", "ragged", "--max-side", "16"]
    p = run(["build", src / "list.csv", tmp / "out", *opts, "--dry-run"], timeout=30)
    check(re.search(r"^skips: +1 ", p.stdout, re.M), f"the FIFO is not a skip: {p.stdout!r}")
    check(re.search(r"^samples: +3 ", p.stdout, re.M), f"samples: {p.stdout!r}")
    build(src / "list.csv", tmp / "out", *opts, "--quiet", timeout=30)
    real = cache_bytes(tmp / "out")
    check(abs(estimate_of(p.stdout) - real) <= 0.05 * real, f"estimate vs {real} bytes")


def case_space_check_tmpfs(tmp):
    """On a 64 KiB tmpfs: the dry run says it does not fit; the build refuses (exit 7, naming the
    filesystem, the estimate, the free space and --no-space-check) and leaves nothing; with
    --no-space-check it starts and fails at the full disk (exit 7) keeping its finished shards;
    grown to less than the whole estimate plus what was kept, --resume starts (it counts only
    what is left) and finishes equal to a build elsewhere."""
    with small_tmpfs(tmp / "mnt", "64k") as mnt:
        src, ref = tmp / "src", tmp / "ref"
        make_simple_folder(src, ["c0", "c1"], 24, (32, 32), seed=5)
        opts = ["--size", "32", "--shard-size", str(32 * 32 * 3 * 4), "--quiet"]
        out = mnt / "sub" / "out"  # its parent does not exist yet: the tmpfs is asked
        dry = dry_run(src, out, opts)
        est = on_disk_of(dry)  # in the tmpfs's pages
        check(re.search(r"^free: .*mounted at " + re.escape(str(mnt)), dry, re.M),
              f"dry run does not name the filesystem {mnt}: {dry!r}")
        check(re.search(r"^fits: +no", dry, re.M), f"dry run says it fits: {dry!r}")

        (mnt / "sub").mkdir()
        p = build(src, out, *opts, expect_rc=EXIT_NO_SPACE)
        for want in (f"mounted at {mnt}", "--no-space-check", "KiB is free", "needs about"):
            check(want in p.stderr, f"the refusal lacks {want!r}: {p.stderr!r}")
        check("--resume" not in p.stderr, f"a refusal has nothing to resume: {p.stderr!r}")
        check_eq(sorted(x.name for x in mnt.rglob("*")), ["sub"], "left on the tmpfs")

        p = build(src, out, *opts, "--no-space-check", expect_rc=EXIT_NO_SPACE)
        check("No space left on device" in p.stderr and "--resume" in p.stderr,
              f"the full disk is not reported as before: {p.stderr!r}")
        check(not out.exists(), "a cache was published on a full disk")
        kept = sum(x.stat().st_blocks * 512 for x in partial_dir(out).iterdir())
        check(kept > 16 * 1024, f"finished shards kept on the full disk: {kept} B")

        # Room for the estimate less what is kept, but not for the whole estimate.
        size = est + 8 * 1024
        check(size - kept < est, f"fixture: kept {kept} B is too small to tell")
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)
        build(src, out, *opts, "--resume")
        build(src, ref, *opts)
        check_eq(cache_bytes(out), cache_bytes(ref), "resumed cache bytes vs a build elsewhere")
        print(f"estimate on disk {est} B, kept {kept} B, resumed on a {size} B tmpfs")


CASES = {
    "dry_run_estimate": case_dry_run_estimate,
    "dry_run_like_build": case_dry_run_like_build,
    "dry_run_fifo": case_dry_run_fifo,
    "space_check_tmpfs": case_space_check_tmpfs,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
