#!/usr/bin/python3
"""dscache.Loader at the edges a training script meets (issue 17): interpreter exit with a
Loader alive (normal end, sys.exit, an uncaught exception, Ctrl-C mid-epoch), absurd prefetch and
batch sizes, os.fork() after a Loader started (and the documented worker recipe), and state
dicts from another cache or with out-of-range epoch/seed. Real processes, real caches."""
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import build_cache, main  # noqa: E402

import dscache  # noqa: E402

PY = sys.executable

# A script that makes a Loader over a LazyCache (Python decode: the workers take the GIL) and
# takes one batch of a long epoch; {ending} is how it ends. The decode sleeps a little so that
# workers are inside Python when the interpreter finalizes.
SCRIPT = """
import os, sys, time
import numpy as np
import dscache
data = np.arange(2000 * 8 * 6 * 3, dtype=np.uint64).astype(np.uint8).reshape(2000, 8, 6, 3)
def decode(i):
    time.sleep(0.0005)
    return data[i]
lazy = dscache.LazyCache(sys.argv[1], 2000, (8, 6, 3), [i % 3 for i in range(2000)], decode)
loader = dscache.Loader(lazy, batch_size=4, workers=4, prefetch=8)
it = iter(loader)
next(it)
print("ready", flush=True)
{ending}
"""

ENDINGS = {
    "end": ("pass", (0,)),
    "sys_exit": ("sys.exit(3)", (3,)),
    "raise": ("raise RuntimeError('boom')", (1,)),
    # Ctrl-C during the epoch: the loop keeps taking batches until SIGINT arrives.
    "sigint": ("while True:\n    for b in loader: pass", (130, -signal.SIGINT, 1)),
}


def run_ending(tmp, name, k):
    code, want = ENDINGS[name]
    script = SCRIPT.format(ending=code)
    p = subprocess.Popen([PY, "-c", script, os.path.join(tmp, f"lazy-{name}-{k}.bin")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ))
    if name == "sigint":
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"{name} run {k}: hung at exit; stderr: {err[-2000:]}")
    rc = p.returncode
    assert rc in want, f"{name} run {k}: exit {rc}, want {want}; stderr: {err[-2000:]}"
    assert "FATAL" not in err and "Segmentation" not in err, f"{name} run {k}: {err[-2000:]}"
    if name == "raise":
        assert "RuntimeError: boom" in err, err[-2000:]
    if name == "sigint":
        assert "KeyboardInterrupt" in err, err[-2000:]


def test_interpreter_exit_with_live_loader(tmp):
    for name in ENDINGS:
        for k in range(4):
            run_ending(tmp, name, k)


# Ctrl-C while next() waits for a batch that takes long to decode: KeyboardInterrupt at once.
STALL = """
import sys, time
import dscache
import numpy as np
def decode(i):
    if i >= 4:
        time.sleep(2)  # a stalled source (time.sleep releases the GIL)
    return np.full((8, 6, 3), i % 256, dtype=np.uint8)
lazy = dscache.LazyCache(sys.argv[1], 64, (8, 6, 3), [0] * 64, decode)
loader = dscache.Loader(lazy, batch_size=4, shuffle=False, workers=1, prefetch=1)
it = iter(loader)
next(it)
print("ready", flush=True)
t0 = time.monotonic()
try:
    next(it)
    print("no interrupt", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t0:.2f} s", flush=True)
"""


