#!/usr/bin/python3
"""dscache.Loader from Python against the C++ Loader (tests/python/loader_dump.cpp): the same
batches for the same (seed, epoch) and options, exact resume from state_dict(), batch buffers
that outlive the Loader while a view holds them (copy=False), copy=True, workers=0, torch
tensors, and 2-rank sharding
with the rank and world size taken from torch.distributed."""
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import Skip, assert_same_batches, build_cache, cpp_batches, main  # noqa: E402

import dscache  # noqa: E402

# [name, dscache.Loader keywords, loader_dump keywords]
CASES = [
    ["global", dict(shuffle=True), dict(shuffle="global")],
    ["none", dict(shuffle=False), dict(shuffle="none")],
    ["windowed", dict(shuffle="windowed", block=7, window_blocks=2), dict(shuffle="windowed")],
    ["rank1of3_drop_last", dict(rank=1, world_size=3, drop_last=True),
     dict(rank=1, world=3, drop_last=True)],
    ["random_crop_flip", dict(transform=dscache.Transform("random_resized", (10, 8), flip=True)),
     dict(crop="random", h=10, w=8, flip=True)],
    ["center_crop", dict(transform=dscache.Transform("center", 6)), dict(crop="center", h=6, w=6)],
]


def py_batches(loader):
    return [(im.copy(), lab, idx) for im, lab, idx in loader]


def test_same_batches_as_cpp(tmp):
    d = build_cache(tmp)
    cache = dscache.Cache(d)
    for name, py_kw, cpp_kw in CASES:
        for seed, epoch in ((0, 0), (42, 3)):
            want = cpp_batches(d, os.path.join(tmp, "ref"), seed=seed, epoch=epoch, batch=8,
                               **cpp_kw)
            loader = dscache.Loader(cache, batch_size=8, seed=seed, workers=3, prefetch=2,
                                    return_indices=True, **py_kw)
            loader.set_epoch(epoch)
            got = py_batches(loader)
            assert_same_batches(got, want, f"{name} seed {seed} epoch {epoch}")
            order = np.concatenate([b[2] for b in got])
            kw = {k: v for k, v in py_kw.items() if k in ("shuffle", "rank", "world_size",
                                                          "block", "window_blocks")}
            ref = dscache.epoch_order(len(cache), seed=seed, epoch=epoch, **kw)
            assert np.array_equal(order, ref[:len(order)]), f"{name}: epoch_order differs"
            assert len(loader) == len(want)


def test_epochs_advance_and_set_epoch(tmp):
    d = build_cache(tmp)
    loader = dscache.Loader(dscache.Cache(d), batch_size=16, seed=5, return_indices=True)
    e0 = np.concatenate([i for _, _, i in loader])
    e1 = np.concatenate([i for _, _, i in loader])
    assert loader.epoch == 2
    assert np.array_equal(e0, dscache.epoch_order(69, seed=5, epoch=0))
    assert np.array_equal(e1, dscache.epoch_order(69, seed=5, epoch=1))
    loader.set_epoch(0)
    assert np.array_equal(np.concatenate([i for _, _, i in loader]), e0)
    # an abandoned iteration does not advance the epoch; a new iter() restarts it
    it = iter(loader)
    next(it)
    assert np.array_equal(np.concatenate([i for _, _, i in loader]), e1)


def test_state_dict_resume(tmp):
    d = build_cache(tmp)
    cache = dscache.Cache(d)
    kw = dict(batch_size=8, seed=11, return_indices=True,
              transform=dscache.Transform("random_resized", 8, flip=True))
    full = dscache.Loader(cache, **kw)
    uninterrupted = [py_batches(full) for _ in range(3)]  # epochs 0, 1, 2
    flat = [b for ep in uninterrupted for b in ep]
    per_epoch = len(uninterrupted[0])
    for stop in (0, 1, 5, per_epoch - 1, per_epoch, per_epoch + 3):
        a = dscache.Loader(cache, workers=1, prefetch=1, **kw)
        taken = []
        while len(taken) < stop:
            for b in a:
                taken.append((b[0].copy(), b[1], b[2]))
                if len(taken) == stop:
                    break
        state = a.state_dict()
        import json
        state = json.loads(json.dumps(state))  # survives a checkpoint as plain data
        b = dscache.Loader(cache, workers=3, prefetch=4, **kw)  # other workers/prefetch
        b.load_state_dict(state)
        rest = []
        while len(taken) + len(rest) < len(flat):
            rest.extend(py_batches(b))
        assert_same_batches(taken + rest, flat, f"resume after {stop} batches")
    a = dscache.Loader(cache, **kw)
    next(iter(a))  # 8 samples in: inside a global batch of 3 (another batch size resumes at
    try:           # its global cursor when that is a multiple: tests/python/test_py_elastic.py)
        dscache.Loader(cache, **dict(kw, batch_size=3)).load_state_dict(a.state_dict())
        raise AssertionError("a state inside a global batch was accepted")
    except dscache.InvalidArgumentError as e:
        assert "batch_size" in str(e)


