#!/usr/bin/python3
"""Elastic resume from Python: a state_dict() saved by ranks of one world size resumes on ranks
of another (dscache.Loader and dscache.torch.CacheDataset with DataLoader workers) as long as
the global batch (batch_size x world_size) is kept: the rest of the epoch is exactly the samples
not yet taken, in the uninterrupted order (the pad rule aside). Version-2 states (no "sample")
convert from their own geometry; a global cursor inside a global batch is refused by number."""
import json
import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import Skip, main  # noqa: E402

import dscache  # noqa: E402

N = 53  # samples: no world size below divides it


def write_cache(tmp):
    """N random 6x5 RGB samples in 3 classes, with a scalar field (so batches carry "index")."""
    path = os.path.join(str(tmp), "c")
    rng = np.random.default_rng(7)
    with dscache.Writer(path, shape=(6, 5), classes=["a", "b", "c"], shard_size=800,
                        fields={"n": dscache.Scalar("int64")}) as w:
        for i in range(N):
            w.write(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8), i % 3, n=i)
    return path


def take(batches, first_batch, bs, world, rank, served, limit=None):
    """Records rank `rank`'s batches (its batch first_batch, first_batch + 1, ...) by global
    position: local position k is global rank + k x world. Returns the batches taken."""
    taken = 0
    for b in batches:
        for t, idx in enumerate(np.asarray(b["index"]).tolist()):
            pos = rank + ((first_batch + taken) * bs + t) * world
            assert pos not in served, f"position {pos} served twice"
            served[pos] = idx
        taken += 1
        if taken == limit:
            break
    return taken


def check_epoch(served, order, end):
    """Positions 0..end-1 hold the uninterrupted order; a position >= N (pad) repeats the
    order's start."""
    assert sorted(served) == list(range(end)), f"served positions {sorted(served)}"
    for p in range(end):
        assert served[p] == order[p if p < N else (p - N) % N], f"position {p}"


# (world_size, batch_size, batches each rank takes; None = the rest): global batch 12 throughout
STAGES = [(4, 3, 2), (2, 6, 1), (1, 12, 1), (3, 4, None)]


def test_loader_resumes_on_other_world_sizes(tmp):
    path = write_cache(tmp)
    cache = dscache.Cache(path)
    order = dscache.epoch_order(N, seed=9, epoch=4).tolist()
    for old_version in (False, True):
        served, state = {}, None
        for world, bs, limit in STAGES:
            states = []
            for rank in range(world):
                loader = dscache.Loader(cache, batch_size=bs, rank=rank, world_size=world,
                                        seed=9 if state is None else 0,  # the state's wins
                                        workers=rank % 2 * 2, prefetch=2)
                if state is None:
                    loader.set_epoch(4)
                else:
                    loader.load_state_dict(state)
                first = loader.state_dict()["cursor"]
                take(loader, first, bs, world, rank, served, limit)
                if limit is not None:
                    states.append(json.loads(json.dumps(loader.state_dict())))
            if limit is None:
                break
            samples = {s["sample"] for s in states}
            assert len(samples) == 1, f"ranks disagree on the global cursor: {samples}"
            assert states[0]["version"] == 3 and states[0]["epoch_samples"] == N
            assert states[0]["sample"] == len(served), (states[0]["sample"], len(served))
            state = states[0]
            if old_version:  # a version-2 state: the cursor converts from its own geometry
                state = {k: v for k, v in state.items() if k not in ("sample", "epoch_samples")}
                state["version"] = 2
        check_epoch(served, order, 54)  # W = 3 pads 53 to 54 positions
    # The state at 24 samples (W = 4, 2 batches of 3) on 1 rank of 5: inside a global batch.
    loader = dscache.Loader(cache, batch_size=3, rank=0, world_size=4, seed=9)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["sample"] == 24
    other = dscache.Loader(cache, batch_size=5, rank=0, world_size=1)
    try:
        other.load_state_dict(state)
        raise AssertionError("a cursor inside a global batch was accepted")
    except dscache.InvalidArgumentError as e:
        assert "position.sample 24 is not a multiple of batch_size 5 x world_size 1 = 5" \
            in str(e), str(e)
    try:
        dscache.Loader(cache, batch_size=12, drop_last=True).load_state_dict(state)
        raise AssertionError("a state with another drop_last was accepted")
    except dscache.InvalidArgumentError as e:
        assert "drop_last" in str(e), str(e)
    # Same geometry: the cursor as saved (exact resume), on any rank.
    same = dscache.Loader(cache, batch_size=3, rank=2, world_size=4)
    same.load_state_dict(state)
    assert same.state_dict()["cursor"] == 2


def test_cache_dataset_resumes_on_other_world_sizes(tmp):
    try:
        import torch  # noqa: F401
        from torch.utils.data import DataLoader
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")
    from dscache.torch import CacheDataset
    path = write_cache(tmp)
    order = dscache.epoch_order(N, seed=9, epoch=1).tolist()
    served, state = {}, None
    for world, bs, limit in STAGES:
        states = []
        for rank in range(world):
            ds = CacheDataset(path, batch_size=bs, rank=rank, world_size=world, seed=9,
                              threads=1, prefetch=2)
            if state is None:
                ds.set_epoch(1)
                first = 0
            else:
                ds.load_state_dict(pickle.loads(pickle.dumps(state)))
                first = ds.state_dict(batches=0)["cursor"]
            workers = (rank + world) % 3  # 0, 1 or 2 DataLoader workers
            dl = DataLoader(ds, batch_size=None, num_workers=workers)
            n = take(dl, first, bs, world, rank, served, limit)
            if limit is not None:
                states.append(ds.state_dict(batches=n))
        if limit is None:
            break
        assert len({s["sample"] for s in states}) == 1, [s["sample"] for s in states]
        assert states[0]["sample"] == len(served)
        state = states[0]
    check_epoch(served, order, 54)
    # A version-1 state (no "sample") of 2 ranks x 6 after one batch: 12 samples in.
    ds = CacheDataset(path, batch_size=4, rank=1, world_size=3, seed=9)
    old = dict(version=1, seed=9, epoch=1, cursor=1, worker=None, num_workers=None, served=0,
               batch_size=6, drop_last=False, rank=0, world_size=2,
               data=dscache.Cache(path)._identity())
    ds.load_state_dict(old)
    assert ds.state_dict(batches=0)["cursor"] == 1  # 12 / (4 x 3)
    ds = CacheDataset(path, batch_size=5, rank=0, world_size=1, seed=9)
    try:
        ds.load_state_dict(old)
        raise AssertionError("a cursor inside a global batch was accepted")
    except dscache.InvalidArgumentError as e:
        assert "position.sample 12 is not a multiple of batch_size 5 x world_size 1" in str(e)


if __name__ == "__main__":
    sys.exit(main(globals()))
