#!/usr/bin/python3
"""dscache.Loader over a cache with fields (format_version 3): a dict per batch whose image,
mask, boxes, box labels, scalar, multi-hot array and caption stay together through random-resized
crops and flips; fields=[...] selects; a cache without fields still yields (images, labels);
per_sample and detection_targets cut the flat fields per sample; state_dict resumes; torch
tensors share the batch's memory."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import Skip, build_cache, main  # noqa: E402

import dscache  # noqa: E402

H, W = 48, 64
COLORS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)  # class c's colour
FIELDS = {"mask": dscache.Mask("uint8", classes=["bg", "red", "green", "blue"]),
          "boxes": dscache.Boxes(),
          "box_labels": dscache.Rows("int64", rows_of="boxes", classes=["red", "green", "blue"]),
          "count": dscache.Scalar("int64"),
          "tags": dscache.Array("uint8", (5,)),
          "caption": dscache.Text()}
RANDOM = dscache.Transform("random_resized", (32, 40), scale=(0.2, 1.0), flip=True)


def ragged_size(i):
    """Sample i's (height, width) in the ragged cache."""
    return 30 + (i * 7) % 31, 30 + (i * 13) % 41


def sample(i, size=(H, W), mask_dtype=np.uint8):
    """Sample i: black, with one or two solid rectangles of distinct classes (pure red, green,
    blue); its mask labels them class + 1; one box and box label per rectangle."""
    H, W = size
    rng = np.random.default_rng(i)
    img = np.zeros((H, W, 3), np.uint8)
    mask = np.zeros((H, W), mask_dtype)
    classes = rng.permutation(3)[:1 + i % 2]
    boxes = []
    for k, c in enumerate(classes):  # left and right halves: rectangles never overlap
        x0 = int(rng.integers(0, W // 2 - 12)) + k * (W // 2)
        y0 = int(rng.integers(0, H - 12))
        x1, y1 = x0 + int(rng.integers(6, 12)), y0 + int(rng.integers(6, 12))
        img[y0:y1, x0:x1] = COLORS[c]
        mask[y0:y1, x0:x1] = c + 1
        boxes.append([x0, y0, x1, y1])
    values = {"mask": mask, "boxes": np.array(boxes, np.float32), "box_labels": classes,
              "count": 7 * i + 3, "tags": [(i >> b) & 1 for b in range(5)],
              "caption": f"sample {i} é"}
    return img, i % 3, values


def write_cache(tmp, n=45, name="fields", ragged=False):
    """The cache of samples 0..n-1; ragged: each of its own size (ragged_size), uint16 masks."""
    path = os.path.join(tmp, name)
    fields = dict(FIELDS, mask=dscache.Mask("uint16")) if ragged else FIELDS
    shape = dict(layout="ragged", channels=3) if ragged else dict(shape=(H, W))
    with dscache.Writer(path, classes=["a", "b", "c"], fields=fields, shard_size=20000,
                        **shape) as w:
        for i in range(n):
            img, label, values = (sample(i, ragged_size(i), np.uint16) if ragged else sample(i))
            w.write(img, label, **values)
    return path


def check_batch(b, i_in_batch, index, cache):
    """Sample k of batch b is sample `index`: its fields agree with its (transformed) image."""
    k = i_in_batch
    img = b["image"][k].astype(np.int32)
    mask = b["mask"][k]
    assert mask.shape == img.shape[:2], (mask.shape, img.shape)
    # Pixels pure in the image (the blended one-pixel edge of a rectangle excluded).
    dark = (img <= 5).all(axis=2)
    assert np.all(mask[dark] == 0), f"sample {index}: labelled pixels where the image is black"
    for c in range(3):
        pure = (img[:, :, c] >= 250) & (np.delete(img, c, axis=2) <= 5).all(axis=2)
        assert np.all(mask[pure] == c + 1), f"sample {index}: class {c} pixels not labelled"
    o = b["boxes_offsets"]
    boxes, labels = b["boxes"][o[k]:o[k + 1]], b["box_labels"][o[k]:o[k + 1]]
    assert len(labels) == len(boxes)
    hh, ww = mask.shape
    present = set(int(v) - 1 for v in np.unique(mask) if v)
    assert present <= set(int(c) for c in labels), (index, present, labels)
    for box, c in zip(boxes, labels):
        x0, y0, x1, y1 = (float(v) for v in box)
        assert 0 <= x0 < x1 <= ww and 0 <= y0 < y1 <= hh, (index, box)
        ys, xs = np.nonzero(mask == c + 1)
        if len(xs) == 0:  # a sliver left by the crop covers no pixel centre
            assert x1 - x0 <= 1.5 or y1 - y0 <= 1.5, (index, box, c)
            continue
        region = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        assert np.allclose(box, region, atol=1.0), f"sample {index}: box {box} class {c}, " \
            f"its labelled region {region}"
    # The non-spatial fields and the label belong to batch["index"]'s sample.
    assert b["label"][k] == cache.label(index) == index % 3
    assert b["count"][k] == 7 * index + 3
    assert list(b["tags"][k]) == [(index >> s) & 1 for s in range(5)]
    co = b["caption_offsets"]
    assert bytes(b["caption"][co[k]:co[k + 1]]).decode() == f"sample {index} é"


def test_random_crops_keep_fields_together(tmp):
    cache = dscache.Cache(write_cache(tmp))
    loader = dscache.Loader(cache, batch_size=8, seed=3, workers=3, transform=RANDOM)
    flipped = cropped = 0
    for epoch in range(3):
        seen = []
        for b in loader:
            assert isinstance(b, dscache.Batch) and isinstance(b, dict)
            n = len(b["index"])
            assert b["image"].shape == (n, 32, 40, 3) and b["mask"].shape == (n, 32, 40)
            assert b["mask"].dtype == np.uint8 and b["boxes"].dtype == np.float32
            assert b["box_labels"].dtype == np.int64 and b["count"].shape == (n,)
            assert b["tags"].shape == (n, 5) and b["caption"].dtype == np.uint8
            assert b["boxes_offsets"].shape == (n + 1,) and b["boxes"].shape[1:] == (4,)
            assert b["boxes_offsets"][-1] == len(b["boxes"]) == len(b["box_labels"])
            assert set(b.fields) == set(FIELDS)
            for k, idx in enumerate(b["index"]):
                check_batch(b, k, int(idx), cache)
                stored = sample(int(idx))[2]["boxes"]
                o = b["boxes_offsets"]
                cropped += len(b["boxes"][o[k]:o[k + 1]]) < len(stored)
                # a flipped sample's rightmost rectangle is served on the left
                if len(stored) == 2 and o[k + 1] - o[k] == 2:
                    served = b["boxes"][o[k]:o[k + 1]]
                    flipped += served[0][0] > served[1][0]
            seen.append(b["index"])
        assert sorted(np.concatenate(seen)) == list(range(len(cache))), f"epoch {epoch}"
    assert flipped > 0 and cropped > 0, (flipped, cropped)  # the transform was exercised


def test_ragged_cache_uint16_masks(tmp):
    """Samples of their own sizes, cropped to one size: masks (uint16) and boxes follow each."""
    cache = dscache.Cache(write_cache(tmp, n=30, ragged=True))
    assert cache.layout == "ragged"
    loader = dscache.Loader(cache, batch_size=8, seed=6, transform=RANDOM)
    for b in loader:
        assert b["mask"].dtype == np.uint16 and b["mask"].shape[1:] == (32, 40)
        for k, idx in enumerate(b["index"]):
            check_batch(b, k, int(idx), cache)
    try:
        import torch
    except ImportError:
        return  # the torch conversion of a uint16 mask is checked where torch is installed
    loader.set_epoch(0)
    for t, b in zip(loader.torch(), dscache.Loader(cache, batch_size=8, seed=6,
                                                   transform=RANDOM)):
        assert t["mask"].dtype in (torch.int32, getattr(torch, "uint16", torch.int32))
        assert np.array_equal(t["mask"].numpy().astype(np.int64), b["mask"].astype(np.int64))


def test_no_crop_serves_stored_values(tmp):
    cache = dscache.Cache(write_cache(tmp, n=20))
    for b in dscache.Loader(cache, batch_size=6, shuffle=False):
        for k, idx in enumerate(b["index"]):
            want = cache.sample_fields(int(idx))
            assert np.array_equal(b["mask"][k], want["mask"])
            for name in ("boxes", "box_labels"):
                got = dscache.per_sample(b, name)[k]
                assert got.dtype == want[name].dtype and np.array_equal(got, want[name]), name
            assert dscache.per_sample(b, "caption")[k] == want["caption"]
            assert b.per_sample("count")[k] == want["count"]
            assert np.array_equal(dscache.per_sample(b, "tags")[k], want["tags"])
            check_batch(b, k, int(idx), cache)


def test_fields_selection(tmp):
    cache = dscache.Cache(write_cache(tmp, n=20))
    cases = [  # [fields=, the batch's keys besides image, label, index, loader.fields]
        [None, set(FIELDS) | {"boxes_offsets", "box_labels_offsets", "caption_offsets"},
         list(FIELDS)],
        [[], set(), []],
        [["caption", "count"], {"caption", "caption_offsets", "count"}, ["caption", "count"]],
        [["box_labels"], {"box_labels", "box_labels_offsets"}, ["box_labels"]],
        [["mask"], {"mask"}, ["mask"]],
        # the arrays every batch holds may be named too: they add nothing
        [["image", "mask", "label", "index"], {"mask"}, ["mask"]],
        [["image", "label"], set(), []],
        [iter(["count"]), {"count"}, ["count"]],  # any iterable of names
    ]
    for fields, keys, want in cases:
        loader = dscache.Loader(cache, batch_size=7, seed=1, fields=fields, transform=RANDOM)
        assert list(loader.fields) == want, (fields, list(loader.fields))
        for b in loader:
            assert set(b) == {"image", "label", "index"} | keys, (fields, sorted(b))
            assert list(b.fields) == want
            if "count" in keys:
                assert np.array_equal(b["count"], 7 * b["index"].astype(np.int64) + 3)
    # box_labels alone drops rows with their (unserved) boxes: same rows as with the boxes
    with_boxes = [b["box_labels"] for b in dscache.Loader(cache, batch_size=7, seed=1,
                                                          transform=RANDOM)]
    alone = [b["box_labels"] for b in dscache.Loader(cache, batch_size=7, seed=1,
                                                     transform=RANDOM, fields=["box_labels"])]
    assert all(np.array_equal(x, y) for x, y in zip(with_boxes, alone))
    for bad, err in [(["nope"], dscache.InvalidArgumentError), ("mask", TypeError),
                     ([3], TypeError), (["mask", "mask"], dscache.InvalidArgumentError)]:
        try:
            dscache.Loader(cache, fields=bad)
            raise AssertionError(f"fields={bad!r} accepted")
        except err as e:
            if bad == ["nope"]:
                assert "nope" in str(e) and "mask" in str(e), str(e)  # lists the fields


def test_min_box_visibility(tmp):
    cache = dscache.Cache(write_cache(tmp, n=30))
    counts = {}
    for vis in (0.0, 0.5, 1.0):
        loader = dscache.Loader(cache, batch_size=10, seed=9, transform=RANDOM,
                                min_box_visibility=vis, fields=["boxes", "box_labels", "mask"])
        counts[vis] = 0
        for b in loader:
            counts[vis] += len(b["boxes"])
            assert len(b["box_labels"]) == len(b["boxes"])
    assert counts[0.0] > counts[0.5] >= counts[1.0], counts
    try:
        dscache.Loader(cache, min_box_visibility=1.5)
        raise AssertionError("min_box_visibility 1.5 accepted")
    except dscache.InvalidArgumentError as e:
        assert "min_box_visibility" in str(e), str(e)


def test_cache_without_fields_yields_tuples(tmp):
    d = build_cache(tmp)  # `dscache build`: no fields
    for b in dscache.Loader(dscache.Cache(d), batch_size=16, seed=1):
        assert isinstance(b, tuple) and len(b) == 2
        images, labels = b
        assert images.ndim == 4 and labels.dtype == np.int64
    b = next(iter(dscache.Loader(dscache.Cache(d), batch_size=16, return_indices=True)))
    assert isinstance(b, tuple) and len(b) == 3 and b[2].dtype == np.uint64
    path = os.path.join(tmp, "nofields")
    with dscache.Writer(path, shape=(8, 8), classes=["a"]) as w:
        for i in range(5):
            w.write(np.full((8, 8, 3), i, np.uint8), 0)
    images, labels = next(iter(dscache.Loader(dscache.Cache(path), batch_size=5)))
    assert images.shape == (5, 8, 8, 3)


def test_detection_targets(tmp):
    cache = dscache.Cache(write_cache(tmp, n=24))
    for b in dscache.Loader(cache, batch_size=8, seed=2, transform=RANDOM):
        targets = dscache.detection_targets(b)
        assert len(targets) == len(b["index"])
        o = b["boxes_offsets"]
        for k, t in enumerate(targets):
            assert set(t) == {"boxes", "labels"}
            n = o[k + 1] - o[k]
            assert t["boxes"].shape == (n, 4) and t["boxes"].dtype == np.float32
            assert t["labels"].shape == (n,) and t["labels"].dtype == np.int64
            assert np.array_equal(t["boxes"], b["boxes"][o[k]:o[k + 1]])
            assert np.array_equal(t["labels"], b["box_labels"][o[k]:o[k + 1]])
        assert [set(t) for t in dscache.detection_targets(b, labels=None)] == [{"boxes"}] * 8
    for kw in (dict(labels="count"), dict(boxes="nope")):
        try:
            dscache.detection_targets(b, **kw)
            raise AssertionError(f"detection_targets({kw}) accepted")
        except dscache.InvalidArgumentError as e:
            assert list(kw.values())[0] in str(e), str(e)


def test_state_dict_resume_with_fields(tmp):
    cache = dscache.Cache(write_cache(tmp, n=30))
    kw = dict(batch_size=4, seed=5, transform=RANDOM)

    def key(b):
        return (b["index"].tolist(), b["mask"].tobytes(), b["boxes"].tobytes(),
                b["boxes_offsets"].tolist(), b["image"].tobytes())

    full = [key(b) for b in dscache.Loader(cache, **kw)]
    a = dscache.Loader(cache, **kw)
    a.set_epoch(0)
    taken = []
    for b in a:
        taken.append(key(b))
        if len(taken) == 3:
            break
    state = json.loads(json.dumps(a.state_dict()))
    r = dscache.Loader(cache, workers=1, **kw)
    r.load_state_dict(state)
    assert taken + [key(b) for b in r] == full


def test_fields_are_owned_copies(tmp):
    """Field arrays are the batch's own copies: kept across batches they stay what they were
    (with copy=False the image stays a view of the ring, as in the tuple API)."""
    cache = dscache.Cache(write_cache(tmp, n=40))
    loader = dscache.Loader(cache, batch_size=8, seed=4, prefetch=1, transform=RANDOM,
                            copy=False)
    kept = [(b, {k: v.copy() for k, v in b.items() if k != "image"}) for b in loader]
    for b, snapshot in kept:
        for k, v in snapshot.items():
            assert b[k].flags.owndata or b[k].base is not None and b[k].base.flags.owndata
            assert np.array_equal(b[k], v), f"{k} changed after later batches"
    assert not kept[0][0]["image"].flags.owndata


def test_torch_batches_share_memory(tmp):
    try:
        import torch
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")
    cache = dscache.Cache(write_cache(tmp, n=20))
    loader = dscache.Loader(cache, batch_size=8, seed=1, transform=RANDOM)
    want = [{k: v.copy() for k, v in b.items()} for b in loader]
    loader.set_epoch(0)
    for b, w in zip(loader.torch(), want):
        assert isinstance(b, dscache.Batch) and b.fields.keys() == w.keys() - {
            "image", "label", "index", "boxes_offsets", "box_labels_offsets", "caption_offsets"}
        assert b["index"].dtype == torch.int64 and b["image"].dtype == torch.uint8
        for k, v in w.items():
            assert np.array_equal(b[k].numpy(), v.view(np.int64) if v.dtype == np.uint64 else v)
        t = dscache.detection_targets(b)
        assert all(x["labels"].dtype == torch.int64 and x["boxes"].dtype == torch.float32
                   for x in t)
        assert isinstance(dscache.per_sample(b, "caption")[0], str)
    # zero-copy: the tensor is the numpy batch's memory (a view of the ring with copy=False)
    loader = dscache.Loader(cache, batch_size=8, seed=1, transform=RANDOM, copy=False)
    it = iter(loader)
    nb = next(it)
    tb = dscache._batch_to_torch(nb)
    for k in nb:
        assert tb[k].data_ptr() == nb[k].ctypes.data, k


if __name__ == "__main__":
    sys.exit(main(globals()))
