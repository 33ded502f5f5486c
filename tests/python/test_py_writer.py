#!/usr/bin/python3
"""dscache.Writer: a cache written from Python passes `dscache verify`, reads back equal through
numpy (np.load(mmap_mode="r")) and dscache.Cache, resumes after a SIGKILL mid-write to the same
bytes as an uninterrupted write, and refuses bad input with a named error, leaving nothing."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import cv2
import numpy as np

import dscache
from pyhelpers import main, manifest, verify

CLASSES = ["cat", "dog", "emu"]


def samples(n, shape=(12, 10, 3), seed=0, ragged=False):
    """n (image, label) pairs of random pixels; ragged: each its own size (5..20 a side)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        s = (int(rng.integers(5, 21)), int(rng.integers(5, 21)), shape[2]) if ragged else shape
        out.append((rng.integers(0, 256, size=s, dtype=np.uint8), int(rng.integers(0, 3))))
    return out


def smooth(n, shape=(24, 20, 3), seed=0):
    """n (image, label) pairs of photo-like pixels (gradients and a disc, mild noise): content
    JPEG is made for, so its error is small and comparable with OpenCV's at the same quality."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:shape[0], 0:shape[1]]
    out = []
    for _ in range(n):
        cx, cy, r = rng.uniform(0, shape[1]), rng.uniform(0, shape[0]), shape[0] / 3
        base = 40 + 150 * x / shape[1] + 50 * ((x - cx) ** 2 + (y - cy) ** 2 < r * r)
        img = np.stack([base + 20 * k for k in range(shape[2])], axis=2)
        img = img + rng.integers(-3, 4, size=shape)
        out.append((np.clip(img, 0, 255).astype(np.uint8), int(rng.integers(0, 3))))
    return out


def shard_bytes(path):
    """{shard file: bytes} of a cache, and its side files' bytes (manifest excluded)."""
    m = manifest(path)
    names = [s["file"] for s in m["shards"]] + [f["file"] for f in m["files"].values() if f["file"]]
    out = {}
    for n in names:
        with open(os.path.join(path, n), "rb") as f:
            out[n] = f.read()
    return out


def test_fixed_raw_reads_back_through_numpy_and_cache(tmp):
    items = samples(57)
    path = os.path.join(tmp, "c")
    with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, shard_size=12 * 10 * 3 * 20) as w:
        for i, (img, label) in enumerate(items):
            w.write(img, label, name=f"item/{i}")
    assert not os.path.exists(os.path.join(tmp, ".c.partial"))
    verify(path)
    m = manifest(path)
    assert m["count"] == 57 and [s["count"] for s in m["shards"]] == [20, 20, 17], m["shards"]
    # numpy alone: the shards are (n, H, W, C) uint8, labels.npy (n,) int64
    got = np.concatenate([np.load(os.path.join(path, s["file"]), mmap_mode="r")
                          for s in m["shards"]])
    assert got.shape == (57, 12, 10, 3) and got.dtype == np.uint8
    assert np.array_equal(got, np.stack([img for img, _ in items]))
    labels = np.load(os.path.join(path, m["files"]["labels"]["file"]), mmap_mode="r")
    assert labels.tolist() == [lab for _, lab in items]
    assert m["class_counts"] == [sum(1 for _, lab in items if lab == k) for k in range(3)]
    with open(os.path.join(path, m["files"]["sources"]["file"])) as f:
        assert [json.loads(line) for line in f] == [f"item/{i}" for i in range(57)]
    c = dscache.Cache(path)
    assert len(c) == 57 and c.shape == (12, 10, 3)
    for i in (0, 19, 20, 56):
        img, label = c[i]
        assert np.array_equal(img, items[i][0]) and label == items[i][1]


