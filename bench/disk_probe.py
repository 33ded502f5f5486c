#!/usr/bin/python3
"""The disk's cold read rate by request size and queue depth: O_DIRECT reads of FILES (no page
cache), `depth` threads each reading its own contiguous stripe in `size`-byte requests, so the
device sees `depth` requests in flight. What the Loader's out-of-core read size and depth are
chosen from (docs/BENCHMARKS.md). Rounds are interleaved (every size/depth once per round) so
a shared machine's load hits all cells alike; prints the median and range per cell.

Usage (root not needed; O_DIRECT must be supported by the file system):
  bench/disk_probe.py FILE... [--sizes 128K,512K,1M,4M,8M] [--depths 1,2,4,8] [--rounds 3]
                      [--bytes 256M]
"""
import argparse
import mmap
import os
import statistics
import threading
import time


def parse_size(t):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = t.strip().upper()
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def probe(files, size, depth, total, start):
    """bytes/s reading `total` bytes (from byte `start` of the concatenated files, cyclically)."""
    spans = []  # (path, offset) requests, in order
    lengths = [os.path.getsize(f) // size * size for f in files]
    all_bytes = sum(lengths)
    pos = start % all_bytes // size * size
    for _ in range(total // size):
        p = pos
        for f, n in zip(files, lengths):
            if p < n:
                spans.append((f, p))
                break
            p -= n
        pos = (pos + size) % all_bytes
    stripes = [spans[i * len(spans) // depth:(i + 1) * len(spans) // depth] for i in range(depth)]
    fds = {f: os.open(f, os.O_RDONLY | os.O_DIRECT) for f in files}
    done = [0] * depth

    def worker(k):
        buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
        for f, off in stripes[k]:
            done[k] += os.preadv(fds[f], [buf], off)

    t0 = time.perf_counter()
    th = [threading.Thread(target=worker, args=(k,)) for k in range(depth)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.perf_counter() - t0
    for fd in fds.values():
        os.close(fd)
    return sum(done) / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--sizes", default="128K,512K,1M,4M,8M")
    ap.add_argument("--depths", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bytes", default="256M", help="read per cell and round (default 256M)")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    depths = [int(d) for d in a.depths.split(",")]
    total = parse_size(a.bytes)
    res = {(s, d): [] for s in sizes for d in depths}
    start = 0
    for r in range(a.rounds):
        for s in sizes:
            for d in depths:
                # A fresh region each cell: O_DIRECT skips the page cache, but the host's may not.
                res[(s, d)].append(probe(a.files, s, d, total, start))
                start += total
    print(f"load average at the end: {os.getloadavg()}")
    print(f"{'size':>6} " + " ".join(f"{'qd' + str(d):>22}" for d in depths) + "   (GB/s median [min-max])")
    for s in sizes:
        cells = []
        for d in depths:
            v = res[(s, d)]
            cells.append(f"{statistics.median(v) / 1e9:.2f} [{min(v) / 1e9:.2f}-{max(v) / 1e9:.2f}]")
        print(f"{s >> 10:>5}K " + " ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
