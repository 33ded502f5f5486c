#!/usr/bin/python3
"""dscache.Cache / LazyCache from Python: manifest fields, zero-copy sample views that keep the
cache alive, and C++ errors as dscache exceptions that keep the kind, the file and the reason."""
import gc
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import build_cache, main  # noqa: E402

import dscache  # noqa: E402


def test_manifest_and_samples(tmp):
    d = build_cache(tmp)
    cache = dscache.Cache(d)
    m = json.load(open(os.path.join(d, "manifest.json")))
    assert len(cache) == cache.count == m["count"] == 69
    assert cache.shape == (16, 12, 3) and cache.dtype == np.uint8
    assert cache.classes == ["c0", "c1", "c2"] and cache.class_counts == [23, 23, 23]
    assert (cache.layout, cache.storage, cache.codec) == ("fixed", "npy", "raw")
    assert cache.channel_order == "RGB"
    assert cache.manifest["shape"] == m["shape"] == [16, 12, 3]
    for key in ("format_version", "count", "classes", "class_counts", "layout", "storage",
                "dtype", "channel_order", "skipped", "tool_version", "created_utc"):
        assert cache.manifest[key] == m[key], f"manifest {key}: {cache.manifest[key]!r}"
    assert [s["file"] for s in cache.manifest["shards"]] == [s["file"] for s in m["shards"]]
    assert len(m["shards"]) > 1, "the fixture should span several shards"
    labels = np.load(os.path.join(d, "labels.npy"))
    assert np.array_equal(cache.labels, labels)
    for s in m["shards"]:
        arr = np.load(os.path.join(d, s["file"]), mmap_mode="r")
        for k in (0, s["count"] - 1):
            img, label = cache[s["first"] + k]
            assert img.shape == (16, 12, 3) and img.dtype == np.uint8
            assert np.array_equal(img, arr[k]) and label == labels[s["first"] + k]
    img, label = cache[-1]
    assert np.array_equal(img, cache[68][0]) and label == cache[68][1]
    for bad in (69, -70):
        try:
            cache[bad]
            raise AssertionError(f"cache[{bad}] did not raise")
        except IndexError:
            pass


def test_view_is_zero_copy_and_keeps_cache_alive(tmp):
    # Zero-copy only from private memory (in-process): a view of a file mapping would be read by
    # numpy outside libcache's SIGBUS guard (see test_truncated_shard_is_error_not_sigbus).
    d = build_cache(tmp)
    cache = dscache.Cache(d, memory="in-process")
    a, _ = cache[5]
    b, _ = cache[5]
    assert not a.flags.owndata and not a.flags.writeable
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0], \
        "two views of one sample should point at the same mapped bytes"
    want = a.copy()
    del cache, b
    gc.collect()
    assert np.array_equal(a, want), "the view must keep the mapping alive"


def test_truncated_shard_is_error_not_sigbus(tmp):
    # A shard cut under an open page-cache Cache: cache[i] copies through the guarded read, so
    # the read is dscache.Error (Corruption naming the shard), never SIGBUS (exit 135).
    d = build_cache(tmp)
    cache = dscache.Cache(d, memory="page-cache")
    s = json.load(open(os.path.join(d, "manifest.json")))["shards"][0]
    before, _ = cache[s["first"] + s["count"] - 1]
    assert before.flags.owndata, "cache[i] on a mapped cache must be a copy"
    os.truncate(os.path.join(d, s["file"]), 128)
    try:
        cache[s["first"] + s["count"] - 1]
        raise AssertionError("cache[i] on a truncated shard did not raise")
    except dscache.Error as e:
        assert s["file"] in str(e) and "shrank" in str(e), str(e)
    # The copy taken before the cut is the caller's and unaffected.
    assert before.sum() >= 0


