#!/usr/bin/python3
"""Tests of `dscache merge --parts N` (issue 34): the PART_DIRs are parts 0..N-1 in order, and
before anything is claimed or written merge names every part that did not finish: missing (no
cache) or unfinished (an interrupted build, a partial directory beside it). All present, it
merges as without --parts.

Usage: test_merge_parts.py CASE   (env DSCACHE = the built binary)
"""

import re
import sys

from cli_helpers import (
    build, check, check_eq, load_manifest, main, make_mixed_folder, partial_dir, run,
)

N = 4
OPTS = ["--size", "16", "--shard-size", str(16 * 16 * 3 * 2), "--shuffle", "none"]


def make_parts(tmp, skip=()):
    """Source folder and parts 0..N-1 under tmp/p (part-I), but those in `skip`."""
    src = tmp / "src"
    make_mixed_folder(src, ["k1", "k2", "k3"], 6, (50, 60))
    (tmp / "p").mkdir()
    dirs = [tmp / "p" / f"part-{i}" for i in range(N)]
    for i, d in enumerate(dirs):
        if i not in skip:
            build(src, d, *OPTS, "--part", f"{i}/{N}", "--threads", "1", "--quiet")
    return src, dirs


def nothing_at(out):
    return not out.exists() and not partial_dir(out).exists() and \
        not any(x.name.startswith(".out") for x in out.parent.iterdir())


def case_merge_parts_missing(tmp):
    """Part 1 interrupted (killed after its first shard: a partial directory), part 3 never
    built: exit 1 naming both, each as what it is, and nothing written at OUTPUT. Without
    --parts merge names only the first gap (the listing it was given is all it knows)."""
    src, dirs = make_parts(tmp, skip=(1, 3))
    build(src, dirs[1], *OPTS, "--part", f"1/{N}", "--threads", "1", "--quiet", expect_rc=-9,
          env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:1"})
    check(partial_dir(dirs[1]).is_dir() and not dirs[1].exists(), "part 1 left no partial build")
    out = tmp / "out"
    p = run(["merge", "--parts", str(N)] + dirs + [out, "--resume"], expect_rc=1)
    err = p.stderr
    check("parts 1,3 of 4 did not finish" in err, f"no list of the parts: {err!r}")
    check(re.search(r"part 1 unfinished \(an interrupted build in \S*\.part-1\.partial", err),
          f"part 1 not named unfinished: {err!r}")
    check(re.search(r"part 3 missing \(no \S*part-3/manifest\.json\)", err),
          f"part 3 not named missing: {err!r}")
    check("part 0" not in err and "part 2 " not in err, f"a finished part named: {err!r}")
    check(err.count("\n") == 1, f"one line: {err!r}")
    check(nothing_at(out), "a refused merge left something at OUTPUT")
    # Finishing the parts (the interrupted one resumed) makes the same command merge.
    for i in (1, 3):
        build(src, dirs[i], *OPTS, "--part", f"{i}/{N}", "--threads", "1", "--quiet",
              "--resume")
    p = run(["merge", "--parts", str(N)] + dirs + [out, "--resume"])
    check_eq(load_manifest(out)["count"], sum(load_manifest(d)["count"] for d in dirs),
             "merged count")
    check("merged 4 parts" in p.stdout, f"summary: {p.stdout!r}")
    run(["verify", out])


def case_merge_parts_refusals(tmp):
    """--parts N with another number of PART_DIRs, a bad N, or a part out of its place: exit 2
    naming --parts, nothing written."""
    _, dirs = make_parts(tmp)
    out = tmp / "out"
    for args, pattern, what in [
        (["--parts", "4"] + dirs[:3], r"--parts 4: 3 PART_DIRs given", "too few"),
        (["--parts", "0"] + dirs, r"--parts", "zero"),
        (["--parts", "x"] + dirs, r"--parts", "not a number"),
        (["--parts", "4", dirs[1], dirs[0], dirs[2], dirs[3]],
         r"part-1: is part 1/4; --parts 4 takes part 0/4 here", "out of order"),
        (["--parts", "3"] + dirs[:3], r"part-0: is part 0/4; --parts 3 takes part 0/3",
         "other count"),
    ]:
        p = run(["merge"] + args + [out], expect_rc=2)
        check(re.search(pattern, p.stderr), f"{what}: {p.stderr!r} lacks {pattern!r}")
        check(nothing_at(out), f"{what}: something left at OUTPUT")
    # Without --parts the order stays free.
    run(["merge", dirs[2], dirs[0], dirs[3], dirs[1], out, "--quiet"])
    run(["verify", out])


CASES = {
    "merge_parts_missing": case_merge_parts_missing,
    "merge_parts_refusals": case_merge_parts_refusals,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
