#!/usr/bin/python3
"""Out-of-core serving in one run: a cache several times larger than a memory cgroup, served
from disk by each reader, every row in a fresh process inside the cgroup with the cache's pages
dropped first.

Rows (samples/s and bytes/s of sample data each):
  disk sequential       `dscache bench --rows disk`: O_DIRECT 8 MiB reads of the shards, in order
  disk random           the same run: sample-sized preads at random indices, all threads
  mmap + global         `dscache bench --rows global --memory page-cache` (Loader, all threads)
  pread + global        `dscache bench --rows global --memory pread`
  pread + windowed      `dscache bench --rows out-of-core --direct-read=off`: Loader, pread,
                        windowed shuffle with byte-sized blocks and the auto window, read-ahead
                        and drop-behind (off: the default, auto, would read this cache directly)
  direct + windowed     the same with `--direct-read` (on): each window read with O_DIRECT into the
                        Loader's buffers (LoaderOptions::direct_read), no page cache
  default (auto)        the same with no --direct-read: the rule decides (it should read directly
                        here, the cache being larger than the cgroup); prints its reason
  torch mmap (seed)     bench/serve_peers.py --recipes mmap: np.load(mmap_mode="r") +
                        torch DataLoader(shuffle=True), one epoch (cut and extrapolated at
                        --seconds x 3)
For each: the peak anonymous RSS of the process tree (sampled every 20 ms from
/proc/PID/status RssAnon, children included), the Loader's buffer bytes where dscache reports
them, the cgroup's peak usage, and whether anything was OOM-killed (v1 memory.oom_control /
v2 memory.events oom_kill, exit by SIGKILL, new "Killed process" lines in dmesg).

Goals checked (the issue's): pread + windowed >= 0.7x the disk's sequential bytes/s and >= 5x
mmap + global in the same cgroup; its anonymous RSS <= buffers + 64 MiB; nothing OOM-killed.

Usage (as root: it makes a memory cgroup):
  bench/out_of_core.py CACHE [--limit 300M] [--dscache build/tools/dscache] [--batch 32]
                       [--seconds 10] [--json OUT] [--chart docs/out_of_core.png]
                       [--rows disk,mmap,pread-global,windowed,direct,auto,torch] [--rounds N]
With --rounds N every selected row runs once per round, rounds interleaved (so a shared
machine's load hits every row alike), and each row reports the median of its rounds with the
range; each round's ratios are taken within the round, then their median and range printed.
The cache must hold >= 4x --limit of sample bytes (--min-ratio to change). cgroup v1
(/sys/fs/cgroup/memory) and v2 (memory.max) are both supported.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from hostinfo import host_info

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


class Cgroup:
    """A memory cgroup limited to `limit` bytes (v2 when the unified hierarchy has the memory
    controller, else v1)."""

    def __init__(self, name, limit):
        v2_root = "/sys/fs/cgroup"
        if os.path.exists(os.path.join(v2_root, "cgroup.controllers")):
            with open(os.path.join(v2_root, "cgroup.controllers")) as f:
                if "memory" not in f.read().split():
                    raise SystemExit("cgroup v2 without the memory controller")
            self.version = 2
            self.path = os.path.join(v2_root, name)
            os.makedirs(self.path, exist_ok=True)
            self._write("memory.max", str(limit))
            try:
                self._write("memory.swap.max", "0")
            except OSError:
                pass
        elif os.path.isdir("/sys/fs/cgroup/memory"):
            self.version = 1
            self.path = os.path.join("/sys/fs/cgroup/memory", name)
            os.makedirs(self.path, exist_ok=True)
            self._write("memory.limit_in_bytes", str(limit))
        else:
            raise SystemExit("no memory cgroup hierarchy found (v1 or v2)")
        self.limit = limit

    def _write(self, f, v):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(v)

    def _read(self, f):
        try:
            with open(os.path.join(self.path, f)) as fh:
                return fh.read()
        except OSError:
            return ""

    def enter(self):  # in the child, before exec
        with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))

    def reset_peak(self):
        if self.version == 1:
            for f in ("memory.max_usage_in_bytes", "memory.failcnt"):
                try:
                    self._write(f, "0")
                except OSError:
                    pass

    def oom_kills(self):
        text = self._read("memory.oom_control" if self.version == 1 else "memory.events")
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def stats(self):
        if self.version == 1:
            peak = self._read("memory.max_usage_in_bytes").strip()
            fail = self._read("memory.failcnt").strip()
            return {"peak_usage_bytes": int(peak) if peak else None,
                    "failcnt": int(fail) if fail else None}
        peak = self._read("memory.peak").strip()
        return {"peak_usage_bytes": int(peak) if peak else None}

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def dmesg_kills():
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    except OSError:
        return None
    return sum(1 for line in out.splitlines() if "Killed process" in line)


def rss_anon_tree(pid):
    """RssAnon of pid and its descendants, bytes."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1]) * 1024
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return total