def test_lying_jpeg_row_is_error_not_allocation(tmp):
    # One jpeg-index row claims 65500 x 65500 over a small stream (the index's hash refreshed):
    # under a 4 GB address-space limit, cache[0] must raise dscache.Error naming the shard and
    # the sample (the stream's header is read first), not MemoryError (a 12.9 GB array).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
    from cli_helpers import file_xxh64
    d = build_cache(tmp, name="lie", size=None,
                    extra=("--layout", "ragged", "--max-side", "32", "--codec", "jpeg"))
    path = os.path.join(d, "jpeg-index.npy")
    index = np.load(path)
    index[0][2] = index[0][3] = 65500
    with open(path, "wb") as f:
        np.save(f, index)
    mp = os.path.join(d, "manifest.json")
    m = json.load(open(mp))
    m["files"]["index"]["bytes"], m["files"]["index"]["xxh64"] = os.path.getsize(path), \
        file_xxh64(path)
    json.dump(m, open(mp, "w"), indent=2)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    if os.environ.get("DSCACHE_ASAN") == "1":
        # Under AddressSanitizer (its shadow memory needs far more than 4 GB of address space)
        # its allocator refuses the same sizes instead: a 12.9 GB request returns NULL.
        limit = ""
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                               ":allocator_may_return_null=1:max_allocation_size_mb=4096")
    else:
        limit = "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    code = ("import resource, sys\n" + limit +
            "import dscache\n"
            "c = dscache.Cache(sys.argv[1])\n"
            "try:\n    c[0]\nexcept dscache.Error as e:\n    print(e)\n    sys.exit(0)\n"
            "except MemoryError as e:\n    print('MemoryError', e)\n    sys.exit(3)\n"
            "sys.exit(2)\n")
    r = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stdout} {r.stderr}"
    assert m["shards"][0]["file"] in r.stdout and "sample 0" in r.stdout and \
        "stream is" in r.stdout, r.stdout


def test_pread_mode_copies(tmp):
    d = build_cache(tmp)
    cache = dscache.Cache(d, memory="pread")
    assert cache.memory_mode == "pread"
    img, _ = cache[3]
    assert img.flags.owndata and np.array_equal(img, dscache.Cache(d)[3][0])


def test_jpeg_and_ragged_caches(tmp):
    # JPEG codec: samples are decoded copies; the Loader decodes them in its workers.
    d = build_cache(tmp, name="jpeg", extra=("--codec", "jpeg:90"))
    cache = dscache.Cache(d)
    assert cache.codec == "jpeg" and cache.shape == (16, 12, 3)
    img, _ = cache[7]
    assert img.flags.owndata and img.shape == (16, 12, 3)
    batches = list(dscache.Loader(cache, batch_size=32, shuffle=False, copy=True))
    assert np.array_equal(batches[0][0][7], img), "the Loader decodes what cache[i] decodes"
    # Ragged layout: each sample its own shape; the Loader needs a crop to batch them.
    d = build_cache(tmp, name="ragged", size=None, extra=("--layout", "ragged", "--max-side", "30"))
    cache = dscache.Cache(d)
    assert cache.layout == "ragged"
    shapes = {cache[i][0].shape for i in range(len(cache))}
    assert len(shapes) > 1 and all(min(h, w) <= 30 for h, w, _ in shapes)
    assert all(cache[i][0].shape == cache.sample_shape(i) for i in (0, 5, 68))
    try:
        dscache.Loader(cache, batch_size=8)
        raise AssertionError("a ragged cache was batched without a crop")
    except dscache.InvalidArgumentError as e:
        assert "transform" in str(e) or "crop" in str(e), str(e)
    n = sum(len(y) for x, y in dscache.Loader(cache, batch_size=8,
                                               transform=dscache.Transform("center", 10)))
    assert n == 69


