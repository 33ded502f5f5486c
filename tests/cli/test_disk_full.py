#!/usr/bin/python3
"""Fault-injection tests of `dscache build` and `dscache merge` on a full disk, with real
processes: a file size limit (RLIMIT_FSIZE) and a full filesystem (a small tmpfs) give a clean
error naming the file, and then `--resume` completes the cache. The other faults (the lock,
readers during --force, SIGKILL at seeded points, changing sources) are in test_faults.py.

Usage: test_disk_full.py CASE   (env DSCACHE = the built binary)
"""

import contextlib
import resource
import subprocess
import sys
from pathlib import Path

from cli_helpers import (
    DSCACHE, Skip, TIMEOUT_S, build, check, check_eq, compare_caches, load_manifest, main,
    make_simple_folder, partial_dir, rand_rgb, run, write_img,
)
from test_faults import env_with, EXIT_NO_SPACE, OPTS, stray_temps


def _fsize_limited(limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def _no_space_then_resume(src, out, ref, opts, message, make_fail):
    p = make_fail()
    check_eq(p.returncode, EXIT_NO_SPACE,
             f"exit status when out of space ({p.returncode}: {p.stderr.strip()!r})")
    check(message in p.stderr and "--resume" in p.stderr,
          f"the error does not say what happened and what to do: {p.stderr!r}")
    check(not Path(out).exists(), "a cache was published although the build failed")
    check_eq(stray_temps(Path(out).parent), [], "temp files left after the failure")
    check(partial_dir(out).is_dir(), "the partial dir (finished shards) is gone")
    run(["build", src, out] + opts + ["--resume"])
    compare_caches(out, ref, "resumed after the space came back")


def case_disk_full_fsize(tmp):
    # Long file names make sources.jsonl larger than any shard: a limit between the two fails in
    # the finishing steps, after every shard; a smaller one fails at the first shard (npy, and
    # HDF5, whose library reports no errno and used to crash at exit after such a failure).
    src = tmp / "src"
    for k in range(24):
        write_img(src / f"c{k % 3}" / (f"img{k:02d}_" + "x" * 120 + ".png"),
                  rand_rgb(k, 12, 12))
    ref = tmp / "ref"
    build(src, ref, *OPTS)
    shard = max(e["bytes"] for e in load_manifest(ref)["shards"])
    sources = load_manifest(ref)["files"]["sources"]["bytes"]
    check(sources > shard + 512, f"fixture: sources.jsonl {sources} B vs shard {shard} B")
    ref_h5 = tmp / "ref_h5"
    build(src, ref_h5, *OPTS, "--storage", "hdf5")
    for limit, opts, ref in ((shard + 256, OPTS, ref), (shard // 2, OPTS, ref),
                             (shard // 2, OPTS + ["--storage", "hdf5"], ref_h5)):
        out = tmp / f"out{limit}{len(opts)}"

        def fail(out=out, opts=opts):
            cmd = [DSCACHE, "build", src, out] + opts
            p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                               env=env_with(None), preexec_fn=_fsize_limited(limit),
                               timeout=TIMEOUT_S)
            return p
        _no_space_then_resume(src, out, ref, opts, "File too large", fail)


@contextlib.contextmanager
def small_tmpfs(mnt, size):
    """A tmpfs of `size` mounted at `mnt` (made here) for the block, unmounted after; Skip where
    it cannot be mounted (the full-filesystem variants need root and CAP_SYS_ADMIN)."""
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise Skip(f"cannot mount a tmpfs here ({p.stderr.strip() or p.returncode}): the "
                   "full-filesystem variant needs root and CAP_SYS_ADMIN")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def case_disk_full_tmpfs(tmp):
    with small_tmpfs(tmp / "mnt", "64k") as mnt:
        src, ref = tmp / "src", tmp / "ref"
        make_simple_folder(src, ["c0", "c1"], 24, (24, 24), seed=5)
        opts = ["--size", "24", "--shard-size", str(24 * 24 * 3 * 4), "--threads", "2",
                "--quiet", "--shuffle", "none"]
        build(src, ref, *opts)
        total = sum(e["bytes"] for e in load_manifest(ref)["shards"])
        check(total > 64 * 1024, f"fixture: {total} B fits in the 64k tmpfs")
        out = mnt / "out"

        def fail():  # past the space check (test_build_space.py): the disk fills as it runs
            return run(["build", src, out] + opts + ["--no-space-check"], expect_rc=None)

        def resume_after_growth():
            subprocess.run(["mount", "-o", "remount,size=1m", str(mnt)], check=True)
        p = fail()
        check_eq(p.returncode, EXIT_NO_SPACE,
                 f"exit status on a full filesystem ({p.returncode}: {p.stderr.strip()!r})")
        check("No space left on device" in p.stderr and "--resume" in p.stderr,
              f"the error does not say what happened and what to do: {p.stderr!r}")
        check(not out.exists(), "a cache was published although the build failed")
        check_eq(stray_temps(mnt), [], "temp files left on the full filesystem")
        kept = sorted(x.name for x in partial_dir(out).glob("images-*"))
        check(kept, "no finished shard was kept in the partial dir")
        resume_after_growth()
        run(["build", src, out] + opts + ["--resume"])
        compare_caches(out, ref, "resumed after the tmpfs grew")
        print(f"tmpfs: failed with {len(kept)} finished shards kept, resumed byte-identical")


def case_merge_disk_full_tmpfs(tmp):
    """A merge whose parts are on another filesystem than OUTPUT copies the shards; on a full
    OUTPUT filesystem that is exit 7 naming the file and "No space left on device" (before: exit
    1, "filesystem error: cannot copy file: Input/output error" from std::filesystem's short
    copy), no temp file left, the copied shards kept; --resume after the disk grew finishes it
    equal to a merge on one filesystem."""
    with small_tmpfs(tmp / "mnt", "128k") as mnt:
        src = tmp / "src"
        make_simple_folder(src, ["c0", "c1"], 24, (32, 32), seed=5)
        # One 72 KiB shard per part: the first fits in the 128k tmpfs, the second's copy runs
        # out of room part way (the short copy std::filesystem::copy_file called EIO).
        opts = ["--size", "32", "--shard-size", str(32 * 32 * 3 * 24), "--threads", "2",
                "--quiet", "--shuffle", "none"]
        parts = [tmp / f"part{i}" for i in range(2)]
        for i, d in enumerate(parts):
            build(src, d, *opts, "--part", f"{i}/2")
        ref = tmp / "ref"
        run(["merge", "--quiet"] + parts + [ref])
        total = sum(e["bytes"] for e in load_manifest(ref)["shards"])
        check(total > 128 * 1024, f"fixture: {total} B fits in the 128k tmpfs")
        out = mnt / "out"
        p = run(["merge"] + parts + [out], expect_rc=None)
        check_eq(p.returncode, EXIT_NO_SPACE,
                 f"merge exit status on a full filesystem ({p.returncode}: {p.stderr.strip()!r})")
        check("No space left on device" in p.stderr and "--resume" in p.stderr and
              str(mnt) in p.stderr, f"the error does not name the file, the reason and what to "
              f"do: {p.stderr!r}")
        check(not out.exists(), "a cache was published although the merge failed")
        check_eq(stray_temps(mnt), [], "temp files left on the full filesystem")
        kept = sorted(x.name for x in partial_dir(out).glob("images-*"))
        check(kept, "no copied shard was kept in the partial dir")
        subprocess.run(["mount", "-o", "remount,size=1m", str(mnt)], check=True)
        p = run(["merge", "--resume"] + parts + [out])
        check("copied" in p.stdout, f"resumed merge summary {p.stdout!r}")
        compare_caches(out, ref, "merge resumed after the tmpfs grew")
        run(["verify", out])
        print(f"tmpfs: merge failed with {len(kept)} copied shards kept, resumed identical")


CASES = {
    "disk_full_fsize": case_disk_full_fsize,
    "disk_full_tmpfs": case_disk_full_tmpfs,
    "merge_disk_full_tmpfs": case_merge_disk_full_tmpfs,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
