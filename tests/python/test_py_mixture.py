#!/usr/bin/python3
"""dscache.Mixture: several caches served as one. Per-epoch counts per source equal Hamilton's
largest remainder computed here; stratified batches hold each source's share (floor or ceil);
labels are unified by class name; a batch's "source" and "index" name the member cache's own
sample (bytes equal); bad input is a named error; a Mixture pickles, and CacheDataset over it
(0 and 2 DataLoader workers) serves the Loader's samples; docs/PYTHON.md's example runs.
Resume (kill, world size, new weights): test_py_mixture_resume.py."""
import math
import os
import pickle
import re
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import Skip, main  # noqa: E402

import dscache  # noqa: E402


def write_cache(tmp, name, n, classes, seed, shape=(6, 5), fields=None):
    """n random samples of `shape`, label i % len(classes) (a field "n" = i when fields)."""
    path = os.path.join(str(tmp), name)
    rng = np.random.default_rng(seed)
    spec = {"n": dscache.Scalar("int64")} if fields else None
    with dscache.Writer(path, shape=shape, classes=classes, shard_size=700, fields=spec) as w:
        for i in range(n):
            extra = {"n": i} if fields else {}
            w.write(rng.integers(0, 256, shape if len(shape) == 3 else (*shape, 3),
                                 dtype=np.uint8), i % len(classes), **extra)
    return path


def q32(x):
    """llround(x x 2^32) for x >= 0, exactly."""
    return math.floor(Fraction(x) * 2**32 + Fraction(1, 2))