def test_views_keep_buffers_alive(tmp):
    d = build_cache(tmp, size="48x40")  # 5760 B a sample: 64-sample batches of 369 KB
    cache = dscache.Cache(d)
    loader = dscache.Loader(cache, batch_size=64, seed=1, workers=2, prefetch=2, copy=False)
    it = iter(loader)
    view, _ = next(it)
    assert not view.flags.owndata
    snapshot = view.copy()
    del it, loader
    gc.collect()
    churn = [np.full(view.nbytes, 0xAB, dtype=np.uint8) for _ in range(8)]
    assert np.array_equal(view, snapshot), "a batch view's memory was freed or reused"
    del churn
    # copy=True: batches kept in a list stay what they were
    kept = list(dscache.Loader(cache, batch_size=16, seed=2, copy=True, return_indices=True))
    want = cpp_batches(d, os.path.join(tmp, "ref"), seed=2, batch=16)
    assert_same_batches(kept, want, "copy=True batches kept in a list")
    assert not any(np.shares_memory(a[0], b[0]) for a in kept for b in kept if a is not b)


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")


def test_torch_tensors(tmp):
    need_torch()
    import torch
    d = build_cache(tmp)
    loader = dscache.Loader(dscache.Cache(d), batch_size=10, seed=4, return_indices=True)
    want = py_batches(loader)
    loader.set_epoch(0)
    got = list(loader.torch())  # fresh tensors (copy=True): all of them kept
    assert len(got) == len(want)
    for (x, y, i), (wx, wy, wi) in zip(got, want):
        assert x.dtype == torch.uint8 and y.dtype == torch.int64 and x.shape == wx.shape
        assert i.dtype == torch.int64 and torch.equal(x, torch.from_numpy(wx))
        assert np.array_equal(y.numpy(), wy) and np.array_equal(i.numpy(), wi.astype(np.int64))
    loader.set_epoch(0)
    for (x, y, i), (wx, _, _) in zip(loader.torch(), want):
        assert torch.equal(x, torch.from_numpy(wx)), "tensor differs from the numpy batch"


def test_workers_zero_same_batches_and_resume(tmp):
    """workers=0 fills each batch in the calling thread: the same batches as the C++ Loader
    with workers, the same state_dict positions, resumable either way."""
    d = build_cache(tmp)
    cache = dscache.Cache(d)
    kw = dict(batch_size=8, seed=13, return_indices=True,
              transform=dscache.Transform("random_resized", 8, flip=True))
    want = cpp_batches(d, os.path.join(tmp, "ref"), seed=13, epoch=1, batch=8, workers=2,
                       crop="random", h=8, w=8, flip=True)
    zero = dscache.Loader(cache, workers=0, **kw)
    zero.set_epoch(1)
    assert_same_batches(py_batches(zero), want, "workers=0 vs the C++ Loader's workers=2")
    threaded = dscache.Loader(cache, workers=2, **kw)
    epochs = [py_batches(threaded) for _ in range(2)]
    # (stopped by, resumed by, after how many batches): a position moves between them
    for a_workers, b_workers, stop in ((0, 3, 4), (2, 0, 5), (0, 0, 8)):
        a = dscache.Loader(cache, workers=a_workers, **kw)
        taken = []
        for b in a:
            taken.append((b[0].copy(), b[1], b[2]))
            if len(taken) == stop:
                break
        b = dscache.Loader(cache, workers=b_workers, **kw)
        b.load_state_dict(a.state_dict())
        rest = py_batches(b) + py_batches(b)
        assert_same_batches(taken + rest, epochs[0] + epochs[1],
                            f"workers {a_workers} -> {b_workers} after {stop}")
    zero.set_epoch(0)
    assert zero.wait_seconds() >= 0 and len(py_batches(zero)) == len(epochs[0])
    assert zero.wait_seconds() > 0, "workers=0: filling is the consumer's wait"


def test_gil_released_while_waiting(tmp):
    d = build_cache(tmp)
    stop = []
    ticks = [0]

    def spin():
        while not stop:
            ticks[0] += 1
            time.sleep(0.0005)

    def slow_decode(i):
        time.sleep(0.002)
        return np.zeros((4, 4, 1), dtype=np.uint8)

    lazy = dscache.LazyCache(os.path.join(tmp, "slow.bin"), 64, (4, 4, 1), [0] * 64, slow_decode)
    t = threading.Thread(target=spin)
    t.start()
    try:
        n = sum(len(y) for _, y in dscache.Loader(lazy, batch_size=8, workers=2))
    finally:
        stop.append(1)
        t.join()
    assert n == 64 and ticks[0] > 10, f"the spinning thread ran {ticks[0]} times"


