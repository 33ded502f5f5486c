#!/usr/bin/python3
"""The dscache package's public constructors and functions refuse a bad argument (a negative
size, a value past its type's range, a wrong type, an unknown name) themselves, with an error
that names the argument and what it may be, never the binding layer's "incompatible function
arguments" or "Unable to cast Python instance to C++ type". A table of cases, each run the same
way."""
import os
import sys

import numpy as np

from pyhelpers import main

import dscache  # noqa: E402

U32, U64 = "0..4294967295", "0..18446744073709551615"
BINDING = ("incompatible", "Unable to cast", "PYBIND11", "TypeError: __init__()")


def write_cache(tmp):
    path = os.path.join(str(tmp), "c")
    with dscache.Writer(path, shape=(4, 4), classes=["a"], fields={"n": dscache.Scalar("int64")}) \
            as w:
        for i in range(3):
            w.write(np.zeros((4, 4, 3), np.uint8), 0, n=i)
    return path


def cases(tmp, path):
    """(what, callable, exception class, words its message must hold)."""
    cache = dscache.Cache(path)
    new = os.path.join(str(tmp), "new")
    decode = lambda i: np.zeros((4, 4, 3), np.uint8)  # noqa: E731
    lazy = os.path.join(str(tmp), "lazy")
    err = dscache.InvalidArgumentError
    return [
        # fields (issue 38 A10's first example)
        ("Array huge shape", lambda: dscache.Array("uint8", (2**40, 2**40)), err,
         ["Array shape[0]", "1099511627776", U32]),
        ("Array negative shape", lambda: dscache.Array("uint8", (3, -1)), err,
         ["Array shape[1]", "-1", U32]),
        ("Array float shape", lambda: dscache.Array("uint8", (2.5,)), err,
         ["Array shape[0]", "must be an int"]),
        ("Rows huge shape", lambda: dscache.Rows("int64", 2**33), err, ["Rows shape[0]", U32]),
        ("Array shape not a sequence", lambda: dscache.Array("uint8", "ab"), err,
         ["Array shape", "sequence"]),
        ("Array zero shape at Writer", lambda: dscache.Writer(
            new, shape=(4, 4), fields={"a": dscache.Array("uint8", (0,))}), err,
         ["'a'", "> 0"]),
        # Cache
        ("Cache memory_budget -1", lambda: dscache.Cache(path, memory_budget=-1), err,
         ["memory_budget", "-1", U64]),
        ("Cache memory_budget 2**64", lambda: dscache.Cache(path, memory_budget=2**64), err,
         ["memory_budget", U64]),
        ("Cache memory not a str", lambda: dscache.Cache(path, memory=3), TypeError,
         ["memory", "str"]),
        ("Cache unknown memory", lambda: dscache.Cache(path, memory="ram"), err,
         ["ram", "page-cache"]),
        ("Cache hint None", lambda: dscache.Cache(path, hint=None), TypeError, ["hint"]),
        ("Cache path None", lambda: dscache.Cache(None), TypeError, ["path", "PathLike"]),
        ("cache[2**70]", lambda: cache[2**70], IndexError, ["1180591620717411303424", "3 samples"]),
        ("cache.label(-4)", lambda: cache.label(-4), IndexError, ["-4", "3 samples"]),
        ("cache.field(2**64)", lambda: cache.field(2**64, "n"), IndexError, ["3 samples"]),
        ("cache.sample_shape(str)", lambda: cache.sample_shape("0"), TypeError, ["one int"]),
        # Writer (issue 38 A10's third example)
        ("Writer shape (-1, 8)", lambda: dscache.Writer(new, shape=(-1, 8)), err,
         ["shape[0]", "-1", U32]),
        ("Writer shape width 2**33", lambda: dscache.Writer(new, shape=(8, 2**33)), err,
         ["shape[1]", U32]),
        ("Writer shape channels -3", lambda: dscache.Writer(new, shape=(8, 8, -3)), err,
         ["shape[2]", "-3"]),
        ("Writer shape of str", lambda: dscache.Writer(new, shape=("8", "8")), err,
         ["shape[0]", "must be an int"]),
        ("Writer shape of 4", lambda: dscache.Writer(new, shape=(8, 8, 3, 1)), err,
         ["shape", "2 or 3"]),
        ("Writer channels 2**40", lambda: dscache.Writer(new, layout="ragged", channels=2**40),
         err, ["channels", U32]),
        ("Writer codec not a str", lambda: dscache.Writer(new, shape=(8, 8), codec=1), TypeError,
         ["codec"]),
        ("Writer storage None", lambda: dscache.Writer(new, shape=(8, 8), storage=None),
         TypeError, ["storage"]),
        ("Writer layout unknown", lambda: dscache.Writer(new, shape=(8, 8), layout="flat"), err,
         ["layout", "fixed, ragged"]),
        ("Writer classes a str", lambda: dscache.Writer(new, shape=(8, 8), classes="cat"),
         TypeError, ["classes", "list"]),
        ("Writer path an int", lambda: dscache.Writer(5, shape=(8, 8)), TypeError, ["path"]),
        # LazyCache
        ("LazyCache count -1", lambda: dscache.LazyCache(lazy, -1, (4, 4, 3), [], decode), err,
         ["count", U64]),
        ("LazyCache shape -4", lambda: dscache.LazyCache(lazy, 1, (4, -4, 3), [0], decode), err,
         ["shape[1]", U32]),
        ("LazyCache label 2**63", lambda: dscache.LazyCache(lazy, 1, (4, 4, 3), [2**63], decode),
         err, ["labels[0]", "9223372036854775807"]),
        ("LazyCache decode None", lambda: dscache.LazyCache(lazy, 1, (4, 4, 3), [0], None),
         TypeError, ["decode", "callable"]),
        ("LazyCache digest -1",
         lambda: dscache.LazyCache(lazy, 1, (4, 4, 3), [0], decode, source_digest=-1), err,
         ["source_digest", U64]),
        # epoch_order
        ("epoch_order n -1", lambda: dscache.epoch_order(-1), err, ["n", U64]),
        ("epoch_order seed 2**64", lambda: dscache.epoch_order(10, seed=2**64), err,
         ["seed", U64]),
        ("epoch_order rank 2**40", lambda: dscache.epoch_order(10, rank=2**40), err,
         ["rank", U32]),
        ("epoch_order shuffle 3", lambda: dscache.epoch_order(10, shuffle=3), TypeError,
         ["shuffle"]),
        ("epoch_order rank_tail None", lambda: dscache.epoch_order(10, rank_tail=None),
         TypeError, ["rank_tail"]),
        # Loader
        ("Loader shuffle 3", lambda: dscache.Loader(cache, shuffle=3), TypeError, ["shuffle"]),
        ("Loader rank_tail 0", lambda: dscache.Loader(cache, rank_tail=0), TypeError,
         ["rank_tail"]),
        ("Loader min_box_visibility str", lambda: dscache.Loader(cache, min_box_visibility="x"),
         err, ["min_box_visibility", "number"]),
        ("Loader batch_size -1", lambda: dscache.Loader(cache, batch_size=-1), err,
         ["batch_size", U32]),
        # Transform (issue 38 B8)
        ("Transform random_resize", lambda: dscache.Transform("random_resize", 128), err,
         ["random_resize", "none, center, random_resized"]),
        ("Transform crop None", lambda: dscache.Transform(None), TypeError, ["crop"]),
        ("Transform size -1", lambda: dscache.Transform("center", -1), err,
         ["Transform size", "-1", U32]),
        ("Transform size 2**40", lambda: dscache.Transform("center", (8, 2**40)), err,
         ["Transform size[1]", U32]),
        ("Transform size of 3", lambda: dscache.Transform("center", (8, 8, 3)), err,
         ["Transform size", "2"]),
        ("Transform one side", lambda: dscache.Transform("center", (8, 0)), err,
         ["height", "width", "both"]),
        ("Transform scale 0", lambda: dscache.Transform("random_resized", 8, scale=(0, 1)), err,
         ["scale_min", "> 0"]),
        ("Transform scale > 1", lambda: dscache.Transform("random_resized", 8, scale=(.5, 2)),
         err, ["scale_max", "<= 1"]),
        ("Transform ratio inf",
         lambda: dscache.Transform("random_resized", 8, ratio=(1, float("inf"))), err,
         ["ratio_max", "finite"]),
        ("Transform scale a str", lambda: dscache.Transform("random_resized", 8, scale="ab"),
         err, ["Transform scale", "pair"]),
    ]