def test_errors_keep_kind_file_reason(tmp):
    d = build_cache(tmp)
    shard = json.load(open(os.path.join(d, "manifest.json")))["shards"][1]["file"]
    with open(os.path.join(d, shard), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(d, shard)) - 100)
    try:
        dscache.Cache(d)
        raise AssertionError("a truncated shard opened")
    except dscache.CorruptionError as e:
        assert isinstance(e, dscache.Error) and e.kind == "Corruption"
        assert shard in e.path and shard in str(e) and e.reason and e.reason in str(e)
    try:
        dscache.Cache(os.path.join(tmp, "nope"))
        raise AssertionError("a missing cache opened")
    except dscache.NotFoundError as e:
        assert isinstance(e, FileNotFoundError) and e.kind == "NotFound"
        assert "nope" in str(e)
    good = build_cache(tmp, name="good")
    try:
        dscache.Loader(dscache.Cache(good), batch_size=0)
        raise AssertionError("batch_size 0 accepted")
    except dscache.InvalidArgumentError as e:
        assert isinstance(e, ValueError) and "batch_size" in str(e)
    try:
        dscache.Loader(dscache.Cache(good), rank=2, world_size=2)
        raise AssertionError("rank 2 of 2 accepted")
    except dscache.InvalidArgumentError as e:
        assert "rank" in str(e)
    try:
        dscache.Cache(good, memory="bogus")
        raise AssertionError("memory='bogus' accepted")
    except dscache.InvalidArgumentError as e:
        assert "memory" in str(e)
    import pickle
    e2 = pickle.loads(pickle.dumps(dscache.CorruptionError("Corruption: f: r", "f", "r")))
    assert type(e2) is dscache.CorruptionError and e2.path == "f" and e2.reason == "r"
    assert set(dscache._errors.BY_KIND) == {"NotFound", "Corruption", "InvalidArgument",
                                            "IOError", "Unsupported", "Busy", "Remote"}
    # Object storage that does not answer (a port nothing listens on): RemoteError (an OSError)
    # naming the URL, after the retries (none here).
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", DSCACHE_REMOTE_RETRIES="0",
                      AWS_ACCESS_KEY_ID="AKIDEXAMPLEKEY12", AWS_SECRET_ACCESS_KEY="s3cr3t-never",
                      DSCACHE_LOCAL_CACHE=os.path.join(tmp, "local"))
    try:
        dscache.Cache("s3://bucket/cache")
        raise AssertionError("a cache on an unreachable endpoint opened")
    except dscache.RemoteError as e:
        assert isinstance(e, OSError) and e.kind == "Remote", repr(e)
        assert "s3://bucket/cache/manifest.json" in e.path, e.path
        assert "s3cr3t-never" not in str(e), str(e)


def test_lazy_cache(tmp):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, size=(40, 8, 6, 3), dtype=np.uint8)
    calls = []

    def decode(i):
        calls.append(i)
        return data[i]

    path = os.path.join(tmp, "lazy.bin")
    labels = [i % 4 for i in range(40)]
    lazy = dscache.LazyCache(path, 40, (8, 6, 3), labels, decode, source_digest=7)
    assert len(lazy) == 40 and lazy.shape == (8, 6, 3) and lazy.filled == 0
    img, label = lazy[9]
    assert np.array_equal(img, data[9]) and label == 1 and calls == [9]
    loader = dscache.Loader(lazy, batch_size=16, seed=3, workers=2, return_indices=True)
    seen = []
    for images, labs, idx in loader:
        assert np.array_equal(images, data[idx.astype(np.int64)])
        assert list(labs) == [labels[i] for i in idx]
        seen.extend(int(i) for i in idx)
    assert sorted(seen) == list(range(40)) and lazy.filled == 40
    assert sorted(calls) == list(range(40)), "every sample decoded exactly once"
    del loader, lazy
    gc.collect()
    again = dscache.LazyCache(path, 40, (8, 6, 3), labels, decode, source_digest=7)
    assert again.filled == 40 and np.array_equal(again[20][0], data[20]) and len(calls) == 40

    def broken(i):
        raise RuntimeError("no such image")

    bad = dscache.LazyCache(os.path.join(tmp, "bad.bin"), 4, (8, 6, 3), [0] * 4, broken)
    try:
        list(dscache.Loader(bad, batch_size=2, workers=1))
        raise AssertionError("a failing decode function did not raise")
    except dscache.CorruptionError as e:
        assert "no such image" in str(e)
    try:
        dscache.LazyCache(path, 40, (8, 6, 3), labels, decode, source_digest=8)
        raise AssertionError("a lazy file made for another digest opened")
    except dscache.InvalidArgumentError:
        pass


if __name__ == "__main__":
    sys.exit(main(globals()))