def largest_remainder(total, quotas):
    """Hamilton's method, written independently of libcache: floors, then one more to the
    largest remainders, ties to the lower index."""
    s = sum(quotas)
    parts = [total * q // s for q in quotas]
    rest = [total * q % s for q in quotas]
    for k in sorted(range(len(quotas)), key=lambda k: (-rest[k], k))[:total - sum(parts)]:
        parts[k] += 1
    return parts


def expected_counts(sizes, weights=None, repeat=None, epoch=None):
    if repeat is not None:
        return [(n * q32(r) + 2**31) >> 32 for n, r in zip(sizes, repeat)]
    if weights is None:
        return list(sizes)
    return largest_remainder(epoch or sum(sizes), [q32(w) for w in weights])


def two_caches(tmp):
    a = dscache.Cache(write_cache(tmp, "a", 37, ["cat", "dog", "emu"], 1))
    b = dscache.Cache(write_cache(tmp, "b", 23, ["dog", "fox"], 2))
    return a, b


def epoch_batches(loader):
    """[(source, index, label, images)] of one epoch, numpy copies."""
    return [(np.array(b["source"]), np.array(b["index"]), np.array(b["label"]),
             np.array(b["image"])) for b in loader]


def check_against_members(batches, mixture, caches):
    """Every served sample is its member cache's sample `index` (bytes equal), its label the
    member's class name's index in the unified list."""
    names = mixture.classes
    for src, idx, lab, img in batches:
        assert src.dtype == np.uint32 and src.shape == idx.shape == lab.shape
        for t, (k, i) in enumerate(zip(src.tolist(), idx.tolist())):
            image, label = caches[k][i]
            assert np.array_equal(img[t], image), f"source {k} sample {i}: other bytes"
            assert names[lab[t]] == caches[k].classes[label], (k, i, lab[t], label)


def test_mixture_counts_and_labels(tmp):
    a, b = two_caches(tmp)
    c = dscache.Cache(write_cache(tmp, "c", 9, ["emu", "gnu"], 3))
    cases = [([a, b], dict(weights=[0.7, 0.3])), ([a, b], dict(weights=[1, 3], epoch_samples=61)),
             ([a, b, c], dict(weights=[0.2, 0.5, 0.3], epoch_samples=47)),
             ([a, b, c], dict(repeat=[0.5, 2, 1.5])), ([a, b], {}),
             ([a, b, c], dict(weights=[0.25, 0, 0.75]))]
    for sources, kw in cases:
        m = dscache.Mixture(sources, names=["a", "b", "c"][:len(sources)], **kw)
        sizes = [len(s) for s in sources]
        want = expected_counts(sizes, kw.get("weights"), kw.get("repeat"),
                               kw.get("epoch_samples"))
        assert m.counts == want, (kw, m.counts, want)
        assert m.epoch_samples == sum(want) and len(m) == sum(sizes), kw
    m = dscache.Mixture([a, b, c], weights=[0.5, 0.3, 0.2], names=["a", "b", "c"])
    assert m.classes == ["cat", "dog", "emu", "fox", "gnu"], m.classes
    assert [s.name for s in m.sources] == ["a", "b", "c"] and m.sources[1].cache is b
    assert m.sources[2].weight == 0.2 and m.sources[0].repeat is None
    assert m.shape == (6, 5, 3) and m.layout == "fixed"
    caches = [a, b, c]
    for i in range(len(m)):  # the concatenation, label unified
        k, local = m.locate(i)
        assert (k, local) == ((0, i) if i < 37 else (1, i - 37) if i < 60 else (2, i - 60))
        image, label = m[i]
        assert np.array_equal(image, caches[k][local][0])
        assert m.classes[label] == caches[k].classes[caches[k].label(local)]
    fixed = dscache.Mixture([b, a], classes=["fox", "emu", "dog", "cat", "yak"])
    assert fixed.classes == ["fox", "emu", "dog", "cat", "yak"] and fixed.names[0] == "source0"
    assert fixed[0][1] == 2 and fixed[1][1] == 0  # b's "dog", "fox"
    # A Loader's epochs: each source's count exactly, its draws in position order its stream's
    # next ones: within a pass over the source no sample twice, a whole pass every sample.
    loader = dscache.Loader(m, batch_size=8, seed=5, workers=2, prefetch=2)
    for epoch in range(3):
        batches = epoch_batches(loader)
        check_against_members(batches, m, caches)
        src = np.concatenate([s for s, *_ in batches])
        idx = np.concatenate([i for _, i, *_ in batches])
        assert np.bincount(src, minlength=3).tolist() == m.counts, (epoch, m.counts)
        for k, n in enumerate((37, 23, 9)):
            c = m.counts[k]
            passes = {}
            for j, i in enumerate(idx[src == k].tolist()):
                passes.setdefault((epoch * c + j) // n, []).append(i)
            for p, got in passes.items():
                assert len(set(got)) == len(got), f"epoch {epoch}: source {k} pass {p} repeats"
                whole = (p * n >= epoch * c) and ((p + 1) * n <= (epoch + 1) * c)
                assert not whole or sorted(got) == list(range(n)), f"source {k} pass {p}"
    assert loader.epoch == 3


def test_mixture_stratified_batches(tmp):
    a, b = two_caches(tmp)
    c = dscache.Cache(write_cache(tmp, "c", 9, ["emu", "gnu"], 3))
    for kw, batch in ((dict(weights=[0.6, 0.3, 0.1], epoch_samples=83), 10),
                      (dict(repeat=[1, 2, 3]), 7)):
        m = dscache.Mixture([a, b, c], batching="stratified", global_batch=batch, **kw)
        assert m.batching == "stratified" and m.global_batch == batch
        e, counts = m.epoch_samples, m.counts
        loader = dscache.Loader(m, batch_size=batch, shuffle=True, seed=2, workers=1)
        batches = epoch_batches(loader)
        check_against_members(batches, m, [a, b, c])
        total = [0, 0, 0]
        for j, (src, *_) in enumerate(batches):
            got = np.bincount(src, minlength=3).tolist()
            total = [t + g for t, g in zip(total, got)]
            if len(src) < batch:
                continue  # the tail holds what is left
            for k in range(3):
                lo, hi = batch * counts[k] // e, -(-batch * counts[k] // e)
                assert lo <= got[k] <= hi, f"{kw} batch {j}: source {k} has {got[k]}"
        assert total == counts, (kw, total, counts)


def test_mixture_bad_input_is_named(tmp):
    a, b = two_caches(tmp)
    grey = dscache.Cache(write_cache(tmp, "grey", 5, ["cat"], 4, shape=(6, 5, 1)))
    withf = dscache.Cache(write_cache(tmp, "withf", 5, ["cat"], 5, fields=True))
    cases = [(dict(weights=[1.0]), "weights: 1 values for 2 sources"),
             (dict(repeat=[1, 2, 3]), "repeat: 3 values for 2 sources"),
             (dict(names=["a"]), "names: 1 names for 2 sources"),
             (dict(weights=[1, 1], repeat=[1, 1]), "give weights or repeat, not both"),
             (dict(weights=["x", 1]), "weights[0]: must be a number"),
             (dict(epoch_samples=0), "epoch_samples: 0 is outside"),
             (dict(global_batch=-1), "global_batch: -1 is outside")]
    for kw, text in cases:
        try:
            dscache.Mixture([a, b], **kw)
            raise AssertionError(f"{kw} accepted")
        except dscache.InvalidArgumentError as e:
            assert isinstance(e, ValueError) and text in str(e), (kw, str(e))
    for sources, text in (([], "at least one cache"),):
        try:
            dscache.Mixture(sources)
            raise AssertionError("no sources accepted")
        except dscache.InvalidArgumentError as e:
            assert text in str(e), str(e)
    for bad in ("a-path-not-a-list", [a, 3]):
        try:
            dscache.Mixture(bad)
            raise AssertionError(f"{bad!r} accepted")
        except TypeError as e:
            assert "Mixture sources" in str(e), str(e)
    # libcache's own checks, its messages naming the sources.
    for sources, names, words in (([a, grey], ["a", "grey"], ["grey", "channel"]),
                                  ([a, withf], ["a", "withf"], ["withf", "field"]),
                                  ([a, b], ["x", "x"], ["named x", "unique"])):
        try:
            dscache.Mixture(sources, names=names)
            raise AssertionError(f"{names} accepted")
        except dscache.InvalidArgumentError as e:
            assert all(w in str(e) for w in words), (names, str(e))
    for kw in (dict(weights=[-1, 1]), dict(weights=[math.inf, 1]), dict(weights=[0, 0]),
               dict(batching="sorted")):
        try:
            dscache.Mixture([a, b], **kw)
            raise AssertionError(f"{kw} accepted")
        except dscache.InvalidArgumentError as e:
            assert str(e), kw
    m = dscache.Mixture([a, b])
    for i in (len(m), -len(m) - 1):
        try:
            m.locate(i)
            raise AssertionError(f"locate({i}) accepted")
        except IndexError as e:
            assert "out of range" in str(e)


def test_mixture_fields_follow_their_source(tmp):
    """A mixture of caches with fields: each sample's field values are its own source's (the
    field "n" holds the sample's index there); "source" is a batch key, so a field of that name
    is refused by name."""
    one = dscache.Cache(write_cache(tmp, "f1", 11, ["cat"], 6, fields=True))
    two = dscache.Cache(write_cache(tmp, "f2", 7, ["cat", "dog"], 7, fields=True))
    m = dscache.Mixture([one, two], repeat=[1, 2])
    assert [f.name for f in m.fields] == ["n"]
    served = 0
    for batch in dscache.Loader(m, batch_size=4, seed=1, workers=2):
        assert list(batch)[:5] == ["image", "label", "index", "source", "n"], list(batch)
        assert np.array_equal(batch["n"], batch["index"].astype(np.int64))
        served += len(batch["n"])
    assert served == 11 + 14 == m.epoch_samples
    path = os.path.join(str(tmp), "named")
    with dscache.Writer(path, shape=(6, 5), classes=["cat"],
                        fields={"source": dscache.Scalar("int64")}) as w:
        w.write(np.zeros((6, 5, 3), np.uint8), 0, source=0)
    named = dscache.Mixture([dscache.Cache(path)])
    try:
        dscache.Loader(named)
        raise AssertionError("a field named 'source' was accepted")
    except dscache.InvalidArgumentError as e:
        assert "two arrays named 'source'" in str(e), str(e)
    assert len(dscache.Loader(named, fields=[])) == 1  # served without it


def test_mixture_pickles_and_feeds_dataloader(tmp):
    a, b = two_caches(tmp)
    m = dscache.Mixture([a, b], weights=[0.4, 0.6], epoch_samples=50, names=["a", "b"])
    m2 = pickle.loads(pickle.dumps(m))
    assert (m2.counts, m2.classes, m2.names, len(m2)) == (m.counts, m.classes, m.names, len(m))
    assert m2._caches[0] is not a and all(np.array_equal(m2[i][0], m[i][0]) for i in range(60))
    assert m2._identity() == m._identity()
    ref = [(s.tolist(), i.tolist(), img) for s, i, _, img in
           epoch_batches(dscache.Loader(m, batch_size=6, seed=4, workers=2))]
    try:
        import torch  # noqa: F401
        from torch.utils.data import DataLoader
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")
    from dscache.torch import CacheDataset
    for workers, context in ((0, None), (2, None), (1, "spawn")):  # spawn: the Mixture pickled
        ds = CacheDataset(m, batch_size=6, seed=4, threads=1)
        assert len(ds) == -(-50 // 6)
        got = [(b["source"].tolist(), b["index"].tolist(), b["image"].numpy())
               for b in DataLoader(ds, batch_size=None, num_workers=workers,
                                   multiprocessing_context=context)]
        assert len(got) == len(ref), (workers, len(got))
        for j, (g, r) in enumerate(zip(got, ref)):
            assert g[0] == r[0] and g[1] == r[1], f"{workers} workers, batch {j}"
            assert np.array_equal(g[2], r[2]), f"{workers} workers, batch {j}: images"
        state = ds.state_dict(batches=3)
        assert state["sample"] == 18 and state["mix"]["sources"][0]["name"] == "a"
        assert sum(s["taken"] for s in state["mix"]["sources"]) == 18
    # The position resumes on another world size: rank 1 of 2 serves the odd positions from 18.
    ds = CacheDataset(m, batch_size=3, world_size=2, rank=1, seed=0, threads=1)
    ds.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert ds.state_dict(batches=0)["cursor"] == 3  # G 18 / (3 x 2)
    flat = [(s, i) for r in ref for s, i in zip(r[0], r[1])]
    got = [(s, i) for b in DataLoader(ds, batch_size=None, num_workers=2)
           for s, i in zip(b["source"].tolist(), b["index"].tolist())]
    assert got == flat[19::2], (got, flat[19::2])
    # Refused by name: other weights (the data's shares), a position not the pure order's.
    other = CacheDataset(dscache.Mixture([a, b], weights=[0.5, 0.5], epoch_samples=50,
                                         names=["a", "b"]), batch_size=6, threads=1)
    moved = dict(state, mix=dict(state["mix"], segment=1, segment_start=12))
    for target, bad, text in ((other, state, "a 0.5, b 0.5"),
                              (CacheDataset(m, batch_size=6, threads=1), moved,
                               "CacheDataset serves epochs whose shares never changed")):
        try:
            target.load_state_dict(bad)
            raise AssertionError(f"{text}: accepted")
        except dscache.InvalidArgumentError as e:
            assert text in str(e), str(e)


def test_mixture_docs_example_runs(tmp):
    """docs/PYTHON.md "Mixing caches": its example, run as written in a fresh directory."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "PYTHON.md").read_text()
    section = doc.split("### Mixing caches", 1)[1].split("\n### ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, re.S)
    assert code, "no python example in docs/PYTHON.md's \"Mixing caches\""
    cwd = os.getcwd()
    os.chdir(str(tmp))
    try:
        scope = {}
        exec(compile(code[0], "PYTHON.md Mixing caches", "exec"), scope)
    finally:
        os.chdir(cwd)
    assert isinstance(scope.get("mix"), dscache.Mixture), "the example makes no `mix`"


if __name__ == "__main__":
    sys.exit(main(globals()))