def test_bad_arguments_are_named(tmp):
    path = write_cache(tmp)
    table = cases(tmp, path)
    failures = []
    for what, call, want, words in table:
        try:
            call()
            failures.append(f"{what}: accepted")
            continue
        except Exception as e:  # noqa: BLE001 - the case says which class it must be
            got = e
        text, problems = str(got), []
        if not isinstance(got, want):
            problems.append(f"{type(got).__name__}, want {want.__name__}")
        missing = [w for w in words if w not in text]
        if missing:
            problems.append(f"the message lacks {missing}")
        if any(b in text for b in BINDING):
            problems.append("the binding's message reached the user")
        if problems:
            failures.append(f"{what}: {'; '.join(problems)}: {text!r}")
    assert not failures, f"{len(failures)} of {len(table)} cases:\n" + "\n".join(failures)
    assert not os.path.exists(os.path.join(str(tmp), "new")), "a refused Writer left its cache"


def test_cache_dataset_refuses_at_construction(tmp):
    """dscache.torch.CacheDataset checks the Loader's options when it is made, not in each
    DataLoader worker (which would fail later, once per worker)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from pyhelpers import Skip
        raise Skip("python3-torch is not installed")
    from dscache.torch import CacheDataset
    path = write_cache(tmp)
    for kw, words in ((dict(prefetch=-1), ["prefetch", U32]),
                      (dict(threads=2**40), ["threads", U32]),
                      (dict(shuffle=3), ["shuffle"]), (dict(block=-1), ["block", U64]),
                      (dict(min_box_visibility=None), ["min_box_visibility"])):
        try:
            CacheDataset(path, **kw)
            raise AssertionError(f"CacheDataset({kw}) accepted")
        except (dscache.InvalidArgumentError, TypeError) as e:
            assert all(w in str(e) for w in words), f"CacheDataset({kw}): {e}"
    # and the valid Transform still serves: the known crops, built and used
    for crop in ("none", "center", "random_resized"):
        t = dscache.Transform(crop, None if crop == "none" else (3, 2))
        b = next(iter(dscache.Loader(dscache.Cache(path), batch_size=3, transform=t)))
        assert b["image"].shape == ((3, 4, 4, 3) if crop == "none" else (3, 3, 2, 3)), crop


if __name__ == "__main__":
    sys.exit(main(globals()))
