#!/usr/bin/python3
"""Hostile input to dscache.Mixture and to the mixture positions Loader.load_state_dict and
CacheDataset.load_state_dict take: tampered, foreign or hand-made states, and absurd arguments.
Each is a dscache.InvalidArgumentError (or TypeError for a wrong type) naming the key or
argument, never a crash, a failed allocation or a resume that serves another order; after
every refusal the saved state still resumes to the uninterrupted run's batches."""
import copy
import json
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import main  # noqa: E402
from test_py_mixture import write_cache  # noqa: E402

import dscache  # noqa: E402


def pair(tmp):
    a = dscache.Cache(write_cache(tmp, "a", 53, ["cat", "dog"], 1))
    b = dscache.Cache(write_cache(tmp, "b", 17, ["dog", "emu"], 2))
    return a, b


def keys(batches):
    """(source, index) of every sample, batch by batch."""
    return [list(zip(np.asarray(x["source"]).tolist(), np.asarray(x["index"]).tolist()))
            for x in batches]


def refused(f, *texts, kind=dscache.InvalidArgumentError):
    """f() must raise `kind` whose message holds every text; returns the message."""
    try:
        f()
    except kind as e:
        assert all(t in str(e) for t in texts), (texts, str(e))
        return str(e)
    raise AssertionError(f"accepted; expected {kind.__name__} with {texts}")


def _src(k, key, value):
    return lambda s: s["mix"]["sources"][k].update({key: value})


def _mix(key, value):
    return lambda s: s["mix"].update({key: value})


def _shift(s):
    """One draw moved from b to a, the sums kept: only the order itself can tell."""
    one, two = s["mix"]["sources"]
    one.update(drawn=one["drawn"] + 1, taken=one["taken"] + 1)
    two.update(drawn=two["drawn"] - 1, taken=two["taken"] - 1)


# (what, tamper(state), texts the refusal must hold)
LOADER_CASES = [
    ("no mix", lambda s: s.pop("mix"), ["no 'sample' and 'mix'"]),
    ("sample None", lambda s: s.update(sample=None), ["no 'sample' and 'mix'"]),
    ("mix None", lambda s: s.update(mix=None), ["state_dict mix: must be a dict"]),
    ("segment None", _mix("segment", None), ["state_dict mix segment: must be an int"]),
    ("segment -1", _mix("segment", -1), ["state_dict mix segment: -1 is outside"]),
    ("segment 2.0", _mix("segment", 2.0), ["state_dict mix segment: must be an int"]),
    ("segment 2**32", _mix("segment", 2**32), ["state_dict mix segment: 4294967296"]),
    ("segment_start '0'", _mix("segment_start", "0"), ["state_dict mix segment_start"]),
    ("no fingerprint", lambda s: s["mix"].pop("fingerprint"), ["mix fingerprint: None"]),
    ("fingerprint an int", _mix("fingerprint", 12345), ["mix fingerprint: 12345 is not 16"]),
    ("fingerprint 0x", _mix("fingerprint", "0x12345"), ["mix fingerprint: '0x12345'"]),
    ("one source", lambda s: s["mix"]["sources"].pop(), ["saved on sources ['a']"]),
    ("sources a str", _mix("sources", "ab"), ["must be a dict with 'sources'"]),
    ("no drawn", lambda s: s["mix"]["sources"][0].pop("drawn"), ["sources[0] drawn"]),
    ("drawn True", _src(0, "drawn", True), ["sources[0] drawn: must be an int"]),
    ("taken -1", _src(1, "taken", -1), ["sources[1] taken: -1 is outside"]),
    ("drawn 2**64-1", _src(0, "drawn", 2**64 - 1), ["position.mix.drawn[0] (a)", "2^32-1"]),
    ("segment 0 mid-epoch", _mix("segment_start", 5), ["position.mix.segment_start 5"]),
    ("taken past drawn", _src(0, "taken", 10), ["position.mix.taken[0] (a) 10"]),
    ("draws moved", _shift, ["position.mix.drawn", "the segment's order"]),
    ("sample past the epoch", lambda s: s.update(sample=71), ["position.sample 71 > the"]),
]


def test_mixture_loader_refuses_tampered_states(tmp):
    a, b = pair(tmp)
    m = dscache.Mixture([a, b], weights=[0.7, 0.3], names=["a", "b"])
    whole = dscache.Loader(m, batch_size=5, seed=3, workers=1)
    it = iter(whole)
    for _ in range(3):
        next(it)
    good = json.loads(json.dumps(whole.state_dict()))
    assert good["sample"] == 15 and good["mix"]["segment"] == 0
    rest = keys(it)
    loader = dscache.Loader(m, batch_size=5, seed=3, workers=1)
    for what, tamper, texts in LOADER_CASES:
        bad = copy.deepcopy(good)
        tamper(bad)
        try:
            refused(lambda: loader.load_state_dict(bad), *texts)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None
    # Another mixture's state (other weights): refused naming both, unless allowed.
    other = dscache.Mixture([a, b], weights=[0.5, 0.5], names=["a", "b"])
    refused(lambda: dscache.Loader(other, batch_size=5, workers=1).load_state_dict(good),
            "other mixture shares", "a 0.7", "a 0.5", "allow_new_weights=True")
    # A single cache's state on the mixture, and the mixture's on a single cache.
    single = dscache.Loader(a, batch_size=5, seed=3, workers=1)
    next(iter(single))
    plain = single.state_dict()
    refused(lambda: loader.load_state_dict(plain), "saved on a cache of 53 samples")
    forged = dict(plain, data=good["data"], sampler=good["sampler"], sample=15)
    refused(lambda: loader.load_state_dict(forged), "no 'sample' and 'mix'")
    with_mix = dict(plain, mix=good["mix"])
    refused(lambda: dscache.Loader(a, batch_size=5, workers=1).load_state_dict(with_mix),
            "'mix' is a mixture's position")
    # Nothing refused stuck: the good state resumes the uninterrupted run.
    loader.load_state_dict(good)
    assert keys(loader) == rest


