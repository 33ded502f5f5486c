#!/usr/bin/python3
"""Tests of `dscache bench`: --json and text output, usage errors, a corrupt cache, a
moved source and --source NEWDIR.

Usage: test_bench.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

from cli_helpers import DSCACHE, Failure, build, check, check_cache, check_eq, main, make_simple_folder, run, run_json


BENCH_ROWS = ["memcpy ceiling", "loader, global shuffle", "loader, windowed shuffle",
              "per-sample decode (seed)", "lazy cache, first pass", "lazy cache, second pass",
              "disk sequential (cold)", "disk random sample reads (cold)",
              "windowed, pread, out of core"]
BENCH_ARGS = ["--seconds", "0.2", "--decode-samples", "100"]


def make_bench_cache(tmp, n=300):
    src, out = tmp / "src", tmp / "cache"
    classes = ["a", "b", "c"]
    make_simple_folder(src, classes, n // len(classes), (32, 32), seed=21)
    build(src, out, "--size", "32", "--quiet")
    check_cache(out)
    return src, out


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def check_bench_json(j, n, what):
    check_eq(j.get("samples"), n, f"{what}: samples")
    check_eq(j.get("sample_bytes"), 32 * 32 * 3, f"{what}: sample_bytes")
    for key in ("memcpy_gbps", "loader_gbps", "loader_samples_per_s", "decode_samples_per_s",
                "lazy_first_samples_per_s", "lazy_second_samples_per_s"):
        check(is_num(j.get(key)) and j[key] > 0, f"{what}: {key} = {j.get(key)!r}, want > 0")
    rows = j.get("rows")
    check(isinstance(rows, list) and rows, f"{what}: rows = {rows!r}")
    names = [r.get("name") for r in rows]
    for want in BENCH_ROWS:
        check(want in names, f"{what}: no row named {want!r} in {names}")
    for r in rows:
        for key in ("threads", "samples_per_s", "gbps"):
            check(is_num(r.get(key)) and r[key] > 0, f"{what}: row {r.get('name')!r} {key} = "
                  f"{r.get(key)!r}, want > 0")
    # Out of core: the disk's rates and the windowed pread serving rate, in bytes/s.
    for key in ("disk_sequential_bytes_per_s", "disk_random_bytes_per_s",
                "disk_random_samples_per_s", "windowed_out_of_core_bytes_per_s",
                "windowed_out_of_core_samples_per_s"):
        check(is_num(j.get(key)) and j[key] > 0, f"{what}: {key} = {j.get(key)!r}, want > 0")
    check(j.get("disk_sequential_method") in ("O_DIRECT", "buffered, cold"),
          f"{what}: disk_sequential_method = {j.get('disk_sequential_method')!r}")
    ooc = j.get("windowed_out_of_core")
    check(isinstance(ooc, dict), f"{what}: windowed_out_of_core = {ooc!r}")
    check_eq(ooc.get("memory_mode"), "pread", f"{what}: windowed_out_of_core.memory_mode")
    for key in ("workers", "block_samples", "window_blocks", "window_bytes", "vs_disk_sequential"):
        check(is_num(ooc.get(key)) and ooc[key] > 0, f"{what}: windowed_out_of_core.{key} = "
              f"{ooc.get(key)!r}, want > 0")
    # Byte-sized window: whole blocks of whole samples, the block within the cache.
    check(ooc["block_samples"] <= n, f"{what}: block_samples {ooc['block_samples']} > {n}")
    check_eq(ooc["window_bytes"], ooc["block_samples"] * ooc["window_blocks"] * 32 * 32 * 3,
             f"{what}: window_bytes")
    check(abs(ooc["vs_disk_sequential"] - j["windowed_out_of_core_bytes_per_s"]
              / j["disk_sequential_bytes_per_s"]) < 1e-6 * ooc["vs_disk_sequential"],
          f"{what}: vs_disk_sequential disagrees with the two rates")
    rss = j.get("rss")
    check(isinstance(rss, dict), f"{what}: rss = {rss!r}")
    for key in ("anon_start_mib", "anon_before_mib", "anon_after_mib", "file_after_mib",
                "buffers_mib"):
        check(is_num(rss.get(key)) and rss[key] >= 0, f"{what}: rss.{key} = {rss.get(key)!r}")
    check(rss["anon_after_mib"] > 0, f"{what}: rss.anon_after_mib = {rss['anon_after_mib']}")
    check(rss["buffers_mib"] > 0, f"{what}: rss.buffers_mib = {rss['buffers_mib']}")


def case_bench_json(tmp):
    _, out = make_bench_cache(tmp)
    lazy = tmp / "lazy.bin"
    j = run_json(["bench", out, "--json", *BENCH_ARGS, "--lazy-file", lazy])
    check_bench_json(j, 300, "bench --json")
    check(not lazy.exists() or lazy.stat().st_size > 0, "bench --lazy-file left an empty file")
    # Human output: a header and one table line per row.
    p = run(["bench", out, *BENCH_ARGS])
    lines = p.stdout.splitlines()
    check(any("samples/s" in l and "GB/s" in l for l in lines),
          f"bench: no table header with samples/s and GB/s:\n{p.stdout}")
    for want in BENCH_ROWS:
        row = [l for l in lines if l.startswith(want)]
        check(row, f"bench: no table line for {want!r}:\n{p.stdout}")
        nums = re.findall(r"[0-9]+(?:\.[0-9]+)?", row[0][len(want):])
        check(len(nums) >= 3, f"bench: table line for {want!r} lacks numbers: {row[0]!r}")
    check(re.search(r"RSS", p.stdout), f"bench: no RSS line:\n{p.stdout}")
    check(re.search(r"disk \(cold, page cache dropped\): sequential [0-9.]+ GB/s", p.stdout),
          f"bench: no disk line:\n{p.stdout}")
    check(re.search(r"windowed out of core: pread, .* [0-9.]+ GB/s = [0-9.]+x the disk", p.stdout),
          f"bench: no out-of-core line:\n{p.stdout}")
    check("300" in lines[0], f"bench: first line does not give the sample count: {lines[0]!r}")
    # Bad values are usage errors.
    for bad in (["--seconds", "0"], ["--decode-samples", "0"], ["--bogus"]):
        p = run(["bench", out, *bad], expect_rc=2)
        check(p.stderr.strip(), f"bench {bad}: no message on stderr")
    run(["bench"], expect_rc=2)


def case_bench_corrupt(tmp):
    _, out = make_bench_cache(tmp, n=120)
    bad = tmp / "trunc"
    shutil.copytree(out, bad)
    f = bad / "images-00000.npy"
    f.write_bytes(f.read_bytes()[:-1000])
    p = run(["bench", bad, "--json", *BENCH_ARGS], expect_rc=5)
    check("images-00000.npy" in p.stderr,
          f"bench on a truncated shard: stderr does not name images-00000.npy: {p.stderr!r}")
    check(not p.stdout.strip().startswith("{"), f"bench on a corrupt cache printed JSON: "
          f"{p.stdout!r}")
    p = run(["bench", bad, *BENCH_ARGS], expect_rc=5)
    check("images-00000.npy" in p.stderr, f"bench (text): stderr does not name the shard: "
          f"{p.stderr!r}")
    missing = tmp / "no_such_cache"
    p = run(["bench", missing, "--json", *BENCH_ARGS], expect_rc=1)
    check("no_such_cache" in p.stderr, f"bench of a missing dir: stderr does not name it: "
          f"{p.stderr!r}")
    run(["bench", out, "--json", *BENCH_ARGS])  # the original is fine


def case_bench_moved_source(tmp):
    src, out = make_bench_cache(tmp, n=150)
    moved = tmp / "moved_src"
    src.rename(moved)
    p = run(["bench", out, "--json", *BENCH_ARGS], expect_rc=None)
    check(p.returncode != 0, f"bench with a moved source: exit 0\n{p.stdout}")
    check(p.returncode not in (-6, -11, 134, 139), f"bench crashed: exit {p.returncode}")
    check("--source" in p.stderr and str(src) in p.stderr,
          f"bench with a moved source: stderr should name the missing root and --source: "
          f"{p.stderr!r}")
    j = run_json(["bench", out, "--json", *BENCH_ARGS, "--source", moved])
    check_bench_json(j, 150, "bench --source NEWDIR")
    check("note" not in j, f"bench --source NEWDIR: unexpected note {j.get('note')!r}")


def case_bench_memory_mode(tmp):
    """--memory: the Loader rows read through mmap or pread, and the output says which."""
    _, out = make_bench_cache(tmp)
    results = {}
    for requested, want in (("auto", "page-cache"), ("page-cache", "page-cache"),
                            ("pread", "pread")):
        j = run_json(["bench", out, "--json", *BENCH_ARGS, "--memory", requested])
        check_bench_json(j, 300, f"--memory {requested}")
        check_eq(j.get("memory_requested"), requested, f"--memory {requested}: memory_requested")
        # A 0.9 MB cache fits in any machine's memory: auto keeps it mapped.
        check_eq(j.get("memory_mode"), want, f"--memory {requested}: memory_mode")
        check(is_num(j.get("available_memory_bytes")) and j["available_memory_bytes"] > 1 << 20,
              f"available_memory_bytes = {j.get('available_memory_bytes')!r}")
        results[requested] = j
    p = run(["bench", out, *BENCH_ARGS, "--memory", "pread"])
    check(re.search(r"loader reads: pread \(--memory pread", p.stdout),
          f"text output does not say pread: {p.stdout}")
    p = run(["bench", out, "--memory", "mmap"], expect_rc=2)
    check("--memory" in p.stderr, f"bad --memory not named: {p.stderr}")
    # --rows: only the groups asked for; the others report null and print no line.
    j = run_json(["bench", out, "--json", *BENCH_ARGS, "--rows", "disk,out-of-core"])
    names = [r["name"] for r in j["rows"]]
    check_eq(sorted(names), sorted(["disk sequential (cold)", "disk random sample reads (cold)",
                                    "windowed, pread, out of core"]), "--rows disk,out-of-core")
    check(j["loader_samples_per_s"] == 0 and j["decode_samples_per_s"] is None,
          f"--rows disk,out-of-core ran other rows: {j}")
    check(j["windowed_out_of_core_bytes_per_s"] > 0, "--rows out-of-core: no rate")
    j = run_json(["bench", out, "--json", *BENCH_ARGS, "--rows", "global", "--memory", "pread"])
    check_eq([r["name"] for r in j["rows"]], ["loader, global shuffle"] * 2, "--rows global")
    check(j["disk_sequential_bytes_per_s"] is None, "--rows global measured the disk")
    p = run(["bench", out, "--rows", "memcpy,bogus"], expect_rc=2)
    check("--rows 'bogus'" in p.stderr, f"bad --rows not named: {p.stderr}")


def o_direct_works(folder):
    """Whether files in `folder` open with O_DIRECT (tmpfs may refuse: the Loader then falls
    back to the page cache)."""
    probe = os.path.join(folder, "o_direct_probe")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def case_bench_direct_read(tmp):
    """--direct-read=auto (default), on (also bare, as before it took a value) and off: the
    out-of-core row reads as asked and says why (the spelling: test_bench_direct_flag.py)."""
    _, out = make_bench_cache(tmp)
    direct_ok = o_direct_works(out)
    ooc = BENCH_ARGS + ["--rows", "out-of-core", "--json"]
    for args, env, requested, direct, reason in (
            ([out], None, "auto", False, "auto: cache "),  # 0.9 MB: fits in any memory
            ([out, "--direct-read=auto"], {"DSCACHE_DIRECT_READ_BUDGET_BYTES": "1"}, "auto",
             direct_ok, "auto: cache "),
            (["--direct-read", out], None, "on", direct_ok, "on: direct_read on"),
            ([out, "--direct-read"], None, "on", direct_ok, "on: direct_read on"),
            ([out, "--direct-read=on"], None, "on", direct_ok, "on: direct_read on"),
            ([out, "--direct-read=off"], {"DSCACHE_DIRECT_READ_BUDGET_BYTES": "1"}, "off",
             False, "off: direct_read off")):
        what = f"bench {' '.join(map(str, args))} (env {env})"
        p = run(["bench", *args, *ooc], env_extra=env)
        j = json.loads(p.stdout)["windowed_out_of_core"]
        check_eq(j.get("direct_read_requested"), requested, f"{what}: direct_read_requested")
        check_eq(j.get("direct_read"), direct, f"{what}: direct_read")
        check(str(j.get("direct_read_reason", "")).startswith(reason),
              f"{what}: direct_read_reason {j.get('direct_read_reason')!r}, want {reason!r}...")
    j = json.loads(run(["bench", out, *ooc]).stdout)["windowed_out_of_core"]
    check("fits in" in j["direct_read_reason"], f"auto on a small cache: {j}")
    p = run(["bench", out, "--direct-read", *BENCH_ARGS, "--rows", "out-of-core"])
    want = "O_DIRECT (on: direct_read on)" if direct_ok else "page cache (on: direct_read on"
    check(f"read path: {want}" in p.stdout, f"text output does not say {want!r}:\n{p.stdout}")
    p = run(["bench", out, "--direct-read=yes"], expect_rc=2)
    check("--direct-read" in p.stderr and "'yes'" in p.stderr,
          f"bad --direct-read not named: {p.stderr}")


def truncate_under_bench(tmp, name, bench_args, at_s=1.5):
    """Starts `dscache bench` on a fresh cache, cuts its shard to 128 bytes `at_s` seconds in,
    and returns the finished process (returncode, stdout, stderr)."""
    _, out = make_bench_cache(tmp / name, n=300)
    cmd = [DSCACHE, "bench", str(out), *bench_args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(at_s)
    os.truncate(out / "images-00000.npy", 128)
    try:
        stdout, stderr = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        raise Failure(f"bench hung after its shard was truncated: {' '.join(cmd)}")
    p.stdout, p.stderr = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    return p


def case_bench_truncated_live(tmp):
    """A shard truncated while the memcpy rows copy from its mapping: Corruption (exit 5)
    naming the shard, never SIGBUS (exit 135 / -7)."""
    for memory in ("page-cache", "pread"):
        p = truncate_under_bench(tmp, "memcpy-" + memory,
                                 ["--rows", "memcpy", "--seconds", "4", "--memory", memory])
        check(p.returncode == 5, f"--rows memcpy --memory {memory}, shard truncated under it: "
              f"exit {p.returncode} (want 5)\n{p.stderr}")
        check("images-00000.npy" in p.stderr and "shrank" in p.stderr,
              f"--memory {memory}: stderr does not name the shard and the cause: {p.stderr!r}")


def case_bench_disk_truncated(tmp):
    """--rows disk: a shard shrinking while disk_random's threads pread it is reported on the
    main thread (exit 5, naming the shard), not std::terminate (exit 134)."""
    p = truncate_under_bench(tmp, "disk", ["--rows", "disk", "--seconds", "4"])
    check(p.returncode == 5, f"--rows disk, shard truncated under it: exit {p.returncode} "
          f"(want 5)\n{p.stderr}")
    check("terminate" not in p.stderr and "images-00000.npy" in p.stderr,
          f"--rows disk: stderr should name the shard, not 'terminate called': {p.stderr!r}")


CASES = {
    "bench_json": case_bench_json,
    "bench_corrupt": case_bench_corrupt,
    "bench_moved_source": case_bench_moved_source,
    "bench_memory_mode": case_bench_memory_mode,
    "bench_direct_read": case_bench_direct_read,
    "bench_truncated_live": case_bench_truncated_live,
    "bench_disk_truncated": case_bench_disk_truncated,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