def test_ragged_jpeg_and_grey_caches(tmp):
    cases = [("ragged", dict(layout="ragged", channels=3), samples(30, ragged=True, seed=1)),
             ("grey", dict(shape=(9, 7), channels=1), samples(25, shape=(9, 7, 1), seed=2)),
             ("jpeg", dict(shape=(24, 20, 3), codec="jpeg", quality=95), smooth(25, seed=3))]
    for name, opts, items in cases:
        path = os.path.join(tmp, name)
        with dscache.Writer(path, classes=CLASSES, shard_size=500, **opts) as w:
            for img, label in items:
                w.write(img[:, :, 0] if name == "grey" else img, label)
        verify(path)
        c = dscache.Cache(path)
        assert len(c) == len(items), name
        assert len(manifest(path)["shards"]) > 1, f"{name}: one shard only"
        for i, (want, label) in enumerate(items):
            img, lab = c[i]
            assert lab == label and img.shape == want.shape, (name, i, img.shape, want.shape)
            if name == "jpeg":
                # Lossy: as close to the original as OpenCV's own JPEG at the same quality.
                ok, enc = cv2.imencode(".jpg", want[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
                ref = cv2.imdecode(enc, cv2.IMREAD_COLOR)[:, :, ::-1]
                err = np.abs(img.astype(int) - want.astype(int)).mean()
                ref_err = np.abs(ref.astype(int) - want.astype(int)).mean()
                assert ok and err <= 1.5 * ref_err + 0.5, (name, i, err, ref_err)
            else:
                assert np.array_equal(img, want), (name, i)
        if name == "jpeg":
            # The stored bytes are plain JPEG streams: numpy and OpenCV alone read them.
            m = manifest(path)
            index = np.load(os.path.join(path, m["files"]["index"]["file"]), mmap_mode="r")
            shard = np.load(os.path.join(path, m["shards"][0]["file"]), mmap_mode="r")
            off, length, h, w = (int(v) for v in index[0])
            dec = cv2.imdecode(np.asarray(shard[off:off + length]), cv2.IMREAD_COLOR)[:, :, ::-1]
            assert dec.shape == (h, w, 3), dec.shape
            assert np.abs(dec.astype(int) - c[0][0].astype(int)).max() <= 1


def test_kill_mid_write_and_resume_is_identical(tmp):
    """A child writes 90 samples and is SIGKILLed just after its third shard; a resumed Writer
    keeps those shards, continues from `position`, and the published cache has the same shard and
    side-file bytes as an uninterrupted write."""
    ref = os.path.join(tmp, "ref")
    out = os.path.join(tmp, "out")
    script = textwrap.dedent("""
        import sys, numpy as np, dscache
        sys.path.insert(0, sys.argv[3])
        from test_py_writer import samples, CLASSES
        items = samples(90, seed=7)
        with dscache.Writer(sys.argv[1], shape=(12, 10, 3), classes=CLASSES,
                            shard_size=12 * 10 * 3 * 16, resume=sys.argv[2] == "1") as w:
            start = w.position
            for i in range(start, len(items)):
                w.write(items[i][0], items[i][1], name=f"s{i}")
        print(start)
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))

    def child(path, resume, extra=None):
        return subprocess.run([sys.executable, "-c", script, path, "1" if resume else "0", here],
                              capture_output=True, text=True, timeout=300,
                              env=dict(env, **(extra or {})))

    r = child(ref, False)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr
    r = child(out, False, {"DSCACHE_TEST_KILL_AT": "shard-committed:3"})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert not os.path.exists(out), "published although killed"
    partial = os.path.join(tmp, ".out.partial")
    kept = sorted(n for n in os.listdir(partial) if n.startswith("images-"))
    assert kept == [f"images-0000{k}.npy" for k in range(3)], kept
    r = child(out, False)  # without resume: refused, the partial kept
    assert r.returncode != 0 and "resume" in r.stderr, r.stderr
    assert os.path.isdir(partial)
    r = child(out, True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "48", f"resumed at {r.stdout.strip()}, expected 3 x 16"
    verify(out)
    assert shard_bytes(out) == shard_bytes(ref)
    a, b = manifest(out), manifest(ref)
    a.pop("created_utc")
    b.pop("created_utc")
    assert a == b


def test_exception_leaves_a_resumable_partial(tmp):
    path = os.path.join(tmp, "c")
    items = samples(40, seed=4)
    try:
        with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, shard_size=12 * 10 * 3 * 8) as w:
            for i, (img, label) in enumerate(items):
                if i == 21:
                    raise KeyboardInterrupt
                w.write(img, label)
    except KeyboardInterrupt:
        pass
    assert not os.path.exists(path)
    with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, shard_size=12 * 10 * 3 * 8,
                        resume=True) as w:
        assert w.position == 16 and w.resumed == 16, (w.position, w.resumed)
        for img, label in items[w.position:]:
            w.write(img, label)
    c = dscache.Cache(path)
    assert len(c) == 40 and all(np.array_equal(c[i][0], items[i][0]) for i in range(40))


def test_bad_input_is_a_named_error(tmp):
    path = os.path.join(tmp, "c")
    img = np.zeros((12, 10, 3), np.uint8)
    cases = [
        (lambda w: w.write(np.zeros((12, 11, 3), np.uint8), 0), "12x11"),
        (lambda w: w.write(np.zeros((12, 10, 3), np.float32), 0), "float32"),
        (lambda w: w.write(np.zeros((12, 10, 1), np.uint8), 0), "channels"),
        (lambda w: w.write(img, 3), "label 3"),
        (lambda w: w.write(img, -1), "label -1"),
        (lambda w: w.write_encoded(b"\xff\xd8", 12, 10, 0), "JPEG"),
    ]
    for f, part in cases:
        with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, force=True) as w:
            w.write(img, 0)
            try:
                f(w)
            except dscache.Error as e:
                assert part in str(e), (part, str(e))
            else:
                raise AssertionError(f"no error for {part}")
        assert len(dscache.Cache(path)) == 1  # the good sample, published
    for kwargs, part in [(dict(shape=None), "shape"), (dict(layout="wavy"), "layout"),
                         (dict(shape=(12, 10, 2)), "channels"), (dict(quality=0), "quality"),
                         (dict(codec="png"), "png"), (dict(shard_size=0), "shard_size")]:
        opts = dict(shape=(12, 10, 3), classes=CLASSES)
        opts.update(kwargs)
        try:
            dscache.Writer(os.path.join(tmp, "bad"), **opts)
        except dscache.Error as e:
            assert part in str(e), (part, str(e))
        else:
            raise AssertionError(f"no error for {kwargs}")
        assert not os.path.exists(os.path.join(tmp, ".bad.partial")), kwargs
    # An existing cache is replaced only with force=True.
    try:
        dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES)
    except dscache.Error as e:
        assert "already exists" in str(e), str(e)
    else:
        raise AssertionError("an existing cache was opened without force")


def test_shuffle_seed_records_build_order(tmp):
    order = dscache.build_order(50, 11)
    assert sorted(order.tolist()) == list(range(50)) and order.tolist() != list(range(50))
    assert dscache.build_order(50, 11).tolist() == order.tolist()
    items = samples(50, seed=5)
    path = os.path.join(tmp, "c")
    with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, shuffle_seed=11) as w:
        for i in order:
            w.write(*items[i], name=f"src/{i}")
    m = manifest(path)
    assert m["recipe"]["shuffle_seed"] == 11, m["recipe"]
    c = dscache.Cache(path)
    assert all(np.array_equal(c[k][0], items[i][0]) for k, i in enumerate(order.tolist()))


if __name__ == "__main__":
    sys.exit(main(globals()))
