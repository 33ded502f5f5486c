#!/usr/bin/python3
"""dscache.torch over a cache with fields: the batches a DataLoader(CacheDataset(...)) yields
(default_convert in the workers or in the main process, pickled across processes, rebuilt by
torch as type(batch)({...})) are still dscache.Batch objects with their field specs, so
dscache.detection_targets and dscache.per_sample work on them and give exactly what they give on
Loader.torch()'s batches; on a plain dict (a collate_fn of one's own) they work from its keys.
SKIP without python3-torch."""
import os
import pickle
import sys

import numpy as np

from pyhelpers import Skip, main

import dscache  # noqa: E402

H, W = 12, 16
FIELDS = {"mask": dscache.Mask("uint8", classes=["bg", "a", "b"]),
          "boxes": dscache.Boxes(),
          "box_labels": dscache.Rows("int64", rows_of="boxes"),
          "caption": dscache.Text()}


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")


def write_cache(tmp, n=22):
    """n samples, each with 0..3 boxes of classes 1..2 painted into its mask."""
    path = os.path.join(str(tmp), "det")
    rng = np.random.default_rng(7)
    with dscache.Writer(path, shape=(H, W), classes=["x", "y"], fields=FIELDS,
                        shard_size=3000) as w:
        for i in range(n):
            img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
            mask = np.zeros((H, W), np.uint8)
            boxes, labels = [], []
            for _ in range(i % 4):
                x0, y0 = int(rng.integers(0, W - 4)), int(rng.integers(0, H - 4))
                c = int(rng.integers(1, 3))
                mask[y0:y0 + 4, x0:x0 + 4] = c
                boxes.append([x0, y0, x0 + 4, y0 + 4])
                labels.append(c)
            w.write(img, i % 2, mask=mask, boxes=np.array(boxes, np.float32).reshape(-1, 4),
                    box_labels=np.array(labels, np.int64), caption=f"s{i} é")
    return path


def by_index(batches):
    """{sample index: (detection target, mask, boxes, caption)} over every batch, through the
    public helpers."""
    out = {}
    for b in batches:
        targets = dscache.detection_targets(b)
        masks = dscache.per_sample(b, "mask")
        boxes = b.per_sample("boxes")
        captions = dscache.per_sample(b, "caption")
        assert len(targets) == len(masks) == len(boxes) == len(captions) == len(b["index"])
        for k, i in enumerate(b["index"].tolist()):
            out[i] = (targets[k], masks[k], boxes[k], captions[k])
    return out


def assert_same_targets(got, want, what):
    import torch
    assert sorted(got) == sorted(want), f"{what}: samples {sorted(got)} != {sorted(want)}"
    for i in want:
        (gt, gm, gb, gc), (wt, wm, wb, wc) = got[i], want[i]
        assert set(gt) == {"boxes", "labels"}, f"{what}: sample {i} target keys {set(gt)}"
        for key in ("boxes", "labels"):
            assert isinstance(gt[key], torch.Tensor), f"{what}: sample {i} {key} not a tensor"
            assert gt[key].dtype == wt[key].dtype, f"{what}: sample {i} {key} dtype"
            assert torch.equal(gt[key], wt[key]), f"{what}: sample {i} {key} differ"
        assert gm.shape == (10, 12) and torch.equal(gm, wm), f"{what}: sample {i} mask differs"
        assert torch.equal(gb, wb), f"{what}: sample {i} boxes differ"
        assert gc == wc == f"s{i} é", f"{what}: sample {i} caption {gc!r} / {wc!r}"


def test_detection_targets_through_dataloader(tmp):
    """The documented path, DataLoader(CacheDataset(...), batch_size=None, num_workers=W),
    with 0 and 2 workers, with a random crop and flip: the same targets, masks, boxes and
    captions per sample as Loader.torch()'s batches."""
    need_torch()
    import torch
    from dscache.torch import CacheDataset
    path = write_cache(tmp)
    transform = dscache.Transform("random_resized", (10, 12), scale=(0.3, 1.0), flip=True)
    kw = dict(batch_size=4, seed=3, transform=transform)
    loader = dscache.Loader(dscache.Cache(path), copy=True, **kw)
    want = by_index(loader.torch())
    assert len(want) == 22 and sum(len(t[0]["boxes"]) for t in want.values()) > 0
    for workers in (0, 2):
        ds = CacheDataset(path, **kw)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
        batches = list(dl)
        got = by_index(batches)
        for b in batches:
            assert isinstance(b, dscache.Batch), f"{workers} workers: a {type(b).__name__}"
            assert list(b.fields) == list(FIELDS), f"{workers} workers: fields {list(b.fields)}"
        assert_same_targets(got, want, f"num_workers={workers}")


def test_batch_survives_torch_rebuilds(tmp):
    """What torch does to a batch (default_convert, default_collate's mapping rule, pin_memory's
    type(batch)({...}), pickling to the main process, copy.copy) keeps its type and fields; a
    plain dict of the same arrays still gives the same boxes, masks and targets from its keys
    (text and bytes then stay uint8 arrays)."""
    need_torch()
    import copy
    import torch
    from torch.utils.data._utils.collate import default_convert
    path = write_cache(tmp, n=8)
    b = next(iter(dscache.Loader(dscache.Cache(path), batch_size=8, shuffle=False).torch()))
    want = dscache.detection_targets(b)
    rebuilt = [default_convert(b), type(b)({k: v for k, v in b.items()}), copy.copy(b),
               pickle.loads(pickle.dumps(b))]
    for r in rebuilt:
        assert isinstance(r, dscache.Batch) and r.fields == b.fields, type(r)
        got = dscache.detection_targets(r)
        assert all(torch.equal(g["boxes"], w["boxes"]) and torch.equal(g["labels"], w["labels"])
                   for g, w in zip(got, want))
    plain = dict(b)
    got = dscache.detection_targets(plain)
    assert len(got) == 8 and [len(t["boxes"]) for t in got] == [i % 4 for i in range(8)]
    assert all(torch.equal(g["labels"], w["labels"]) for g, w in zip(got, want))
    assert all(torch.equal(m, b["mask"][k]) for k, m in enumerate(dscache.per_sample(plain, "mask")))
    raw = dscache.per_sample(plain, "caption")
    assert bytes(raw[3].numpy()).decode() == "s3 é", raw[3]
    for name in ("nope", "image", "boxes_offsets"):
        try:
            dscache.per_sample(plain, name)
            raise AssertionError(f"per_sample(dict, {name!r}) accepted")
        except dscache.InvalidArgumentError as e:
            assert repr(name)[1:-1] in str(e) and "boxes" in str(e), str(e)
    try:
        dscache.detection_targets(dict(plain, box_labels=plain["mask"]))
        raise AssertionError("detection_targets took a mask as box labels")
    except dscache.InvalidArgumentError as e:
        assert "box_labels" in str(e), str(e)


if __name__ == "__main__":
    sys.exit(main(globals()))
