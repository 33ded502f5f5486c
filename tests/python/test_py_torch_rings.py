#!/usr/bin/python3
"""dscache.torch's shared-memory rings (dscache/_shm_ring.py) do not outlive their DataLoader
workers in a long-running process: a worker killed with SIGKILL cannot remove its own ring, and
the main process removes it once the worker is gone, while the interpreter keeps running.
The rings are tiny (8x6 images, batches of 4). SKIP without python3-torch."""
import gc
import os
import signal
import sys
import time

import numpy as np

from pyhelpers import Skip, main

import dscache  # noqa: E402
from dscache import _shm_ring  # noqa: E402


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")


def write_cache(tmp, n=24):
    path = os.path.join(str(tmp), "c")
    rng = np.random.default_rng(n)
    with dscache.Writer(path, shape=(8, 6), classes=["a", "b"]) as w:
        for i in range(n):
            w.write(rng.integers(0, 256, (8, 6, 3), dtype=np.uint8), i % 2)
    return path


PREFIX = f"{_shm_ring._PREFIX}{os.getpid()}-"


def rings():
    """{worker pid: [ring file names]} of this process's DataLoader workers."""
    out = {}
    for name in os.listdir(_shm_ring._DIR):
        if name.startswith(PREFIX):
            out.setdefault(int(name[len(PREFIX):].split("-")[0]), []).append(name)
    return out


def is_my_live_child(pid):
    """pid runs (not a zombie) and this process is its parent."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z" and int(fields[1]) == os.getpid()


def test_killed_worker_ring_removed_while_running(tmp):
    """A DataLoader worker SIGKILLed mid-epoch, its iterator and DataLoader dropped, then 20 more
    DataLoaders made and run in the same process: no ring of a dead worker remains (the killed
    one's included), and every DataLoader still yields the whole epoch."""
    need_torch()
    import torch
    from dscache.torch import CacheDataset
    path = write_cache(tmp)
    assert not rings(), f"rings before the test: {rings()}"
    for kill_at in (0, 2):  # before any batch came through the worker's ring, and after
        dl = torch.utils.data.DataLoader(CacheDataset(path, batch_size=4, seed=1),
                                         batch_size=None, num_workers=2)
        it = iter(dl)
        for _ in range(kill_at):
            next(it)
        victim = it._workers[0].pid
        deadline = time.monotonic() + 30
        while victim not in rings() and time.monotonic() < deadline:  # it makes its ring first
            time.sleep(0.01)
        assert victim in rings(), f"worker {victim} made no ring: {rings()}"
        os.kill(victim, signal.SIGKILL)
        noticed = False
        try:
            while is_my_live_child(victim) and time.monotonic() < deadline:
                time.sleep(0.01)  # dying: its sockets close before it is a zombie torch sees
            for _ in it:
                pass
        except RuntimeError as e:  # torch's SIGCHLD handler: "DataLoader worker (pid N) ..."
            noticed = str(victim) in str(e)
        except (ConnectionError, EOFError):  # a batch torch's way: the dead worker's fd server
            noticed = True                      # is gone (refused, or closed mid-handshake)
        assert noticed, "the DataLoader did not notice its killed worker"
        try:  # what dropping the iterator does; the SIGCHLD handler may raise again meanwhile
            it._shutdown_workers()
        except RuntimeError:
            it._shutdown_workers()
        del it, dl
        gc.collect()
        for k in range(20):
            dl = torch.utils.data.DataLoader(CacheDataset(path, batch_size=4, seed=1),
                                             batch_size=None, num_workers=2)
            assert sum(len(b[1]) for b in dl) == 24, f"DataLoader {k}: not the whole epoch"
            del dl
        gc.collect()
        left = rings()
        assert victim not in left, f"the killed worker {victim}'s ring stays: {left[victim]}"
        dead = {pid: names for pid, names in left.items() if not is_my_live_child(pid)}
        assert not dead, f"rings of dead workers stay: {dead}"


if __name__ == "__main__":
    sys.exit(main(globals()))
