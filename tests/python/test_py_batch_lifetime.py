#!/usr/bin/python3
"""What a dscache.Loader batch is and how long it lasts (issue 22): by default every batch owns
fresh images, so list(loader) and torch tensors kept across steps hold the right pixels (a new
user found 5 of 25 right with the old zero-copy default); copy=False still yields views of the
ring, valid until the next batch, as documented; Loader.torch(pin_memory=True) on a torch
without CUDA behaves as torch 1.13's DataLoader (no pinning, no warning)."""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import Skip, main  # noqa: E402

import dscache  # noqa: E402


def write_cache(tmp, n=200, shape=(12, 10), seed=0):
    """A raw cache of n random RGB samples (every sample distinct), written with dscache.Writer."""
    rng = np.random.default_rng(seed)
    path = os.path.join(tmp, "cache")
    with dscache.Writer(path, shape=shape, classes=["a", "b", "c"]) as w:
        for i in range(n):
            w.write(rng.integers(0, 256, size=(*shape, 3), dtype=np.uint8), i % 3)
    return dscache.Cache(path)


def reference(cache):
    """Every sample as Cache[i] reads it, (n, H, W, C), and the labels."""
    images = np.stack([cache[i][0] for i in range(len(cache))])
    return images, np.array([cache[i][1] for i in range(len(cache))])


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps --bench)")


def check_kept(kept, images, labels, what):
    """Each kept (images, labels, indices) batch equals the per-sample reference."""
    for k, (x, y, i) in enumerate(kept):
        idx = np.asarray(i).astype(np.int64)
        assert np.array_equal(np.asarray(x), images[idx]), f"{what}: batch {k} pixels differ"
        assert np.array_equal(np.asarray(y), labels[idx]), f"{what}: batch {k} labels differ"


def test_default_batches_kept_in_a_list_are_right(tmp):
    cache = write_cache(tmp)
    images, labels = reference(cache)
    # (name, Loader keywords): 25 batches an epoch, more than the ring's prefetch + 1 buffers
    cases = [("workers 2", dict(workers=2, prefetch=4)), ("workers 1", dict(workers=1)),
             ("workers 0", dict(workers=0)), ("prefetch 1", dict(workers=3, prefetch=1))]
    for name, kw in cases:
        loader = dscache.Loader(cache, batch_size=8, seed=3, return_indices=True, **kw)
        assert loader.copy is True, "copy=True is the default"
        epochs = [list(loader) for _ in range(3)]  # three epochs, every batch kept
        assert [len(e) for e in epochs] == [25, 25, 25]
        for e, kept in enumerate(epochs):
            check_kept(kept, images, labels, f"{name} epoch {e}")
            shared = [k for k in range(1, len(kept)) if np.shares_memory(kept[k - 1][0],
                                                                         kept[k][0])]
            assert not shared, f"{name}: batches {shared} share memory with the one before"
            order = np.concatenate([i for _, _, i in kept])
            assert np.array_equal(order, dscache.epoch_order(200, seed=3, epoch=e))


def test_default_torch_batches_kept_in_a_list_are_right(tmp):
    need_torch()
    import torch
    cache = write_cache(tmp)
    images, labels = reference(cache)
    loader = dscache.Loader(cache, batch_size=8, seed=5, return_indices=True)
    for e in range(3):
        kept = list(loader.torch())
        assert len(kept) == 25 and all(x.dtype == torch.uint8 for x, _, _ in kept)
        check_kept([(x.numpy(), y.numpy(), i.numpy()) for x, y, i in kept], images, labels,
                   f"torch epoch {e}")
    # torch.from_numpy over the numpy batches, kept: the same
    kept = [(torch.from_numpy(x), y, i) for x, y, i in loader]
    check_kept([(x.numpy(), y, i) for x, y, i in kept], images, labels, "from_numpy")


def test_copy_false_views_live_until_the_next_batch(tmp):
    cache = write_cache(tmp)
    images, labels = reference(cache)
    prefetch = 2
    loader = dscache.Loader(cache, batch_size=8, seed=7, workers=2, prefetch=prefetch,
                            copy=False, return_indices=True)
    # used before the next batch is taken, as documented: right every time
    for x, y, i in loader:
        assert not x.flags.owndata, "copy=False must yield views of the ring"
        check_kept([(x, y, i)], images, labels, "copy=False, used at once")
    # kept across batches: the ring's prefetch + 1 buffers are reused, the labels are copies
    kept = list(loader)
    assert len(kept) == 25
    slots = prefetch + 1
    for k in range(len(kept) - slots):
        assert np.shares_memory(kept[k][0], kept[k + slots][0]), f"batch {k}: not the ring"
        assert not np.shares_memory(kept[k][0], kept[k + 1][0])
    check_kept([(x.copy(), y, i) for x, y, i in kept[-slots:]], images, labels, "last batches")
    stale = sum(not np.array_equal(x, images[i.astype(np.int64)]) for x, _, i in kept)
    assert stale >= len(kept) - slots, f"only {stale} views were recycled"
    check_kept([(images[i.astype(np.int64)], y, i) for _, y, i in kept], images, labels,
               "labels of kept views")


def test_pin_memory_without_cuda_is_ignored_like_torch(tmp):
    need_torch()
    import torch
    if torch.cuda.is_available():
        raise Skip("this torch has CUDA: the CPU-only behaviour cannot be seen here")
    cache = write_cache(tmp, n=40)
    images, labels = reference(cache)
    # torch 1.13's DataLoader: pin_memory and torch.cuda.is_available(), silently
    tl = torch.utils.data.DataLoader(list(range(4)), batch_size=2, pin_memory=True)
    with warnings.catch_warnings(record=True) as torch_warned:
        warnings.simplefilter("always")
        torch_batches = list(tl)
    assert not any(b.is_pinned() for b in torch_batches)
    loader = dscache.Loader(cache, batch_size=8, seed=2, return_indices=True)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        kept = list(loader.torch(pin_memory=True))
    if torch.__version__.startswith("1."):  # 1.13 says nothing; later versions warn
        assert not torch_warned and not warned, [str(w.message) for w in warned]
    assert len(kept) == 5 and not any(t.is_pinned() for b in kept for t in b)
    check_kept([(x.numpy(), y.numpy(), i.numpy()) for x, y, i in kept], images, labels,
               "pin_memory=True on CPU")


if __name__ == "__main__":
    sys.exit(main(globals()))
