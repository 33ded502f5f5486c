#!/usr/bin/python3
"""Resuming a dscache.Loader over a dscache.Mixture: a process SIGKILLed at a random batch
resumes from its last state_dict() in a new process with the uninterrupted run's batches (bytes);
a state of 2 ranks resumes on 1 with each remaining sample once; a state saved under other
weights is refused unless allow_new_weights, and then the rest of the epoch has the new
per-source counts (largest remainder computed here), each source's stream going on without a
repeat within a pass."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import main  # noqa: E402
from test_py_mixture import largest_remainder, q32, write_cache  # noqa: E402

import dscache  # noqa: E402

# The child: iterates a mixture Loader through epoch END, logging each batch's digest ("step
# digest" lines) and saving state_dict() (with "step") every K batches; with a state file at
# start it resumes from it.
CHILD = r"""
import hashlib, json, os, sys, time
import dscache
a, b, batching, state_path, log_path, k, end = sys.argv[1:8]
k, end = int(k), int(end)
m = dscache.Mixture([dscache.Cache(a), dscache.Cache(b)], weights=[0.7, 0.3], names=["a", "b"],
                    batching=batching, global_batch=8)
loader = dscache.Loader(m, batch_size=8, seed=11, workers=2, prefetch=3)
step = 0
if os.path.exists(state_path):
    state = json.load(open(state_path))
    loader.load_state_dict(state)
    step = state["step"]
