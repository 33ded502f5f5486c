#!/usr/bin/python3
"""`dscache bench CACHE --mix-with A --mix-with B --rows mixture` (issue 39): a Loader over the
mixture of A and B timed beside the single Loader over CACHE, where CACHE is `dscache merge` of
the parts A and B (the same bytes). No timing is asserted: the rows, the ratio lines, and what
each Loader served (whole epochs of the epoch's samples, and per source the counts a reference
in this file computes from the parts' manifests and the weights). Refusals: a --mix-with cache
that cannot be mixed (other channels) and --mix with the wrong number of values exit 2 naming
them.

Usage: test_bench_mixture.py CASE   (env DSCACHE = the built binary)
"""

import json
import re
import sys
from fractions import Fraction

from cli_helpers import build, check, check_eq, load_manifest, main, make_simple_folder, run

BENCH = ["--seconds", "0.15", "--batch", "16", "--threads", "2"]
SINGLE = "single Loader (mix baseline)"


def make_parts(tmp, per_class=31):
    """A folder of 3 x per_class PNGs built as --part 0/2 and 1/2, merged into tmp/cache.
    Returns (cache, [part0, part1], [samples in each part])."""
    src = tmp / "src"
    make_simple_folder(src, ["a", "b", "c"], per_class, (16, 16), seed=7)
    parts = [tmp / "part0", tmp / "part1"]
    for i, d in enumerate(parts):
        build(src, d, "--size", "16", "--part", f"{i}/2", "--quiet")
    cache = tmp / "cache"
    run(["merge", *parts, cache, "--quiet"])
    sizes = [load_manifest(d)["count"] for d in parts]
    check_eq(sum(sizes), 3 * per_class, "the parts' samples")
    check_eq(load_manifest(cache)["count"], 3 * per_class, "the merged cache's samples")
    return cache, parts, sizes