def test_second_thread_refused(tmp):
    def slow_decode(i):
        time.sleep(0.05)
        return np.zeros((4, 4, 1), dtype=np.uint8)

    lazy = dscache.LazyCache(os.path.join(tmp, "slow.bin"), 16, (4, 4, 1), [0] * 16, slow_decode)
    loader = dscache.Loader(lazy, batch_size=8, workers=1, prefetch=1)
    got = []
    t = threading.Thread(target=lambda: got.append(sum(len(y) for _, y in loader)))
    t.start()
    time.sleep(0.1)  # the thread now waits in next() without the GIL (a batch takes 0.4 s)
    try:
        iter(loader)
        raise AssertionError("a second thread entered the Loader")
    except dscache.InvalidArgumentError as e:
        assert "two threads" in str(e)
    finally:
        t.join()
    assert got == [16], f"the first thread's epoch was disturbed: {got}"


def o_direct_works(folder):
    """Whether files in `folder` open with O_DIRECT (tmpfs may refuse: the Loader then reads
    through the page cache, whatever direct_read says)."""
    probe = os.path.join(folder, "o_direct_probe")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def test_direct_read(tmp):
    d = build_cache(tmp)  # 20 KiB shards: windows span several files
    direct_ok = o_direct_works(d)
    cache = dscache.Cache(d, memory="pread")
    kw = dict(batch_size=8, seed=3, shuffle="windowed", block=7, window_blocks=2,
              return_indices=True)
    off = dscache.Loader(cache, direct_read=False, **kw)
    want = py_batches(off)
    assert off.reads_direct is False
    assert off.direct_read_reason == "off: direct_read off", off.direct_read_reason
    for value in (True, "on", np.True_):
        on = dscache.Loader(cache, direct_read=value, **kw)
        assert on.reads_direct is False, "reads_direct before the first iteration"
        got, it = [], iter(on)
        for im, lab, idx in it:
            assert on.reads_direct is direct_ok, (value, on.direct_read_reason)
            got.append((im.copy(), lab, idx))
        assert len(got) == len(want) > 1
        for k, ((a, la, ia), (b, lb, ib)) in enumerate(zip(got, want)):
            assert np.array_equal(ia, ib) and np.array_equal(la, lb), f"batch {k}: other samples"
            assert np.array_equal(a, b), f"direct_read={value!r}: batch {k} images differ"
        assert on.direct_read_reason.startswith("on: direct_read on"), on.direct_read_reason
    auto = dscache.Loader(cache, **kw)  # the default: a cache of a few KiB fits in memory
    assert auto.direct_read_reason.startswith("auto: cache "), auto.direct_read_reason
    assert "fits in" in auto.direct_read_reason, auto.direct_read_reason
    os.environ["DSCACHE_DIRECT_READ_BUDGET_BYTES"] = "1"  # the test hook: nothing fits
    try:
        tiny = dscache.Loader(cache, direct_read="auto", **kw)
    finally:
        del os.environ["DSCACHE_DIRECT_READ_BUDGET_BYTES"]
    assert " > 1 B available" in tiny.direct_read_reason, tiny.direct_read_reason
    got = py_batches(tiny)
    assert tiny.reads_direct is direct_ok, tiny.direct_read_reason
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(got, want)) and len(got) == len(want)
    mapped = dscache.Loader(dscache.Cache(d, memory="page-cache"), direct_read=True, **kw)
    py_batches(mapped)
    assert mapped.reads_direct is False and "not applicable" in mapped.direct_read_reason
    for bad in ("yes", "Auto", 1, None, 0.5):
        try:
            dscache.Loader(cache, direct_read=bad, **kw)
        except ValueError as e:  # dscache.InvalidArgumentError
            assert "direct_read" in str(e) and repr(bad) in str(e), str(e)
        else:
            raise AssertionError(f"direct_read={bad!r} accepted")

RANK_SCRIPT = r"""
import sys, numpy as np, torch.distributed as dist
import dscache
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=int(sys.argv[3]),
                        world_size=2)
loader = dscache.Loader(dscache.Cache(sys.argv[1]), batch_size=8, seed=9, return_indices=True,
                        rank_tail="drop")
assert (loader.rank, loader.world_size) == (dist.get_rank(), 2), (loader.rank, loader.world_size)
idx = np.concatenate([i for _, _, i in loader])
np.save(sys.argv[4], idx)
dist.barrier()
dist.destroy_process_group()
"""


def test_two_ranks_from_torch_distributed(tmp):
    need_torch()
    d = build_cache(tmp, per_class=24)  # 72 samples: 36 per rank
    script = os.path.join(tmp, "rank.py")
    with open(script, "w") as f:
        f.write(RANK_SCRIPT)
    store = os.path.join(tmp, "store")
    procs = [subprocess.Popen([sys.executable, script, d, store, str(r),
                               os.path.join(tmp, f"r{r}.npy")]) for r in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0, "a rank failed"
    parts = [np.load(os.path.join(tmp, f"r{r}.npy")) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == 36
    both = np.concatenate(parts)
    assert sorted(both.tolist()) == list(range(72)), "each sample exactly once over 2 ranks"
    for r in range(2):
        assert np.array_equal(parts[r], dscache.epoch_order(72, seed=9, rank=r, world_size=2,
                                                            rank_tail="drop"))


if __name__ == "__main__":
    sys.exit(main(globals()))
