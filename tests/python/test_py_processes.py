#!/usr/bin/python3
"""dscache objects crossing process boundaries (issue 22): a Cache pickles as its path and
options and reopens in a spawn/forkserver child, which reads the same pixels; a cache changed
on disk in between is an error on unpickle; a LazyCache pickles when its decode function does,
else a TypeError says why; a Loader refuses to pickle. Real `multiprocessing` spawn processes."""
import multiprocessing
import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import Skip, main  # noqa: E402

import dscache  # noqa: E402

SHAPE = (12, 10, 3)


def write_cache(path, n=30, seed=0):
    rng = np.random.default_rng(seed)
    with dscache.Writer(path, shape=SHAPE[:2], classes=["a", "b"], force=True) as w:
        for i in range(n):
            w.write(rng.integers(0, 256, size=SHAPE, dtype=np.uint8), i % 2)
    return dscache.Cache(path)


def read_samples(source, indices):
    """In the child: the samples and labels, as (n, H, W, C) and (n,) arrays."""
    got = [source[int(i)] for i in indices]
    return np.stack([g[0] for g in got]), np.array([g[1] for g in got])


def lazy_decode(i):  # module level: picklable by reference
    return np.full(SHAPE, i * 7 % 256, dtype=np.uint8)


def check_in_children(source, method):
    """Reads every sample of `source` in a pool of two `method` processes, compared with this
    process's reads."""
    want = read_samples(source, range(len(source)))
    ctx = multiprocessing.get_context(method)
    halves = [range(0, len(source), 2), range(1, len(source), 2)]
    with ctx.Pool(2) as pool:
        parts = pool.starmap(read_samples, [(source, list(h)) for h in halves])
    for h, (images, labels) in zip(halves, parts):
        assert np.array_equal(images, want[0][list(h)]), f"{method}: pixels differ in a child"
        assert np.array_equal(labels, want[1][list(h)]), f"{method}: labels differ in a child"


def test_cache_read_in_spawn_and_forkserver_children(tmp):
    cache = write_cache(os.path.join(tmp, "cache"))
    for method in ("spawn", "forkserver"):
        check_in_children(cache, method)
    # the open options travel with it
    mapped = dscache.Cache(cache.path, memory="pread", hint="sequential")
    again = pickle.loads(pickle.dumps(mapped))
    assert again.memory_mode == "pread" and again.count == 30
    assert again._open_args == mapped._open_args


def test_cache_changed_on_disk_is_an_error_on_unpickle(tmp):
    path = os.path.join(tmp, "cache")
    cache = write_cache(path)
    blob = pickle.dumps(cache)
    # (name, what happens to the directory before unpickling, the error)
    cases = [("same samples rewritten", lambda: write_cache(path), None),
             ("other pixels", lambda: write_cache(path, seed=1), dscache.InvalidArgumentError),
             ("fewer samples", lambda: write_cache(path, n=29), dscache.InvalidArgumentError),
             ("removed", lambda: os.rename(path, path + ".gone"), dscache.NotFoundError)]
    for name, change, error in cases:
        change()
        try:
            c = pickle.loads(blob)
            assert error is None, f"{name}: unpickled a changed cache"
            assert np.array_equal(c[4][0], cache[4][0])
        except dscache.Error as e:
            assert error is not None and isinstance(e, error), f"{name}: {e!r}"
            assert path in str(e), f"{name}: the error does not name the cache: {e}"
            if error is dscache.InvalidArgumentError:
                assert "changed on disk" in str(e), f"{name}: {e}"


def test_lazy_cache_pickles_when_its_decode_does(tmp):
    path = os.path.join(tmp, "lazy.bin")
    lazy = dscache.LazyCache(path, 20, SHAPE, [i % 2 for i in range(20)], lazy_decode)
    check_in_children(lazy, "spawn")
    assert lazy.filled == 20  # every sample decoded once, here (the reference) or there

    local = dscache.LazyCache(os.path.join(tmp, "local.bin"), 20, SHAPE, [0] * 20,
                              lambda i: lazy_decode(i))
    try:
        pickle.dumps(local)
        raise AssertionError("a LazyCache with a lambda decode function was pickled")
    except TypeError as e:
        assert "decode function" in str(e) and "module level" in str(e), str(e)


def test_loader_refuses_to_pickle(tmp):
    cache = write_cache(os.path.join(tmp, "cache"))
    loader = dscache.Loader(cache, batch_size=8)
    next(iter(loader))  # mid-epoch
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        for what, fn in (("pickle", lambda: pickle.dumps(loader)),
                         ("spawn", lambda: pool.apply(len, (loader,)))):
            try:
                fn()
                raise AssertionError(f"{what}: a Loader was pickled")
            except TypeError as e:
                assert "dscache.Loader cannot be pickled" in str(e) and "Cache" in str(e), str(e)
    assert len(list(loader)) == 4, "the Loader still works after the refusal"


def test_spawn_dataloader_workers(tmp):
    try:
        import torch.utils.data as tud
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps --bench)")
    cache = write_cache(os.path.join(tmp, "cache"))
    want = np.stack([cache[i][0] for i in range(len(cache))])
    loader = tud.DataLoader(cache, batch_size=8, num_workers=2, multiprocessing_context="spawn")
    got = [x.numpy() for x, _ in loader]
    assert np.array_equal(np.concatenate(got), want), "spawn DataLoader workers read other pixels"


if __name__ == "__main__":
    sys.exit(main(globals()))