def test_ctrl_c_interrupts_a_waiting_next(tmp):
    p = subprocess.Popen([PY, "-c", STALL, os.path.join(tmp, "stall.bin")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, (p.returncode, err[-2000:])
    line = out.strip()
    assert line.startswith("interrupted after "), (line, err[-2000:])
    waited = float(line.split()[2])
    assert waited < 1.5, f"next() ignored Ctrl-C for {waited} s (a batch takes 8 s)"


def expect_error(fn, *words):
    try:
        fn()
    except dscache.Error as e:
        text = str(e)
        for w in words:
            assert w in text, f"error {text!r} does not mention {w!r}"
        assert "std::" not in text and "bad_alloc" not in text, text
        return e
    raise AssertionError(f"no dscache.Error (wanted one naming {words})")


def test_prefetch_out_of_range(tmp):
    cache = dscache.Cache(build_cache(tmp))
    for p in (2**32 - 1, 2**32 - 2, 2**20):
        expect_error(lambda: dscache.Loader(cache, batch_size=4, prefetch=p), "prefetch")
    expect_error(lambda: dscache.Loader(cache, batch_size=4, prefetch=0), "prefetch")
    expect_error(lambda: dscache.Loader(cache, batch_size=4, prefetch=2**40), "prefetch")
    # workers: a million threads were started until the system refused (RuntimeError)
    expect_error(lambda: dscache.Loader(cache, batch_size=4, workers=2**20), "workers")
    # A sane large value still works and yields every sample.
    loader = dscache.Loader(cache, batch_size=4, prefetch=64, return_indices=True)
    seen = sorted(int(i) for _, _, idx in loader for i in idx)
    assert seen == list(range(len(cache)))


def test_batch_too_big(tmp):
    cache = dscache.Cache(build_cache(tmp))
    # batch x sample bytes wraps to 0 in 64 bits without a checked product
    expect_error(lambda: dscache.Loader(cache, batch_size=2**24,
                                        transform=dscache.Transform("center", 2**20)),
                 "batch_size")
    # a sample of 2**32 x 2**32 pixels: the sample size itself overflows
    expect_error(lambda: dscache.Loader(cache, batch_size=1,
                                        transform=dscache.Transform("center", 2**32 - 1)),
                 "transform")
    # fits in 64 bits but not in this machine's memory
    expect_error(lambda: dscache.Loader(cache, batch_size=2**31), "batch_size", "memory")
    expect_error(lambda: dscache.Loader(cache, batch_size=2**32), "batch_size")


def _child_iterate(loader, it, mode, q):
    try:
        if mode == "continue":
            for _ in it:  # the rest of the parent's epoch
                pass
        else:
            for _ in loader:
                pass
        q.put("no error")
    except dscache.Error as e:
        q.put("Error: " + str(e))
    except BaseException as e:  # noqa: B902
        q.put(f"{type(e).__name__}: {e}")


def test_fork_after_start_raises(tmp):
    cache = dscache.Cache(build_cache(tmp))
    loader = dscache.Loader(cache, batch_size=4, workers=2, prefetch=2)
    it = iter(loader)
    next(it)
    ctx = multiprocessing.get_context("fork")
    for mode in ("continue", "iter"):
        q = ctx.Queue()
        p = ctx.Process(target=_child_iterate, args=(loader, it, mode, q))
        p.start()
        p.join(20)
        if p.is_alive():
            p.kill()
            p.join()
            raise AssertionError(f"fork child ({mode}) hung")
        msg = q.get(timeout=5)
        assert msg.startswith("Error: ") and "fork" in msg and "worker" in msg, (mode, msg)
        assert p.exitcode == 0, (mode, p.exitcode)
    # The parent's loader is untouched.
    n = 1 + sum(1 for _ in it)
    assert n == len(loader)
    # Raw os.fork, child exits through the interpreter's normal shutdown (atexit runs).
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            iter(loader)
        except dscache.Error:
            code = 0
        import atexit
        atexit._run_exitfuncs()  # the interpreter's shutdown hooks (they close live Loaders)
        os._exit(code)  # not sys.exit: the test runner's temporary directory is the parent's
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


# PYTHON.md's recipe: each forked worker opens its own Loader (here: a Cache opened in the
# parent is fine to share; the Loader and its threads are made in the worker).
def _worker_recipe(path, rank, world, q):
    cache = dscache.Cache(path)
    loader = dscache.Loader(cache, batch_size=4, seed=1, rank=rank, world_size=world,
                            return_indices=True, rank_tail="drop")
    q.put(sorted(int(i) for _, _, idx in loader for i in idx))


def test_fork_worker_recipe(tmp):
    path = build_cache(tmp)
    parent = dscache.Loader(dscache.Cache(path), batch_size=4, return_indices=True)
    next(iter(parent))  # the parent's Loader runs: the children must not care
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker_recipe, args=(path, r, 3, q)) for r in range(3)]
    for p in procs:
        p.start()
    got = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    union = sorted(i for g in got for i in g)
    n = len(dscache.Cache(path))
    assert len(set(union)) == len(union) and len(union) == n - n % 3


def test_state_dict_identity_and_ranges(tmp):
    small = dscache.Cache(build_cache(tmp, "small", classes=3, per_class=20))
    big = dscache.Cache(build_cache(tmp, "big", classes=3, per_class=300, shard_size="200K"))
    a = dscache.Loader(small, batch_size=4, seed=1)
    next(iter(a))
    b = dscache.Loader(big, batch_size=4, seed=1)
    expect_error(lambda: b.load_state_dict(a.state_dict()), "60", "900", "cache")
    # Same count, other contents: a cache built from other images.
    other = dscache.Cache(build_cache(tmp, "other", classes=3, per_class=20, seed=9))
    c = dscache.Loader(other, batch_size=4, seed=1)
    expect_error(lambda: c.load_state_dict(a.state_dict()), "cache")
    # The same cache opened again accepts it.
    d = dscache.Loader(dscache.Cache(small.path), batch_size=4, seed=1)
    d.load_state_dict(a.state_dict())
    assert len(list(d)) == len(d) - 1
    # Range checks at the call, not a TypeError later.
    expect_error(lambda: d.set_epoch(-1), "epoch")
    expect_error(lambda: d.set_epoch(2**64), "epoch")
    for bad in (-1, 2**64):
        expect_error(lambda: dscache.Loader(small, seed=bad), "seed")
        s = a.state_dict()
        s["seed"] = bad
        expect_error(lambda: d.load_state_dict(s), "seed")
        s = a.state_dict()
        s["epoch"] = bad
        expect_error(lambda: d.load_state_dict(s), "epoch")
    dscache.Loader(small, seed=2**64 - 1).set_epoch(2**64 - 1)


if __name__ == "__main__":
    sys.exit(main(globals()))
