#!/usr/bin/python3
"""`dscache bench --direct-read` spelling (issue 34): a value is written --direct-read=VALUE; a
bare --direct-read is `on` and the word after it is never its value, so a cache named `auto`,
`on` or `off` is read as the cache, whatever side of the flag it is on. A value written with a
space (`--direct-read off`, no such cache) or a bad value is refused (exit 2) naming the option,
its spelling and the allowed values.

Usage: test_bench_direct_flag.py CASE   (env DSCACHE = the built binary)
"""

import json
import shutil
import sys

from cli_helpers import build, check, check_eq, main, make_simple_folder, run

BENCH = ["--seconds", "0.1", "--decode-samples", "30", "--rows", "out-of-core", "--json"]


def make_caches(tmp, names):
    """One small cache, copied to tmp/NAME for each name; returns tmp (the cwd to run in)."""
    src = tmp / "src"
    make_simple_folder(src, ["a", "b"], 30, (16, 16), seed=3)
    build(src, tmp / names[0], "--size", "16", "--quiet")
    for n in names[1:]:
        shutil.copytree(tmp / names[0], tmp / n)
    return tmp


def bench_json(args, cwd):
    p = run(["bench"] + args + BENCH, cwd=cwd)
    return json.loads(p.stdout)


def case_bench_direct_cache_named_like_value(tmp):
    """Caches named auto, on and off, given right after a bare --direct-read or before it, with
    and without a --direct-read=VALUE: the cache is the one named, the request the one
    written (bare: on)."""
    cwd = make_caches(tmp, ["auto", "on", "off"])
    for args, cache, requested in [
        (["--direct-read", "auto"], "auto", "on"),
        (["--direct-read", "off"], "off", "on"),
        (["--direct-read", "on"], "on", "on"),
        (["auto", "--direct-read"], "auto", "on"),
        (["--direct-read=off", "auto"], "auto", "off"),
        (["on", "--direct-read=off"], "on", "off"),
        (["off", "--direct-read=auto"], "off", "auto"),
        (["--direct-read=on", "off"], "off", "on"),
    ]:
        j = bench_json(args, cwd)
        what = f"bench {' '.join(args)}"
        check(str(j["cache"]).rstrip("/").endswith("/" + cache) or j["cache"] == cache,
              f"{what}: benched {j['cache']!r}, want the cache {cache!r}")
        check_eq(j["windowed_out_of_core"]["direct_read_requested"], requested,
                 f"{what}: direct_read_requested")


def case_bench_direct_value_spelling(tmp):
    """No cache named like the value: `--direct-read off` (space) is refused naming the
    spelling --direct-read=off, before and after CACHE; bad values name the allowed ones; the
    =VALUE forms work."""
    cwd = make_caches(tmp, ["cache"])
    for args, pattern in [
        (["cache", "--direct-read", "off"], "--direct-read=off"),
        (["--direct-read", "auto", "cache"], "--direct-read=auto"),
        (["cache", "--direct-read", "yes"], "--direct-read=VALUE"),
        (["cache", "--direct-read=yes"], "'yes' is not one of"),
    ]:
        p = run(["bench"] + args + BENCH, expect_rc=2, cwd=cwd)
        what = f"bench {' '.join(args)}"
        check(pattern in p.stderr, f"{what}: {p.stderr!r} lacks {pattern!r}")
        check("--direct-read" in p.stderr and "off, on, auto" in p.stderr,
              f"{what}: option or allowed values not named: {p.stderr!r}")
        check_eq(p.stdout, "", f"{what}: stdout")
    for value in ["auto", "on", "off"]:
        j = bench_json(["cache", f"--direct-read={value}"], cwd)
        check_eq(j["windowed_out_of_core"]["direct_read_requested"], value, f"={value}")


CASES = {
    "bench_direct_cache_named_like_value": case_bench_direct_cache_named_like_value,
    "bench_direct_value_spelling": case_bench_direct_value_spelling,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