log = open(log_path, "a")
while loader.epoch < end:
    for batch in loader:
        h = hashlib.sha256()
        for key in ("source", "index", "label", "image"):
            h.update(key.encode() + batch[key].tobytes())
        log.write(f"{step} {h.hexdigest()}\n")
        log.flush()
        step += 1
        if step % k == 0:
            state = dict(loader.state_dict(), step=step)
            with open(state_path + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(state_path + ".tmp", state_path)
        time.sleep(0.02)  # the parent kills it while it runs
"""


def run_child(tmp, a, b, batching, state, log, k=4, end=3, kill_after=None):
    """Runs CHILD; with kill_after, SIGKILLs it once its log holds that many batches."""
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", CHILD, a, b, batching, state, log, str(k),
                          str(end)], env=env, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            if os.path.exists(log) and len(open(log).read().splitlines()) >= kill_after:
                break
            time.sleep(0.002)
        assert p.poll() is None, f"the child ended before batch {kill_after}: {p.stderr.read()}"
        p.send_signal(signal.SIGKILL)
        assert p.wait(60) == -signal.SIGKILL
        return
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err


def digests(log):
    return [line.split() for line in open(log).read().splitlines()]


def test_mixture_kill_and_resume_is_bit_exact(tmp):
    a = write_cache(tmp, "a", 37, ["cat", "dog", "emu"], 1)
    b = write_cache(tmp, "b", 23, ["dog", "fox"], 2)
    rng = random.Random(39)
    for batching in ("random", "stratified"):
        d = os.path.join(str(tmp), batching)
        os.makedirs(d)
        ref_log = os.path.join(d, "ref.log")
        run_child(tmp, a, b, batching, os.path.join(d, "none.json"), ref_log, k=10**9)
        ref = digests(ref_log)
        assert len(ref) == 3 * 8 and [int(s) for s, _ in ref] == list(range(24))
        # A state every 4 batches, 8 an epoch: the first kill resumes from the state taken
        # after an epoch's last batch (the next epoch's start), the second from anywhere.
        for trial, kill_at in enumerate((rng.randrange(9, 13), rng.randrange(5, 20))):
            state, log = os.path.join(d, f"s{trial}.json"), os.path.join(d, f"k{trial}.log")
            run_child(tmp, a, b, batching, state, log, kill_after=kill_at)
            killed = digests(log)
            assert killed == ref[:len(killed)], f"{batching}: the killed run's batches differ"
            saved = json.load(open(state))["step"]
            assert saved % 4 == 0 and saved <= len(killed), (saved, len(killed))
            rest_log = os.path.join(d, f"r{trial}.log")
            run_child(tmp, a, b, batching, state, rest_log)
            rest = digests(rest_log)
            assert rest == ref[saved:], f"{batching}: killed at {kill_at}, resumed from " \
                f"{saved}: the batches differ from the uninterrupted run's"


def positions(loader, rank, world, bs, first, limit=None):
    """{global position: (source, index)} of `limit` batches of rank `rank` (None: all)."""
    out = {}
    for j, batch in enumerate(loader):
        for t, si in enumerate(zip(batch["source"].tolist(), batch["index"].tolist())):
            out[rank + ((first + j) * bs + t) * world] = si
        if j + 1 == limit:
            break
    return out


def test_mixture_resumes_on_another_world_size(tmp):
    a = dscache.Cache(write_cache(tmp, "a", 37, ["cat", "dog", "emu"], 1))
    b = dscache.Cache(write_cache(tmp, "b", 23, ["dog", "fox"], 2))
    for batching in ("random", "stratified"):
        m = dscache.Mixture([a, b], weights=[0.6, 0.4], epoch_samples=64, batching=batching,
                            global_batch=8)
        whole = positions(dscache.Loader(m, batch_size=8, seed=7, workers=2), 0, 1, 8, 0)
        assert sorted(whole) == list(range(64))
        # A state taken before any batch: the start of the epoch set.
        fresh = dscache.Loader(m, batch_size=8, seed=7, workers=0)
        fresh.set_epoch(1)
        start = json.loads(json.dumps(fresh.state_dict()))
        assert (start["epoch"], start["sample"], start["mix"]["segment"]) == (1, 0, 0)
        other = dscache.Loader(m, batch_size=8, workers=1)
        other.load_state_dict(start)
        assert positions(other, 0, 1, 8, 0) == positions(fresh, 0, 1, 8, 0) != whole
        served, states = {}, []
        for rank in range(2):
            loader = dscache.Loader(m, batch_size=4, rank=rank, world_size=2, seed=7,
                                    workers=rank * 2)
            served.update(positions(loader, rank, 2, 4, 0, limit=3))
            states.append(json.loads(json.dumps(loader.state_dict())))
        assert states[0]["sample"] == states[1]["sample"] == 24, [s["sample"] for s in states]
        assert states[0]["mix"] == states[1]["mix"]
        taken = [s["taken"] for s in states[0]["mix"]["sources"]]
        want = np.bincount([whole[p][0] for p in range(24)], minlength=2).tolist()
        assert taken == want, (taken, want)
        one = dscache.Loader(m, batch_size=8, world_size=1, seed=0, workers=1)
        one.load_state_dict(states[1])
        rest = positions(one, 0, 1, 8, 3)
        assert not set(rest) & set(served) and sorted(served) + sorted(rest) == list(range(64))
        assert {p: whole[p] for p in rest} == rest and {p: whole[p] for p in served} == served
        assert one.state_dict()["epoch"] == 1 and one.state_dict()["sample"] == 0


def test_mixture_new_weights_refused_then_continued(tmp):
    a = dscache.Cache(write_cache(tmp, "a", 37, ["cat", "dog", "emu"], 1))
    b = dscache.Cache(write_cache(tmp, "b", 23, ["dog", "fox"], 2))
    old = dscache.Mixture([a, b], weights=[0.7, 0.3], names=["a", "b"])
    new = dscache.Mixture([a, b], weights=[0.2, 0.8], names=["a", "b"])
    loader = dscache.Loader(old, batch_size=10, seed=3, workers=1)
    it = iter(loader)
    first = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["sample"] == 30 and state["mix"]["segment"] == 0
    assert [s["weight"] for s in state["mix"]["sources"]] == [0.7, 0.3]
    moved = dscache.Loader(new, batch_size=10, seed=3, workers=1)
    try:
        moved.load_state_dict(state)
        raise AssertionError("a state saved under other weights was accepted")
    except dscache.InvalidArgumentError as e:
        assert "0.7" in str(e) and "0.2" in str(e), str(e)
    moved.load_state_dict(state, allow_new_weights=True)
    rest = []
    for j, batch in enumerate(moved):
        rest.append(batch)
        if j == 0:  # a state inside the new segment resumes exactly, without the flag
            inside = json.loads(json.dumps(moved.state_dict()))
            assert inside["mix"]["segment"] == 1 and inside["mix"]["segment_start"] == 30
    src = np.concatenate([np.asarray(x["source"]) for x in rest])
    idx = np.concatenate([np.asarray(x["index"]) for x in rest])
    assert np.bincount(src, minlength=2).tolist() == largest_remainder(30, [q32(0.2), q32(0.8)])
    # Each source's stream goes on where the old weights left it: the epoch's draws, in
    # position order, repeat nothing within a pass over the source.
    for k, n in enumerate((37, 23)):
        drawn = [int(i) for x in first for s, i in zip(x["source"], x["index"]) if s == k]
        drawn += idx[src == k].tolist()
        for p in range(0, len(drawn), n):
            chunk = drawn[p:p + n]
            assert len(set(chunk)) == len(chunk), f"source {k} repeats within a pass"
    again = dscache.Loader(new, batch_size=10, seed=0, workers=2)
    again.load_state_dict(inside)
    resumed = list(again)
    assert len(resumed) == len(rest) - 1
    for x, y in zip(rest[1:], resumed):
        for key in ("source", "index", "image"):
            assert np.array_equal(x[key], y[key]), f"resumed inside the new segment: {key}"
    # The next epoch is the new weights' whole epoch.
    assert moved.epoch == 1 and again.epoch == 1
    nxt = np.concatenate([np.asarray(x["source"]) for x in moved])
    assert np.bincount(nxt, minlength=2).tolist() == new.counts == \
        largest_remainder(60, [q32(0.2), q32(0.8)])


def test_mixture_dataloader_worker_states(tmp):
    """torchdata StatefulDataLoader's protocol over a mixture (test_py_torch's _Snapshotting):
    each DataLoader worker's own state resumes that worker, the rest equal to the Loader's."""
    from test_py_torch import _round_robin, _Snapshotting, need_torch
    need_torch()
    from torch.utils.data import DataLoader
    from dscache.torch import CacheDataset
    a = dscache.Cache(write_cache(tmp, "a", 37, ["cat", "dog", "emu"], 1))
    b = dscache.Cache(write_cache(tmp, "b", 23, ["dog", "fox"], 2))
    m = dscache.Mixture([a, b], weights=[0.3, 0.7], epoch_samples=70, batching="stratified",
                        global_batch=6)
    loader = dscache.Loader(m, batch_size=6, seed=3)
    loader.set_epoch(1)
    ref = [(x["source"].tolist(), x["index"].tolist()) for x in loader]
    for n in (3, 6):
        ds = CacheDataset(m, batch_size=6, seed=3, threads=1)
        ds.set_epoch(1)
        it = iter(DataLoader(_Snapshotting.make(ds), batch_size=None, num_workers=2))
        snapshots = [None, None]
        for _ in range(n):
            w, _, snap = next(it)
            snapshots[w] = snap
        del it
        assert all(s is not None and s["worker"] == w for w, s in enumerate(snapshots))
        ds2 = CacheDataset(m, batch_size=6, seed=0, threads=1)
        got = list(DataLoader(_Snapshotting.make(ds2, snapshots), batch_size=None,
                              num_workers=2))
        streams = [[(x["source"].tolist(), x["index"].tolist()) for w, x, _ in got if w == k]
                   for k in range(2)]
        assert _round_robin(streams, n % 2) == ref[n:], f"after {n} batches"


if __name__ == "__main__":
    sys.exit(main(globals()))