def largest_remainder(total, weights):
    """Hamilton's method, written here as the reference: floor of each exact quota, then one
    more for the largest remainders (ties to the lower index)."""
    ws = [Fraction(w).limit_denominator(1 << 20) for w in weights]
    quotas = [total * w / sum(ws) for w in ws]
    parts = [q.numerator // q.denominator for q in quotas]
    order = sorted(range(len(ws)), key=lambda k: (-(quotas[k] - parts[k]), k))
    for k in order[:total - sum(parts)]:
        parts[k] += 1
    return parts


def check_mixture(j, epoch, counts, batchings, what):
    """The JSON's mixture object: the rows at 1 and 2 threads, whole epochs served, per source
    `counts` an epoch, and each ratio = mixture / single samples/s of its thread count."""
    mx = j.get("mixture")
    check(isinstance(mx, dict), f"{what}: mixture = {mx!r}")
    check_eq(mx["epoch_samples"], epoch, f"{what}: epoch_samples")
    check_eq(mx["single_samples"], epoch, f"{what}: single_samples (the merge: the same samples)")
    check_eq([s["count"] for s in mx["sources"]], counts, f"{what}: counts per source")
    want_rows = [(SINGLE, None, t) if b is None else (f"mixture Loader, {b}", b, t)
                 for t in (1, 2) for b in [None] + batchings]
    check_eq([(r["name"], r["batching"], r["threads"]) for r in mx["rows"]], want_rows,
             f"{what}: rows")
    rounds = mx["rounds"]
    check(rounds >= 1, f"{what}: rounds = {rounds}")
    sps = {}
    for r in mx["rows"]:
        rw = f"{what}: {r['name']} at {r['threads']} threads"
        check(r["epochs"] >= rounds, f"{rw}: {r['epochs']} epochs, want >= {rounds} (a round "
              "is whole epochs)")
        check_eq(r["samples"], r["epochs"] * epoch, f"{rw}: samples served (whole epochs)")
        if r["batching"] is None:
            check_eq(r["per_source"], None, f"{rw}: per_source")
        else:
            check_eq(r["per_source"], [r["epochs"] * c for c in counts], f"{rw}: per source")
        check(r["samples_per_s"] > 0 and r["cpu_us_per_sample"] > 0,
              f"{rw}: samples_per_s {r['samples_per_s']}, cpu_us_per_sample "
              f"{r['cpu_us_per_sample']}")
        sps[(r["batching"], r["threads"])] = (r["samples_per_s"], r["cpu_us_per_sample"])
    check_eq([(x["batching"], x["threads"]) for x in mx["ratios"]],
             [(b, t) for b in batchings for t in (1, 2)], f"{what}: ratios")
    for x in mx["ratios"]:
        m_sps, m_cpu = sps[(x["batching"], x["threads"])]
        s_sps, s_cpu = sps[(None, x["threads"])]
        for key, want in (("ratio", m_sps / s_sps), ("cpu_ratio", s_cpu / m_cpu)):
            check(abs(x[key] - want) <= 1e-9 * want, f"{what}: {key} of {x} != {want}")
    table = [r["name"] for r in j["rows"]]
    check_eq(table, [r[0] for r in want_rows], f"{what}: the table's rows (--rows mixture only)")
    return mx


def case_bench_mixture_rows(tmp):
    cache, parts, sizes = make_parts(tmp)
    n = sum(sizes)
    mix = ["--mix-with", parts[0], "--mix-with", parts[1], "--rows", "mixture"]
    # Default shares: each source once an epoch, so the epoch is CACHE's, each part its size.
    j = json.loads(run(["bench", cache, *mix, *BENCH, "--json"]).stdout)
    mx = check_mixture(j, n, sizes, ["random", "stratified"], "default shares")
    check_eq([s["name"] for s in mx["sources"]], [str(p) for p in parts], "source names")
    check_eq([s["samples"] for s in mx["sources"]], sizes, "source sizes")
    # Weights: the epoch (CACHE's size) split by largest remainder; one batching.
    weights = [0.25, 0.75]
    j = json.loads(run(["bench", cache, *mix, "--mix", "0.25,0.75", "--mix-batching",
                        "stratified", *BENCH, "--json"]).stdout)
    check_mixture(j, n, largest_remainder(n, weights), ["stratified"], "--mix 0.25,0.75")
    # Text: the table's lines, a ratio line per batching, the counts served.
    out = run(["bench", cache, *mix, *BENCH]).stdout
    for name in (SINGLE, "mixture Loader, random", "mixture Loader, stratified"):
        lines = [l for l in out.splitlines() if l.startswith(name)]
        check_eq(len(lines), 2, f"text: table lines for {name!r} (1 and 2 threads)\n{out}")
    for b in ("random", "stratified"):
        check(re.search(rf"^mixture / single, {b}: [0-9.]+x \(1 thread\) [0-9.]+x \(2 threads\); "
                        r"by CPU time per sample: [0-9.]+x [0-9.]+x$", out, re.M),
              f"text: no ratio line for {b}:\n{out}")
    check(re.search(rf"^mixture: 2 sources \(.*part0 {sizes[0]} samples, .*part1 {sizes[1]} "
                    rf"samples; .*\): epoch {n} samples, CACHE {n}$", out, re.M),
          f"text: no mixture line:\n{out}")
    served = re.findall(r"^  served: mixture Loader, random +2 threads: (\d+) samples in (\d+) "
                        r"epochs, [0-9.]+ CPU us each \((\d+) \+ (\d+) by source\)$", out, re.M)
    check_eq(len(served), 1, f"text: served line of the random mixture at 2 threads:\n{out}")
    total, epochs, a, b = map(int, served[0])
    check_eq((total, a, b), (epochs * n, epochs * sizes[0], epochs * sizes[1]), "text: served")
    # Without --mix-with there is no mixture group: its JSON is null.
    j = json.loads(run(["bench", cache, *BENCH, "--rows", "global", "--json"]).stdout)
    check_eq(j["mixture"], None, "--rows global, no --mix-with: mixture")


def case_bench_mixture_refusals(tmp):
    cache, parts, _ = make_parts(tmp, per_class=4)
    grey = tmp / "grey"
    build(tmp / "src", grey, "--size", "16", "--channels", "1", "--quiet")
    mix = ["--mix-with", parts[0], "--mix-with", parts[1]]
    for args, wants in [
        # Mixture::make's error, named: the cache that differs and how.
        (["--mix-with", parts[0], "--mix-with", grey, "--rows", "mixture"],
         [str(grey), "channels"]),
        # Weights the library refuses (all zero): its message, after the options named.
        ([*mix, "--mix", "0,0", "--rows", "mixture"], ["--mix-with, --mix: ", "InvalidArgument"]),
        ([*mix, "--mix", "0.5", "--rows", "mixture"], ["--mix '0.5'", "1 weights for 2"]),
        ([*mix, "--mix", "0.2,0.3,0.5", "--rows", "mixture"], ["--mix", "3 weights for 2"]),
        ([*mix, "--mix", "0.5,x", "--rows", "mixture"], ["--mix 'x'", "number"]),
        ([*mix, "--mix-batching", "sorted", "--rows", "mixture"],
         ["--mix-batching", "'sorted'", "random, stratified"]),
        (["--rows", "mixture"], ["--rows mixture", "--mix-with"]),
        ([*mix, "--rows", "global"], ["--mix-with", "add mixture to --rows"]),
        (["--mix", "1,1"], ["--mix needs --mix-with"]),
    ]:
        what = "bench " + " ".join(map(str, args))
        p = run(["bench", cache, *args, *BENCH], expect_rc=2)
        for w in wants:
            check(w in p.stderr, f"{what}: stderr lacks {w!r}: {p.stderr!r}")
        check_eq(p.stdout, "", f"{what}: stdout (nothing measured)")


CASES = {
    "bench_mixture_rows": case_bench_mixture_rows,
    "bench_mixture_refusals": case_bench_mixture_refusals,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
