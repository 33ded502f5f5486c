#!/usr/bin/python3
"""Tests of dscache.torch: CacheDataset in a real torch DataLoader (num_workers 0, 2 and 3, fork
and spawn, persistent workers or not) yields exactly a single dscache.Loader's batches in its
order, epoch after epoch (set_epoch jumps included); its state resumes exactly, through the
plain DataLoader and through the per-worker protocol torchdata's StatefulDataLoader uses;
CacheMapDataset serves the cache's samples. SKIP without python3-torch."""
import os
import pickle
import subprocess
import sys

import numpy as np

from pyhelpers import Skip, main

import dscache  # noqa: E402
from dscache import _shm_ring  # noqa: E402


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")


def write_cache(tmp, n=103, name="c", fields=False):
    """n random 8x6 RGB samples in 3 classes; fields: a mask and a scalar per sample."""
    path = os.path.join(str(tmp), name)
    rng = np.random.default_rng(n)
    extra = {"fields": {"mask": dscache.Mask("uint8"), "count": dscache.Scalar("int64")}} \
        if fields else {}
    with dscache.Writer(path, shape=(8, 6), classes=["a", "b", "c"], shard_size=2000,
                        **extra) as w:
        for i in range(n):
            img = rng.integers(0, 256, (8, 6, 3), dtype=np.uint8)
            if fields:
                w.write(img, i % 3, mask=(img[..., 0] > 127).astype(np.uint8), count=7 * i)
            else:
                w.write(img, i % 3)
    return path


def reference(path, epoch, seed=3, **kw):
    """One epoch of a single dscache.Loader, as torch tensors (copies)."""
    loader = dscache.Loader(dscache.Cache(path), seed=seed, copy=True, **kw)
    loader.set_epoch(epoch)
    return list(loader.torch())


def assert_same(got, want, what):
    import torch
    assert len(got) == len(want), f"{what}: {len(got)} batches, want {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, dict):
            assert isinstance(g, dict) and list(g) == list(w), f"{what}: batch {k} keys"
            pairs = [(g[key], w[key]) for key in w]
        else:
            assert len(g) == len(w), f"{what}: batch {k} has {len(g)} parts"
            pairs = list(zip(g, w))
        for a, b in pairs:
            assert a.dtype == b.dtype and torch.equal(a, b), f"{what}: batch {k} differs"


def clone(batch):
    """A copy of a batch that holds nothing of it (its slot of a worker's ring is freed)."""
    if isinstance(batch, dict):
        return {k: v.clone() for k, v in batch.items()}
    return tuple(x.clone() for x in batch)


def loader_for(ds, workers, persistent=False, context=None):
    from torch.utils.data import DataLoader
    return DataLoader(ds, batch_size=None, num_workers=workers,
                      persistent_workers=persistent and workers > 0,
                      multiprocessing_context=context if workers > 0 else None)


