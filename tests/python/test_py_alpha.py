#!/usr/bin/python3
"""A 4-channel (RGBA) cache built with `dscache build --alpha keep` from transparent PNGs,
served from Python: Cache samples against the PNGs' straight RGBA, and Loader batches (plain
and center-cropped) the same as the C++ Loader's (tests/python/loader_dump.cpp)."""
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import Skip, assert_same_batches, cpp_batches, main, verify  # noqa: E402,F401

import dscache  # noqa: E402
import testrunner  # noqa: E402

DSCACHE = os.environ.get("DSCACHE", "")


def build_rgba_cache(tmp, n=13, h=10, w=12):
    """n RGBA PNGs (even ones transparent, odd ones opaque RGB) and the keep cache of them."""
    if not DSCACHE:
        raise Skip("DSCACHE not set (run through meson test)")
    src, out = os.path.join(tmp, "src"), os.path.join(tmp, "rgba")
    os.makedirs(os.path.join(src, "a"))
    rng = np.random.default_rng(7)
    want = []
    for i in range(n):
        rgba = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
        if i % 2:
            rgba[..., 3] = 255
            Image.fromarray(rgba[..., :3], "RGB").save(os.path.join(src, "a", f"{i:02d}.png"))
        else:
            Image.fromarray(rgba, "RGBA").save(os.path.join(src, "a", f"{i:02d}.png"))
        want.append(rgba)
    testrunner.run_cmd([DSCACHE, "build", src, out, "--size", f"{h}x{w}", "--alpha", "keep",
                        "--shuffle", "none", "--shard-size", str(h * w * 4 * 5), "--quiet"],
                       timeout=300)
    return out, np.stack(want)


def test_rgba_cache_and_loader(tmp):
    d, want = build_rgba_cache(tmp)
    verify(d)
    cache = dscache.Cache(d)
    assert cache.channel_order == "RGBA"
    m = cache.manifest
    assert m["shape"] == [10, 12, 4], m["shape"]
    assert (m["alpha"], m["transparent"]) == ("keep", 7), (m["alpha"], m["transparent"])
    for i in range(len(cache)):
        assert np.array_equal(np.asarray(cache[i][0]), want[i]), f"sample {i}"
    for name, py_kw, cpp_kw in [
            ["plain", dict(), dict()],
            ["center_crop", dict(transform=dscache.Transform("center", 6)),
             dict(crop="center", h=6, w=6)]]:
        got = [(im.copy(), lab, idx) for im, lab, idx in
               dscache.Loader(cache, batch_size=4, seed=3, return_indices=True, **py_kw)]
        assert got[0][0].shape[1:] == ((10, 12, 4) if name == "plain" else (6, 6, 4))
        ref = cpp_batches(d, os.path.join(tmp, "ref"), seed=3, batch=4, **cpp_kw)
        assert_same_batches(got, ref, name)
        if name == "plain":
            for im, _, idx in got:
                assert np.array_equal(im, want[idx]), f"batch of samples {idx}"


def test_writer_rgba(tmp):
    """dscache.Writer writes (H, W, 4) arrays as an RGBA cache (recipe alpha keep)."""
    path = os.path.join(tmp, "w")
    rgba = np.random.default_rng(1).integers(0, 256, (3, 5, 6, 4), dtype=np.uint8)
    with dscache.Writer(path, shape=(5, 6, 4)) as w:
        for i, a in enumerate(rgba):
            w.write(a, i)
    cache = dscache.Cache(path)
    assert cache.channel_order == "RGBA" and cache.manifest["alpha"] == "keep"
    assert cache.manifest["transparent"] is None  # not counted: not a build
    for i in range(3):
        assert np.array_equal(np.asarray(cache[i][0]), rgba[i])
    verify(path)


sys.exit(main(globals()))