def test_mixture_dataset_refuses_tampered_states(tmp):
    from dscache.torch import CacheDataset
    a, b = pair(tmp)
    m = dscache.Mixture([a, b], weights=[0.7, 0.3], names=["a", "b"])
    ds = CacheDataset(m, batch_size=5, seed=3)
    good = json.loads(json.dumps(ds.state_dict(batches=3)))
    assert good["sample"] == 15
    for what, tamper, texts in [
            ("no mix", lambda s: s.pop("mix"), ["the mixture's position (None)"]),
            ("segment_start 5", _mix("segment_start", 5), ["is not epoch 0's"]),
            ("draws moved", _shift, ["is not epoch 0's"]),
            ("seed -1", lambda s: s.update(seed=-1), ["state_dict seed: -1"]),
            ("sample 2**64", lambda s: s.update(sample=2**64), ["state_dict sample"]),
            ("other shares", lambda s: s["data"].update(shares="a 0.5, b 0.5"), ["data"])]:
        bad = copy.deepcopy(good)
        tamper(bad)
        try:
            refused(lambda: CacheDataset(m, batch_size=5, seed=3).load_state_dict(bad), *texts)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None
    CacheDataset(m, batch_size=5, seed=3).load_state_dict(good)


def test_mixture_hostile_arguments(tmp):
    a, b = pair(tmp)
    for kw, kind, texts in [
            (dict(weights=[1e30, 1]), dscache.InvalidArgumentError, ["weight must be finite"]),
            (dict(weights=[float("nan"), 1]), dscache.InvalidArgumentError, ["(got nan)"]),
            (dict(weights=[True, 1]), dscache.InvalidArgumentError, ["weights[0]: must be"]),
            (dict(repeat=[1e7, 1]), dscache.InvalidArgumentError, ["repeat must be finite"]),
            (dict(epoch_samples=True), dscache.InvalidArgumentError, ["epoch_samples: must"]),
            (dict(epoch_samples=2**64), dscache.InvalidArgumentError, ["epoch_samples: 1844"]),
            (dict(global_batch=0), dscache.InvalidArgumentError, ["global_batch: 0 is"]),
            (dict(names=[1, 2]), TypeError, ["names[0]: must be a str"]),
            (dict(names=["source1", ""]), dscache.InvalidArgumentError, ["named source1"]),
            (dict(classes=["cat", "dog", "cat", "emu"]), dscache.InvalidArgumentError,
             ['the given classes name "cat" twice'])]:
        refused(lambda: dscache.Mixture([a, b], **kw), *texts, kind=kind)
    # An epoch whose order cannot be held: refused when the Loader (or dataset) is made.
    huge = dscache.Mixture([a, b], weights=[1, 1], epoch_samples=10**15)
    assert huge.epoch_samples == 10**15 and huge.counts == [5 * 10**14] * 2
    refused(lambda: dscache.Loader(huge, batch_size=5, workers=1),
            "epoch_samples 1000000000000000", "more than this machine's memory")


def test_mixture_state_dict_while_another_thread_resumes(tmp):
    """The binding's epoch_position() reads the mixture's order, which start/restore/resume
    rebuild without the GIL: a state_dict() from another thread meanwhile is refused by name
    (it read the vectors being replaced before)."""
    a, b = pair(tmp)
    m = dscache.Mixture([a, b], weights=[0.7, 0.3], names=["a", "b"], epoch_samples=3 * 10**6)
    loader = dscache.Loader(m, batch_size=100, seed=3, workers=1, prefetch=1)
    first = iter(loader)
    next(first)
    state = loader.state_dict()
    seen, done = [], threading.Event()

    def restart():
        try:
            for _ in range(3):
                loader.load_state_dict(state)
        finally:
            done.set()

    t = threading.Thread(target=restart)
    t.start()
    while not done.is_set():
        try:
            loader.state_dict()
        except dscache.InvalidArgumentError as e:
            seen.append(str(e))
    t.join()
    assert seen, "no state_dict() overlapped a rebuild"
    assert all("while another thread starts, restores or resumes" in s for s in seen), seen[:2]
    assert loader.state_dict()["mix"] == state["mix"]


if __name__ == "__main__":
    sys.exit(main(globals()))
