#!/usr/bin/python3
"""Batches handed over without copies: a copy=True batch's field values are buffers of their own
(views of the binding's pool, like its images), right and unchanged while kept, also after the
Loader is gone; a torch DataLoader worker's first batches come through its shared-memory ring
(tensors over the ring's mapping), none copied."""
import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import main  # noqa: E402
import test_py_loader_fields as lf  # noqa: E402
import test_py_torch as tt  # noqa: E402

import dscache  # noqa: E402
from dscache import _shm_ring  # noqa: E402


def _values(b):
    """The field values of batch b (not image, label, index or row offsets)."""
    return {k: v for k, v in b.items() if k in b.fields}


def test_field_values_handed_off_with_images(tmp):
    """Loader(copy=True) over a cache with every field kind, as stored and under random-resized
    crops: each field's values are a view (not numpy's own memory) whose base is the same kind of
    holder as the image's (the pool's buffer), 64-byte aligned, no two kept batches sharing
    memory; equal to the copy=False Loader's copies of the same epoch, unchanged after every
    later batch and after the Loader is closed and collected. As stored, each mask equals the
    cache's."""
    cache = dscache.Cache(lf.write_cache(tmp, n=45))
    for t in (None, lf.RANDOM):
        kw = dict(batch_size=8, seed=4, prefetch=1, transform=t)
        want = [{k: v.copy() for k, v in b.items()}
                for b in dscache.Loader(cache, copy=False, **kw)]
        loader = dscache.Loader(cache, **kw)
        kept = list(loader)
        assert len(kept) == len(want) == 6
        for k, b in enumerate(kept):
            values = _values(b)
            assert set(values) == {"mask", "boxes", "box_labels", "count", "tags", "caption"}
            for name, v in values.items():
                assert not v.flags.owndata, f"batch {k} field {name}: a copy, not handed off"
                assert type(v.base) is type(b["image"].base), (name, type(v.base))
                assert v.ctypes.data % 64 == 0, (k, name, v.ctypes.data)
                if k > 0:
                    assert not np.shares_memory(v, kept[k - 1][name]), (k, name)
        del loader
        gc.collect()
        for k, (b, w) in enumerate(zip(kept, want)):
            assert list(b) == list(w), (k, list(b), list(w))
            for name in w:
                assert b[name].dtype == w[name].dtype, (k, name)
                assert np.array_equal(b[name], w[name]), f"batch {k} {name} differs ({t})"
            if t is None:
                for j, i in enumerate(b["index"]):
                    assert np.array_equal(b["mask"][j], cache.field(int(i), "mask")), (k, j)
                    assert int(b["count"][j]) == 7 * int(i) + 3, (k, j)


def test_torch_worker_first_batches_through_ring(tmp):
    """CacheDataset in a DataLoader worker: every batch of an epoch, the Loader's first
    prefetch + 1 included, reaches the main process through the worker's ring without a copy:
    _shm_ring counts each as filled in place (none copied), each image tensor lies inside the
    ring's mapping, and the batches equal the single Loader's."""
    tt.need_torch()
    from dscache.torch import CacheDataset
    path = tt.write_cache(tmp)
    for k in _shm_ring.taken:
        _shm_ring.taken[k] = 0
    ds = CacheDataset(path, seed=3, batch_size=10, prefetch=2)
    got = []
    for images, labels in tt.loader_for(ds, 1):
        inside = []
        for m in list(_shm_ring._maps.values()):
            base = np.frombuffer(m, np.uint8)
            lo = base.ctypes.data
            inside.append(lo <= images.data_ptr() < lo + len(m))
            del base
        assert any(inside), f"batch {len(got)}: not in a ring's memory"
        got.append(tt.clone((images, labels)))
        del images, labels
    assert len(got) == 11
    assert _shm_ring.taken == {"in_place": 11, "copied": 0}, _shm_ring.taken
    tt.assert_same(got, tt.reference(path, 0, batch_size=10, prefetch=2), "DataLoader")


if __name__ == "__main__":
    sys.exit(main(globals()))