def test_batches_equal_single_loader(tmp):
    need_torch()
    from dscache.torch import CacheDataset
    plain = write_cache(tmp)
    with_fields = write_cache(tmp, n=45, name="f", fields=True)
    cases = [  # (path, workers, options)
        (plain, 0, dict(batch_size=10)),
        (plain, 2, dict(batch_size=10)),
        (plain, 3, dict(batch_size=10, drop_last=True)),
        (plain, 2, dict(batch_size=8, shuffle=False)),
        (plain, 2, dict(batch_size=7, rank=1, world_size=2)),
        (plain, 2, dict(batch_size=7, rank=0, world_size=3, rank_tail="drop", drop_last=True)),
        (plain, 2, dict(batch_size=200)),  # one batch: worker 1 serves none
        # direct_read reaches each worker's Loader (a mapped cache: it reads as without)
        (plain, 2, dict(batch_size=10, shuffle="windowed", block=7, direct_read=True)),
        (with_fields, 2, dict(batch_size=4)),
        (with_fields, 2, dict(batch_size=4, fields=["count"],
                              transform=dscache.Transform("random_resized", 4, flip=True))),
    ]
    for path, workers, kw in cases:
        what = f"{os.path.basename(path)} workers={workers} {kw}"
        ds = CacheDataset(path, seed=3, **kw)
        dl = loader_for(ds, workers)
        want = reference(path, 0, **kw)
        assert len(ds) == len(dl) == len(want), f"{what}: len {len(ds)}, want {len(want)}"
        assert_same(list(dl), want, what)  # every batch kept: workers find slots held
        if workers:  # batches dropped as they come: the shared-memory slots are reused
            assert_same([clone(b) for b in dl], reference(path, 1, **kw), what + " epoch 1")
            assert _shm_ring._maps, f"{what}: no batch came through a shared-memory ring"
        # The Loader's own stride: the union of the offsets is the unstrided epoch, in order.
        parts = [reference(path, 0, batch_stride=3, batch_offset=o, **kw) for o in range(3)]
        merged = [parts[k % 3][k // 3] for k in range(len(want))]
        assert sum(map(len, parts)) == len(want), what
        assert_same(merged, want, what + " stride 3")


def test_epochs_persistent_and_not(tmp):
    need_torch()
    from dscache.torch import CacheDataset
    path = write_cache(tmp)
    for workers, persistent in ((0, False), (2, False), (2, True)):
        what = f"workers={workers} persistent={persistent}"
        ds = CacheDataset(path, batch_size=9, seed=3)
        dl = loader_for(ds, workers, persistent)
        # No set_epoch: each complete pass runs the next epoch.
        for e in range(3):
            assert_same(list(dl), reference(path, e, batch_size=9), f"{what} epoch {e}")
        # set_epoch jumps (back and forward) reach the (persistent) workers.
        for e in (7, 2, 2):
            ds.set_epoch(e)
            assert ds.epoch == e
            assert_same(list(dl), reference(path, e, batch_size=9), f"{what} set_epoch {e}")
        assert_same(list(dl), reference(path, 3, batch_size=9), f"{what} after set_epoch")


def _resume_case(path, context, persistent, e, n):
    """Takes n batches of epoch e, saves state_dict(batches=n), resumes in a new DataLoader."""
    from dscache.torch import CacheDataset
    what = f"{context} persistent={persistent} epoch {e} after {n}"
    ds = CacheDataset(path, batch_size=6, seed=3)
    ds.set_epoch(e)
    dl = loader_for(ds, 2, persistent, context)
    it = iter(dl)
    for _ in range(n):
        next(it)
    state = ds.state_dict(batches=n)
    del it
    # A fresh dataset (a new process would unpickle the checkpoint): state through pickle.
    state = pickle.loads(pickle.dumps(state))
    ds2 = CacheDataset(path, batch_size=6, seed=0)  # the state's seed wins
    ds2.load_state_dict(state)
    dl2 = loader_for(ds2, 2, persistent, context)
    want = reference(path, e, batch_size=6)[n:] if n < len(ds) else []
    if want:
        assert_same(list(dl2), want, what + ": rest of the epoch")
    assert_same(list(dl2), reference(path, e + 1, batch_size=6), what + ": next epoch")
    assert ds2.state_dict(batches=len(ds2))["epoch"] == e + 2


def test_resume_plain_dataloader_fork_and_spawn(tmp):
    need_torch()
    path = write_cache(tmp, n=67)  # 12 batches of 6 (the last 1 short)
    for context, persistent, e, n in (("fork", False, 0, 5), ("fork", True, 4, 8),
                                      ("fork", False, 1, 12), ("spawn", True, 2, 3),
                                      ("spawn", False, 0, 1)):
        _resume_case(path, context, persistent, e, n)


def _train_loop(path, epochs, state=None, crash_at=None):
    """docs/PYTHON.md's hand-written loop: (batches taken, the checkpoint state at crash_at)."""
    from dscache.torch import CacheDataset
    ds = CacheDataset(path, batch_size=6, seed=3, threads=1)
    dl = loader_for(ds, 2, persistent=True)
    if state is not None:
        ds.load_state_dict(state)
    taken, epoch = [], ds.epoch
    while epoch < epochs:
        for step, batch in enumerate(dl):
            taken.append(clone(batch))
            if len(taken) == crash_at:
                return taken, ds.state_dict(batches=step + 1)
        epoch += 1
    return taken, None


def test_hand_written_loop_resumes_exactly(tmp):
    need_torch()
    path = write_cache(tmp, n=67)
    whole, _ = _train_loop(path, 3)
    assert len(whole) == 36
    for crash_at in (1, 11, 12, 13, 30):
        first, state = _train_loop(path, 3, crash_at=crash_at)
        rest, _ = _train_loop(path, 3, state=state)
        assert_same(first + rest, whole, f"crash after {crash_at} batches")


class _Snapshotting:
    """What torchdata's StatefulDataLoader does in each worker with a Stateful dataset: before
    the worker's first iter(), dataset.load_state_dict(its own saved state) when resuming;
    after each batch, dataset.state_dict() as that worker's snapshot. Wraps the dataset in a
    plain IterableDataset that yields (worker id, batch, snapshot) to the main process."""

    @staticmethod
    def make(ds, states=None):
        import torch.utils.data

        class Wrap(torch.utils.data.IterableDataset):
            def __iter__(self):
                w = torch.utils.data.get_worker_info().id
                if states is not None:
                    ds.load_state_dict(states[w])
                for batch in ds:
                    yield w, batch, ds.state_dict()
        return Wrap()


def _round_robin(streams, first):
    """The order StatefulDataLoader serves per-worker streams in, from worker `first` on."""
    out, queues, w = [], [list(s) for s in streams], first
    while any(queues):
        if queues[w]:
            out.append(queues[w].pop(0))
        w = (w + 1) % len(queues)
    return out


def test_stateful_dataloader_protocol(tmp):
    need_torch()
    from torch.utils.data import DataLoader
    from dscache.torch import CacheDataset
    path = write_cache(tmp, n=67)
    for e, n in ((0, 5), (2, 4), (1, 11)):
        what = f"epoch {e} after {n}"
        ds = CacheDataset(path, batch_size=6, seed=3)
        ds.set_epoch(e)
        it = iter(DataLoader(_Snapshotting.make(ds), batch_size=None, num_workers=2))
        snapshots = [None, None]
        for _ in range(n):
            w, _, snap = next(it)
            snapshots[w] = snap
        del it
        assert all(s is not None for s in snapshots), what
        assert all(s["worker"] in (0, 1) or s["num_workers"] is None for s in snapshots)
        ds2 = CacheDataset(path, batch_size=6, seed=0)
        try:
            ds2.load_state_dict(snapshots[0])
        except dscache.InvalidArgumentError as err:
            assert "worker" in str(err), str(err)
        else:
            raise AssertionError("a worker's state loaded in the main process")
        got = list(DataLoader(_Snapshotting.make(ds2, snapshots), batch_size=None,
                              num_workers=2))
        streams = [[b for w, b, _ in got if w == k] for k in range(2)]
        rest = reference(path, e, batch_size=6)[n:]
        assert_same(_round_robin(streams, n % 2)[:len(rest)], rest, what)
        # Each worker's last snapshot is the end of its share of epoch e: a worker resumed
        # from it serves nothing more of epoch e (StatefulDataLoader asks it once more).
        last = {w: s for w, _, s in got}
        assert all(s["epoch"] == e for s in last.values()), last
        ds3 = CacheDataset(path, batch_size=6, seed=0)
        ends = [last.get(w, snapshots[w]) for w in range(2)]
        again = list(DataLoader(_Snapshotting.make(ds3, ends), batch_size=None, num_workers=2))
        assert again == [], f"{what}: {len(again)} batches after the end of the epoch"
    # num_workers=0: the dataset's state_dict() in the main process is the rank's position.
    ds = CacheDataset(path, batch_size=6, seed=3)
    it = iter(ds)
    for _ in range(4):
        next(it)
    state = ds.state_dict()
    assert (state["epoch"], state["cursor"], state["worker"]) == (0, 4, None), state
    ds3 = CacheDataset(path, batch_size=6, seed=3)
    ds3.load_state_dict(state)
    assert_same(list(ds3), reference(path, 0, batch_size=6)[4:], "num_workers=0")


def test_errors_and_import(tmp):
    need_torch()
    from dscache.torch import CacheDataset
    path = write_cache(tmp, n=30)
    missing = os.path.join(str(tmp), "nope")
    try:
        CacheDataset(missing)
    except dscache.NotFoundError as err:
        assert "nope" in str(err), str(err)
    else:
        raise AssertionError("a missing cache was accepted")
    ds = CacheDataset(path, batch_size=4, seed=1)
    other = CacheDataset(write_cache(tmp, n=31, name="other"), batch_size=4, seed=1)
    bad = [
        (lambda: ds.state_dict(batches=9), "past the epoch"),
        (lambda: ds.state_dict(), "batches=n"),
        (lambda: other.load_state_dict(ds.state_dict(batches=1)), "data"),
        (lambda: CacheDataset(path, batch_size=5).load_state_dict(ds.state_dict(batches=1)),
         "batch_size"),
        (lambda: ds.set_epoch(-1), "epoch"),
        (lambda: CacheDataset(path, rank=2, world_size=2), "rank"),
        (lambda: CacheDataset(path, direct_read="yes"), "direct_read"),
    ]
    for call, words in bad:
        try:
            call()
        except dscache.InvalidArgumentError as err:
            assert words in str(err), f"{words!r} not in {err}"
        else:
            raise AssertionError(f"accepted: {words}")
    # Picklable with its options; each process opens its own Cache.
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy) == len(ds) == 8 and copy._proc is None or copy._proc[0] == os.getpid()
    # `import dscache` never loads torch; dscache.torch's own `import torch` is torch itself.
    code = ("import sys, dscache; assert 'torch' not in sys.modules, 'torch loaded'; "
            "import dscache.torch as dt; import torch; assert dt.torch is torch; "
            "assert dt.torch.utils.data.IterableDataset is torch.utils.data.IterableDataset")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_map_dataset(tmp):
    need_torch()
    import torch
    from torch.utils.data import DataLoader
    from dscache.torch import CacheMapDataset
    path = write_cache(tmp, n=37)
    cache = dscache.Cache(path)
    ds = CacheMapDataset(path)
    assert len(ds) == 37
    image, label = ds[5]
    assert image.dtype == torch.uint8 and tuple(image.shape) == (8, 6, 3)
    assert label.dtype == torch.int64 and int(label) == cache.label(5)
    assert np.array_equal(image.numpy(), cache[5][0])
    for bad in (37, -1):
        try:
            ds[bad]
        except IndexError:
            pass
        else:
            raise AssertionError(f"index {bad} accepted")
    # Default collation in 2 forked workers: every sample once, as stored.
    dl = DataLoader(pickle.loads(pickle.dumps(ds)), batch_size=8, num_workers=2)
    images, labels = zip(*list(dl))
    images, labels = torch.cat(images), torch.cat(labels)
    want = np.stack([cache[i][0] for i in range(37)])
    assert np.array_equal(images.numpy(), want)
    assert labels.tolist() == [cache.label(i) for i in range(37)]
    # A transform applies to the image; a cache with fields gives dicts.
    flipped = CacheMapDataset(path, transform=lambda t: t.flip(1))
    assert torch.equal(flipped[3][0], ds[3][0].flip(1))
    fpath = write_cache(tmp, n=9, name="f", fields=True)
    fds = CacheMapDataset(fpath, fields=["count"])
    item = fds[4]
    assert list(item) == ["image", "label", "index", "count"], list(item)
    assert int(item["count"]) == 28 and int(item["index"]) == 4
    # the arrays every item holds may be named too: they add nothing
    named = CacheMapDataset(fpath, fields=["image", "count", "label", "index"])
    assert named.fields == ["count"] and list(named[4]) == list(item), list(named[4])
    batch = next(iter(DataLoader(CacheMapDataset(fpath), batch_size=3)))
    assert tuple(batch["mask"].shape) == (3, 8, 6) and batch["count"].tolist() == [0, 7, 14]
    try:
        CacheMapDataset(fpath, fields=["nope"])
    except dscache.InvalidArgumentError as err:
        assert "nope" in str(err) and "count" in str(err), str(err)
    else:
        raise AssertionError("an unknown field was accepted")


def test_loader_fills_shared_slots_in_place(tmp):
    """A DataLoader worker's Loader (copy=True) fills its batches straight into the slots of its
    shared-memory ring and the batch goes to the main process without a copy: run here as a
    worker runs it, the binding counts buffers allocated in slots, and each Handle is of a
    slot the Loader filled. Every batch is held to the end (a slot it holds is never refilled:
    its pixels still match), so the slots run out and the fallback (a copy, or torch's handoff)
    takes over without waiting. Then the same through a real DataLoader over 3 epochs, some
    batches held across epochs, against the single Loader."""
    need_torch()
    from dscache.torch import CacheDataset, _slots_loader, _worker_batches
    path = write_cache(tmp)
    kw = dict(batch_size=10)
    ring = _shm_ring.Ring(10 * 8 * 6 * 3, 2 + 1 + 4)
    assert ring.slot_bytes % 64 == 0 and ring.size == 64 + 7 * ring.slot_bytes
    loader = _slots_loader(dscache.Cache(path), ring, seed=3, prefetch=2, copy=True, **kw)
    held, kinds = [], []
    for epoch in range(3):
        loader.set_epoch(epoch)
        for images, labels in _worker_batches(loader, ring, in_place=True):
            kinds.append("torch" if not isinstance(images, _shm_ring.Handle) else
                         "in_place" if images.args[-1] else "copied")
            # Through pickle, as the main process gets it: a tensor over the slot.
            held.append((pickle.loads(pickle.dumps(images)), labels))
    # Every slot used once (all held), each by the Loader, whose batches went as they are (its
    # first prefetch + 1 buffers too: the ring is attached before it allocates them); the rest
    # through torch's handoff.
    in_slots, in_heap = loader._impl.slot_counts()
    assert in_slots == 7 and kinds.count("in_place") == 7, (in_slots, kinds)
    assert kinds.count("copied") == 0 and kinds[:7] == ["in_place"] * 7, kinds
    assert in_heap > 0 and kinds.count("torch") > 0, "every batch fitted: no fallback ran"
    want = [b for e in range(3) for b in reference(path, e, **kw)]
    assert_same(held, want, "in place, all held")
    # A slot whose tensor died is filled again: dropping them lets the Loader take slots again.
    del held
    loader.set_epoch(3)
    got = []
    for images, labels in _worker_batches(loader, ring, in_place=True):
        got.append(clone((pickle.loads(pickle.dumps(images)), labels)))
    assert loader._impl.slot_counts()[0] > in_slots, "freed slots were not used again"
    assert_same(got, reference(path, 3, **kw), "in place, dropped")
    # A bad ring file is a named error, never a mapping of the wrong size.
    short = os.path.join(str(tmp), "short")
    open(short, "wb").write(b"\0" * 100)
    for args, words in (((short, 64, 64, 7), ["short", "slots need"]),
                        ((short, 64, 100, 1), ["multiples of 64"]),
                        ((os.path.join(str(tmp), "none"), 64, 64, 1), ["none"])):
        try:
            loader._impl.attach_shared_slots(*args)
        except dscache.Error as e:
            assert all(w in str(e) for w in words), (str(e), words)
        else:
            raise AssertionError(f"attach_shared_slots{args} accepted")
    # A real DataLoader: 2 workers, 3 epochs; every third batch held to the end.
    for k in _shm_ring.taken:
        _shm_ring.taken[k] = 0
    ds = CacheDataset(path, seed=3, **kw)
    dl = loader_for(ds, 2, persistent=True)
    kept, want_kept, total = [], [], 0
    for e in range(3):
        want = reference(path, e, **kw)
        got = []
        for k, b in enumerate(dl):
            got.append(clone(b))
            if k % 3 == 0:
                kept.append(b)
                want_kept.append(want[k])
        total += len(got)
        assert_same(got, want, f"DataLoader epoch {e}")
    assert_same(kept, want_kept, "DataLoader batches held across epochs")
    assert _shm_ring.taken["in_place"] > 0, _shm_ring.taken
    assert total == 33 and sum(_shm_ring.taken.values()) <= total, _shm_ring.taken


def test_full_shared_memory_falls_back(tmp):
    """A /dev/shm too small for a worker's ring (a container's 64 MiB default against large
    batches): making the ring fails cleanly (allocated up front, never a SIGBUS mid-copy), leaves
    no file, and the DataLoader still yields the single Loader's batches through torch's own
    handoff. The small filesystem is a real 64 KiB tmpfs (root only)."""
    need_torch()
    import errno
    from dscache.torch import CacheDataset
    shm = os.path.join(str(tmp), "shm")
    os.mkdir(shm)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", shm],
                                           capture_output=True).returncode != 0:
        raise Skip("mounting a 64 KiB tmpfs needs root")
    saved = _shm_ring._DIR
    try:
        _shm_ring._DIR = shm
        try:
            _shm_ring.Ring(1 << 20)
            raise AssertionError("a 6 MiB ring fitted in a 64 KiB tmpfs")
        except OSError as e:
            assert e.errno == errno.ENOSPC, f"ring in a full tmpfs: {e!r}, want ENOSPC"
        assert os.listdir(shm) == [], f"a failed ring left {os.listdir(shm)}"
        path = write_cache(tmp)  # 8x6x3 samples: batch 200 needs 28.8 KB a slot, 6 slots
        kw = dict(batch_size=200)
        _shm_ring._maps.clear()
        got = list(loader_for(CacheDataset(path, seed=3, **kw), 2, context="fork"))
        assert_same(got, reference(path, 0, **kw), "workers without a ring")
        assert not _shm_ring._maps, "a batch came through a ring that could not be made"
    finally:
        _shm_ring._DIR = saved
        subprocess.run(["umount", shm], check=False)


if __name__ == "__main__":
    sys.exit(main(globals()))