def drop_pages(files):
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run_row(cg, files, cmd):
    """Runs cmd in the cgroup from a cold page cache; returns (stdout, info)."""
    drop_pages(files)
    cg.reset_peak()
    kills0, dmesg0 = cg.oom_kills(), dmesg_kills()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=cg.enter)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon_tree(p.pid))
            done.wait(0.02)

    t = threading.Thread(target=sample)
    t.start()
    out, err = p.communicate()
    done.set()
    t.join()
    dmesg1 = dmesg_kills()
    info = {"cmd": " ".join(cmd), "rc": p.returncode, "rss_anon_peak_bytes": peak[0],
            "oom_kills": cg.oom_kills() - kills0,
            "killed": p.returncode in (-signal.SIGKILL, 137),
            "dmesg_killed": None if dmesg0 is None else dmesg1 - dmesg0}
    info.update(cg.stats())
    info["oom"] = bool(info["oom_kills"] or info["killed"] or info["dmesg_killed"])
    if p.returncode != 0:
        info["stderr"] = err[-2000:]
        print(f"  ! exit {p.returncode}: {err.strip()[-500:]}", file=sys.stderr)
    drop_pages(files)
    return out, info


def row_from_bench(name, j, key_sps, sample_bytes, info, threads=None):
    if key_sps == "rows":  # the all-threads loader row
        rows = [r for r in j["rows"] if r["name"] == "loader, global shuffle"]
        r = max(rows, key=lambda r: r["threads"])
        sps = r["samples_per_s"]
    else:
        sps = j[key_sps]
    return {"name": name, "samples_per_s": sps, "bytes_per_s": sps * sample_bytes,
            "buffers_bytes": j["rss"]["buffers_mib"] * MIB, **info}


def measure_round(a, cg, files, bench, sample_bytes, want, direct):
    """One round: each selected row once, in order; returns the rows."""
    rows = []
    if True:
        print("- disk (sequential O_DIRECT, random sample-sized preads)")
        out, info = run_row(cg, files, bench + ["--rows", "disk"]) if "disk" in want else ("", {"rc": -1})
        if info["rc"] == 0:
            j = json.loads(out)
            rows.append({"name": "disk sequential", "samples_per_s":
                         j["disk_sequential_bytes_per_s"] / sample_bytes,
                         "bytes_per_s": j["disk_sequential_bytes_per_s"],
                         "method": j["disk_sequential_method"], **info})
            rows.append({"name": "disk random", "samples_per_s": j["disk_random_samples_per_s"],
                         "bytes_per_s": j["disk_random_bytes_per_s"], **info})
        for flag, name, extra, key in (
                ("mmap", "mmap + global", ["--rows", "global", "--memory", "page-cache"], "rows"),
                ("pread-global", "pread + global", ["--rows", "global", "--memory", "pread"],
                 "rows"),
                ("windowed", "pread + windowed", ["--rows", "out-of-core", "--direct-read=off"],
                 "windowed_out_of_core_samples_per_s"),
                ("direct", "direct + windowed", ["--rows", "out-of-core"] + direct,
                 "windowed_out_of_core_samples_per_s"),
                ("auto", "default (auto) + windowed", ["--rows", "out-of-core"],
                 "windowed_out_of_core_samples_per_s")):
            if flag not in want:
                continue
            print(f"- {name}")
            out, info = run_row(cg, files, bench + extra)
            if info["rc"] != 0:
                rows.append({"name": name, "samples_per_s": 0, "bytes_per_s": 0, **info})
                continue
            j = json.loads(out)
            r = row_from_bench(name, j, key, sample_bytes, info)
            if key != "rows":
                r["window"] = j["windowed_out_of_core"]
            r["memory_mode"] = j["memory_mode"] if key == "rows" else "pread"
            if flag == "auto":  # what the default chose, and why
                r["read_path"] = r["window"].get("direct_read_reason", "")
                print(f"  read path: {r['read_path']}")
            rows.append(r)
        if "torch" not in want:
            return rows
        print("- torch mmap (seed recipe)")
        peer_json = f"/tmp/dscache-ooc-peer-{os.getpid()}.json"
        out, info = run_row(cg, files, [
            "/usr/bin/python3", os.path.join(HERE, "serve_peers.py"), os.path.abspath(a.cache),
            "--recipes", "mmap", "--workers", str(a.workers), "--batch", str(a.batch),
            "--epochs", "1",
            "--max-seconds", str(a.seconds * 3), "--json", peer_json])
        sps = 0
        if info["rc"] == 0:
            with open(peer_json) as f:
                pj = json.load(f)
            prow = [r for r in pj["recipes"] if r.get("name") == "mmap"][0]
            sps = prow["samples_per_s"]
            info["extrapolated"] = prow.get("extrapolated")
            os.unlink(peer_json)
        rows.append({"name": f"torch mmap, {a.workers} workers", "samples_per_s": sps,
                     "bytes_per_s": sps * sample_bytes, **info})
    return rows



