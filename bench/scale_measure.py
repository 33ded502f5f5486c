"""bench/scale.py's measurements: each phase run as a process of its own from a small
`python3 -S` launcher, timed by wall clock with os.wait4's rusage (peak RSS of the process or its
largest descendant), its process tree's anonymous memory sampled; repeated rounds; Python
children that print their own timings; the sizes of a cache's files."""
import json
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np


def _tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _anon_kib(pid):
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    total += int(line.split()[1])
    except OSError:
        pass
    return total


class Run:
    def __init__(self, wall, maxrss_kib, anon_kib, rc, out, err):
        self.wall, self.maxrss_kib, self.anon_kib = wall, maxrss_kib, anon_kib
        self.rc, self.out, self.err = rc, out, err


# Starts CMD (argv[2:]) and writes "exit maxrss_kib wall_s" of it to the fd argv[1]. A forked (or vforked)
# child's ru_maxrss starts at its parent's RSS and is kept across exec, and this script holds
# numpy (~30 MiB, more than `cp` or `inspect` use): every phase is started from this small
# interpreter (python3 -S, ~8 MiB: the floor of every maxrss below), which is left out of the
# sampled anon.
LAUNCH = """
import os, sys, time
fd = int(sys.argv[1])
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.close(fd)
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
os.write(fd, b"%d %d %f" % (os.waitstatus_to_exitcode(status), ru.ru_maxrss,
                           time.perf_counter() - t0))
"""


def measure(cmd, env=None, sample_ms=20, check=True):
    """Runs CMD; wall seconds, ru_maxrss (KiB) from wait4, sampled peak anon+shmem of its tree."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        r, w = os.pipe()
        p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCH, str(w)] + [str(c) for c in cmd],
                             stdout=fo, stderr=fe, env=env, pass_fds=(w,))
        os.close(w)
        peak = [0]
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                peak[0] = max(peak[0], sum(_anon_kib(q) for q in _tree(p.pid) if q != p.pid))
                stop.wait(sample_ms / 1000)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        report = b""
        while True:
            chunk = os.read(r, 256)
            if not chunk:
                break
            report += chunk
        os.close(r)
        p.wait()
        stop.set()
        th.join()
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
    try:
        rc, maxrss, wall = report.split()
        rc, maxrss, wall = int(rc), int(maxrss), float(wall)
    except ValueError:
        sys.exit(f"scale.py: launching {' '.join(str(c) for c in cmd)} failed:\n{err[-3000:]}")
    if check and rc != 0:
        sys.exit(f"scale.py: {' '.join(str(c) for c in cmd)} failed ({rc}):\n"
                 f"{out[-3000:]}\n{err[-3000:]}")
    return Run(wall, maxrss, peak[0], rc, out, err)


def rounds(a, cmd, env=None, before=None):
    """CMD run a.rounds times (BEFORE() ahead of each): the median wall, maxrss and anon, each
    round's wall in .walls, the last round's output."""
    runs = []
    for _ in range(a.rounds):
        if before:
            before()
        runs.append(measure(cmd, env=env, sample_ms=a.sample_ms))
    med = lambda vs: float(np.median(vs))  # noqa: E731
    r = Run(med([x.wall for x in runs]), int(med([x.maxrss_kib for x in runs])),
            int(med([x.anon_kib for x in runs])), 0, runs[-1].out, runs[-1].err)
    r.walls = [round(x.wall, 4) for x in runs]
    r.maxrss_runs = [x.maxrss_kib for x in runs]
    r.anon_runs = [x.anon_kib for x in runs]
    r.outs = [x.out for x in runs]
    return r


def row(r, **extra):
    d = {"wall_s": round(r.wall, 4), "maxrss_kib": r.maxrss_kib, "anon_kib": r.anon_kib}
    if len(getattr(r, "walls", ())) > 1:
        d["walls"] = r.walls
        d["maxrss_kib_runs"] = r.maxrss_runs
        d["anon_kib_runs"] = r.anon_runs
    d.update(extra)
    return d


# Python children: each prints one JSON line of its own timings (seconds).
PY_OPEN = r"""
import json, sys, time
t0 = time.perf_counter()
import dscache
t1 = time.perf_counter()
c = dscache.Cache(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "count": c.count}))
"""


PY_LOADER = r"""
import json, sys, time
t0 = time.perf_counter()
import dscache
c = dscache.Cache(sys.argv[1])
t1 = time.perf_counter()
loader = dscache.Loader(c, batch_size=256, shuffle=True, seed=0, workers=2, prefetch=4)
it = iter(loader)
images, labels = next(it)
t2 = time.perf_counter()
n = len(labels)
if sys.argv[2] == "epoch":
    for images, labels in it:
        n += len(labels)
t3 = time.perf_counter()
print(json.dumps({"import_open_s": t1 - t0, "first_batch_s": t2 - t1, "epoch_s": t3 - t1,
                  "samples": n}))
"""


PY_DATALOADER = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
import dscache.torch
t1 = time.perf_counter()
ds = dscache.torch.CacheDataset(sys.argv[1], batch_size=256, shuffle=True, threads=1)
dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
it = iter(dl)
images, labels = next(it)
t2 = time.perf_counter()
del it
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_batch_s": t2 - t1, "shutdown_s": t3 - t2,
                  "batch": list(images.shape)}))
"""


def py_child(a, script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (a.pythonpath, env.get("PYTHONPATH")) if p)
    r = rounds(a, [sys.executable, "-c", script, *args], env=env)
    js = [json.loads(o.strip().splitlines()[-1]) for o in r.outs]
    # Each timing key: its median over the rounds.
    j = {k: (float(np.median([x[k] for x in js])) if isinstance(v, float) else v)
         for k, v in js[-1].items()}
    return r, j


def dir_bytes(d):
    total = 0
    for root, _, files in os.walk(d):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def side_files(cache):
    """Every file of CACHE but its image shards, with its size."""
    out = {}
    for f in sorted(os.listdir(cache)):
        p = os.path.join(cache, f)
        if os.path.isfile(p) and not f.startswith("images-"):
            out[f] = os.path.getsize(p)
    return out