def median_rows(rounds):
    """Each row's median bytes/s over the rounds (the round holding it), with the range; each
    round's windowed/disk ratios, for the medians of ratios taken within a round."""
    out = []
    for name in [r["name"] for r in rounds[0]]:
        runs = [r for rows in rounds for r in rows if r["name"] == name]
        runs.sort(key=lambda r: r["bytes_per_s"])
        mid = dict(runs[len(runs) // 2])
        mid["rounds_bytes_per_s"] = [r["bytes_per_s"] for r in runs]
        out.append(mid)
    per_round = []
    for rows in rounds:
        by = {r["name"]: r for r in rows}
        seq = by.get("disk sequential", {}).get("bytes_per_s", 0)
        per_round.append({k: (by[n]["bytes_per_s"] / seq if seq and n in by else None)
                          for k, n in (("windowed_vs_disk_sequential", "pread + windowed"),
                                       ("direct_vs_disk_sequential", "direct + windowed"),
                                       ("auto_vs_disk_sequential",
                                        "default (auto) + windowed"))})
    out_ratios = {}
    for k in ("windowed_vs_disk_sequential", "direct_vs_disk_sequential",
              "auto_vs_disk_sequential"):
        v = sorted(x[k] for x in per_round if x[k] is not None)
        if v:
            out_ratios[k] = {"median": v[len(v) // 2], "min": v[0], "max": v[-1], "rounds": v}
    return out, out_ratios


def write_chart(path, a, rows, data_bytes, ratio):
    """A PNG bar chart of samples/s per row (disk rows grey, windowed rows red) at `path`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = [r["name"] for r in rows]
    vals = [r["samples_per_s"] for r in rows]
    colors = ["#999999" if r["name"].startswith("disk") else
              "#d62728" if "windowed" in r["name"] else "#1f77b4" for r in rows]
    ax.barh(names[::-1], vals[::-1], color=colors[::-1])
    for y, v in enumerate(vals[::-1]):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    ax.set_xlabel("samples/s (disk rows: bytes/s divided by the sample size)")
    ax.set_title(f"{data_bytes / 1e9:.2f} GB cache in a {a.limit} memory cgroup "
                 f"({ratio:.1f}x), cold page cache, batch {a.batch}", fontsize=9)
    ax.set_xlim(0, max(vals) * 1.18 if vals and max(vals) > 0 else 1)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache")
    ap.add_argument("--limit", default="300M", help="the cgroup's memory limit (default 300M)")
    ap.add_argument("--min-ratio", type=float, default=4.0,
                    help="refuse caches smaller than this many times the limit (default 4)")
    ap.add_argument("--dscache", default=os.path.join(HERE, "..", "build", "tools", "dscache"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=10.0, help="per dscache row")
    ap.add_argument("--workers", type=int, default=2, help="torch DataLoader num_workers")
    ap.add_argument("--rows", default="disk,mmap,pread-global,windowed,direct,auto,torch",
                    help="rows to run (default all): disk, mmap, pread-global, windowed, direct, "
                    "torch")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (default 1)")
    ap.add_argument("--direct-depth", type=int, default=4, help="direct row: requests in flight")
    ap.add_argument("--direct-request-kib", type=int, default=512,
                    help="direct row: KiB per request")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--chart", help="write a PNG chart (samples/s per row) here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark makes a memory cgroup")
    cache = os.path.abspath(a.cache)
    with open(os.path.join(cache, "manifest.json")) as f:
        m = json.load(f)
    shape = m["shape"]
    sample_bytes = 1
    for d in shape:
        sample_bytes *= int(d)
    files = [os.path.join(cache, s["file"]) for s in m["shards"] if int(s["count"]) > 0]
    data_bytes = sample_bytes * int(m["count"])
    limit = parse_size(a.limit)
    ratio = data_bytes / limit
    if ratio < a.min_ratio:
        raise SystemExit(f"{cache}: {data_bytes / 1e9:.3f} GB of samples is {ratio:.2f}x the "
                         f"{a.limit} limit; want >= {a.min_ratio}x (bigger cache or --limit)")
    dscache = os.path.abspath(a.dscache)
    bench = [dscache, "bench", cache, "--json", "--batch", str(a.batch), "--seconds",
             str(a.seconds)]
    print(f"cache {cache}: {m['count']} samples of {sample_bytes} bytes = "
          f"{data_bytes / 1e9:.3f} GB, {ratio:.2f}x the {a.limit} cgroup limit")
    cg = Cgroup(f"dscache-ooc-{os.getpid()}", limit)
    print(f"cgroup v{cg.version}: {cg.path}")
    want = set(a.rows.split(","))
    unknown = want - {"disk", "mmap", "pread-global", "windowed", "direct", "auto", "torch"}
    if unknown:
        raise SystemExit(f"--rows: unknown {sorted(unknown)}")
    direct = ["--direct-read", "--direct-depth", str(a.direct_depth), "--direct-request-kib",
              str(a.direct_request_kib)]
    rounds = []
    try:
        for rnd in range(a.rounds):
            if a.rounds > 1:
                print(f"round {rnd + 1}/{a.rounds}, load average {os.getloadavg()}")
            rounds.append(measure_round(a, cg, files, bench, sample_bytes, want, direct))
    finally:
        cg.remove()
    rows, round_ratios = median_rows(rounds)
    by = {r["name"]: r for r in rows}
    print()
    print(f"{'row':<24} {'samples/s':>10} {'GB/s':>8} {'RssAnon peak':>13} {'buffers':>9} "
          f"{'cg peak':>9}  OOM")
    for r in rows:
        buf = f"{r['buffers_bytes'] / MIB:.1f}M" if "buffers_bytes" in r else "-"
        peak = f"{r['peak_usage_bytes'] / MIB:.0f}M" if r.get("peak_usage_bytes") else "-"
        print(f"{r['name']:<24} {r['samples_per_s']:>10.0f} {r['bytes_per_s'] / 1e9:>8.3f} "
              f"{r['rss_anon_peak_bytes'] / MIB:>12.1f}M {buf:>9} {peak:>9}  "
              f"{'yes' if r['oom'] else 'no'}")

    def ratio_of(x, y):
        if x in by and y in by and by[y]["bytes_per_s"] > 0:
            return by[x]["bytes_per_s"] / by[y]["bytes_per_s"]
        return None

    ratios = {"windowed_vs_disk_sequential": ratio_of("pread + windowed", "disk sequential"),
              "direct_vs_disk_sequential": ratio_of("direct + windowed", "disk sequential"),
              "direct_vs_windowed": ratio_of("direct + windowed", "pread + windowed"),
              "auto_vs_disk_sequential": ratio_of("default (auto) + windowed", "disk sequential"),
              "windowed_vs_mmap_global": ratio_of("pread + windowed", "mmap + global"),
              "windowed_vs_torch_mmap": ratio_of("pread + windowed",
                                                 f"torch mmap, {a.workers} workers"),
              "pread_global_vs_mmap_global": ratio_of("pread + global", "mmap + global")}
    w = by.get("pread + windowed")
    goals = {}
    if w:
        goals = {
            "windowed >= 0.7x disk sequential": (ratios["windowed_vs_disk_sequential"] or 0) >= 0.7,
            "windowed >= 5x mmap + global": (ratios["windowed_vs_mmap_global"] or 0) >= 5,
            "windowed RssAnon <= buffers + 64 MiB":
                w["rss_anon_peak_bytes"] <= w.get("buffers_bytes", 0) + 64 * MIB,
            "nothing OOM-killed": not any(r["oom"] for r in rows)}
    print()
    print("ratios of the median rows:")
    for k, v in ratios.items():
        print(f"  {k}: {'-' if v is None else f'{v:.2f}x'}")
    for k, v in round_ratios.items():
        print(f"{k}, within each round: median {v['median']:.2f}x, range "
              f"{v['min']:.2f}-{v['max']:.2f}x over {len(v['rounds'])} rounds")
    d = round_ratios.get("direct_vs_disk_sequential")
    if d:
        goals["direct >= 0.85x disk sequential (median of rounds)"] = d["median"] >= 0.85
    for k, v in goals.items():
        print(f"goal {k}: {'met' if v else 'MISSED'}")
    result = {"cache": cache, "samples": m["count"], "sample_bytes": sample_bytes,
              "data_bytes": data_bytes, "limit_bytes": limit, "cache_vs_limit": ratio,
              "cgroup_version": cg.version, "batch": a.batch, "seconds": a.seconds,
              "rows": rows, "ratios": ratios, "round_ratios": round_ratios, "goals": goals,
              "rounds": a.rounds, "direct_depth": a.direct_depth,
              "direct_request_kib": a.direct_request_kib,
              "host": host_info(loadavg_end=list(os.getloadavg()))}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    if a.chart:
        write_chart(a.chart, a, rows, data_bytes, ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
