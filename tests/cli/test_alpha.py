#!/usr/bin/python3
"""Tests of `dscache build --alpha drop|composite[=R,G,B]|keep` on real transparent PNGs (RGBA
with known alpha, grey+alpha, palette with tRNS, 16-bit RGBA, a fully opaque RGBA, a plain RGB
and a JPEG): the pixels of each mode against a numpy reference of the compositing, the count of
transparent sources in the summary line, the manifest and `dscache inspect`, 4-channel caches
through HDF5, the ragged layout and verify, the refusals, and the count kept by --resume and
summed by `dscache merge`.

Usage: test_alpha.py CASE
(env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo root)
Exit 0 = pass, 1 = fail, 2 = unknown case. Fixtures, cache checkers and the runner are
in cli_helpers.py.
"""

import sys
from pathlib import Path

import cv2
import h5py
import numpy as np
from PIL import Image

from cli_helpers import (
    build, check, check_cache, check_eq, compare_caches, load_images, load_manifest, main,
    partial_dir, run, run_json,
)
from ragged_helpers import check_ragged_cache

H, W = 6, 8
N_TRANSPARENT = 4  # rgba, grey+alpha, palette+tRNS, rgba16


def straight_rgba(seed, opaque=False):
    """Colours and alphas 0..255, with 0 and 255 present (unless `opaque`: all 255)."""
    rng = np.random.default_rng(seed)
    rgba = rng.integers(0, 256, (H, W, 4), dtype=np.uint8)
    rgba[..., 3] = 255 if opaque else rgba[..., 3]
    if not opaque:
        rgba[0, 0, 3], rgba[0, 1, 3] = 0, 255
    return rgba


def write_sources(src):
    """The fixture folder (one class) and, per file in source order, the straight RGBA (8-bit,
    as drop reduces 16-bit: v >> 8) and whether it is transparent."""
    d = src / "a"
    d.mkdir(parents=True)
    ref = {}
    rgba = straight_rgba(1)
    Image.fromarray(rgba, "RGBA").save(d / "1_rgba.png")
    ref["1_rgba.png"] = (rgba, True)

    la = straight_rgba(2)
    Image.fromarray(la[..., [0, 3]], "LA").save(d / "2_grey_alpha.png")
    ref["2_grey_alpha.png"] = (np.dstack([la[..., 0]] * 3 + [la[..., 3]]), True)

    palette = np.array([[255, 0, 0], [0, 128, 255], [20, 30, 40], [250, 250, 0]], np.uint8)
    idx = np.random.default_rng(3).integers(0, 4, (H, W), dtype=np.uint8)
    idx[0, 0] = 1
    p = Image.fromarray(idx, "P")
    p.putpalette(palette.flatten().tolist())
    p.save(d / "3_palette.png", transparency=bytes([255, 0, 90, 255]))
    alphas = np.array([255, 0, 90, 255], np.uint8)
    ref["3_palette.png"] = (np.dstack([palette[idx], alphas[idx]]), True)

    rgba16 = np.random.default_rng(4).integers(0, 65536, (H, W, 4), dtype=np.uint16)
    rgba16[0, 0, 3] = 0
    cv2.imwrite(str(d / "4_rgba16.png"), rgba16[..., [2, 1, 0, 3]])
    ref["4_rgba16.png"] = ((rgba16 >> 8).astype(np.uint8), True)

    opaque = straight_rgba(5, opaque=True)
    Image.fromarray(opaque, "RGBA").save(d / "5_opaque_rgba.png")
    ref["5_opaque_rgba.png"] = (opaque, False)

    rgb = straight_rgba(6, opaque=True)
    Image.fromarray(rgb[..., :3], "RGB").save(d / "6_rgb.png")
    ref["6_rgb.png"] = (rgb, False)

    jpg = np.full((H, W, 3), (200, 100, 50), np.uint8)
    Image.fromarray(jpg, "RGB").save(d / "7_flat.jpg", quality=100)
    decoded = cv2.cvtColor(cv2.imread(str(d / "7_flat.jpg")), cv2.COLOR_BGR2RGB)
    ref["7_flat.jpg"] = (np.dstack([decoded, np.full((H, W), 255, np.uint8)]), False)
    return [ref[k] for k in sorted(ref)]


def composite(rgba, bg):
    """The documented formula, exact: (c * a + bg * (255 - a) + 127) // 255."""
    c = rgba[..., :3].astype(np.uint32)
    a = rgba[..., 3:].astype(np.uint32)
    return ((c * a + np.array(bg, np.uint32) * (255 - a) + 127) // 255).astype(np.uint8)


def expected(refs, mode, bg=(255, 255, 255)):
    out = []
    for rgba, transparent in refs:
        if mode == "keep":
            out.append(rgba if transparent else np.dstack([rgba[..., :3],
                                                           np.full((H, W), 255, np.uint8)]))
        elif mode == "composite" and transparent:
            out.append(composite(rgba, bg))
        else:
            out.append(rgba[..., :3])
    return np.stack(out)


def case_alpha_modes(tmp):
    src = tmp / "src"
    refs = write_sources(src)
    table = [  # [--alpha, mode, background, channels]
        ["drop", "drop", None, 3],
        ["composite", "composite", (255, 255, 255), 3],
        ["composite=0,128,255", "composite", (0, 128, 255), 3],
        ["keep", "keep", None, 4],
    ]
    for flag, mode, bg, channels in table:
        out = tmp / flag.replace("=", "_").replace(",", "_")
        p = build(src, out, "--size", f"{H}x{W}", "--alpha", flag)
        m, images, _ = check_cache(out)
        check_eq(m["shape"], [H, W, channels], f"{flag}: shape")
        check_eq(m["channel_order"], {3: "RGB", 4: "RGBA"}[channels], f"{flag}: channel_order")
        check_eq(m["recipe"].get("alpha"), None if mode == "drop" else mode, f"{flag}: recipe.alpha")
        check_eq(m["recipe"].get("background"), list(bg) if bg else None,
                 f"{flag}: recipe.background")
        check_eq(m["transparent"], N_TRANSPARENT, f"{flag}: manifest transparent")
        want = expected(refs, mode, bg)
        for i in range(len(refs)):
            if not np.array_equal(images[i], want[i]):
                diff = np.argwhere(images[i] != want[i])[0]
                raise AssertionError(f"{flag}: sample {i} differs from the reference at {diff}: "
                                     f"{images[i][tuple(diff[:2])]} vs {want[i][tuple(diff[:2])]}")
        check(f"{N_TRANSPARENT} transparent (alpha: {mode})" in p.stdout,
              f"{flag}: summary line lacks the count: {p.stdout!r}")
        warned = "--alpha composite" in p.stderr
        check_eq(warned, mode == "drop", f"{flag}: the drop warning on stderr ({p.stderr!r})")
        text = run(["inspect", out]).stdout
        want_line = f"transparent sources: {N_TRANSPARENT} of 7 (alpha: {mode}"
        check(want_line in text, f"{flag}: inspect lacks {want_line!r}:\n{text}")
        j = run_json(["inspect", out, "--json"])
        check_eq((j["transparent"], j["recipe"]["alpha"]), (N_TRANSPARENT, mode),
                 f"{flag}: inspect --json")
        run(["verify", out, "--source"])
    # drop is what cv2.imread gives (today's bytes); and the composite is PIL's to within 1.
    drop = load_images(tmp / "drop")
    for i, name in enumerate(sorted(p.name for p in (src / "a").iterdir())):
        cv = cv2.cvtColor(cv2.imread(str(src / "a" / name), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        check(np.array_equal(drop[i], cv), f"drop: sample {i} ({name}) is not cv2.imread's")
        if refs[i][1]:
            pil = Image.alpha_composite(Image.new("RGBA", (W, H), (255, 255, 255, 255)),
                                        Image.fromarray(refs[i][0], "RGBA")).convert("RGB")
            got = load_images(tmp / "composite")[i].astype(int)
            check(np.abs(got - np.asarray(pil, int)).max() <= 1,
                  f"composite: sample {i} ({name}) is off PIL's alpha_composite by more than 1")


def case_alpha_resize_storage(tmp):
    """Composite at the source's size then resize (what PIL alpha_composite then resize gives);
    keep through HDF5 and the ragged layout, with verify."""
    src = tmp / "src"
    refs = write_sources(src)
    out = tmp / "half"
    build(src, out, "--size", f"{H // 2}x{W // 2}", "--resize", "stretch", "--alpha", "composite")
    images = load_images(out)
    for i, full in enumerate(expected(refs, "composite")):
        want = cv2.resize(full, (W // 2, H // 2), interpolation=cv2.INTER_AREA)
        check(np.array_equal(images[i], want), f"sample {i}: not composited before the resize")

    h5 = tmp / "h5"
    build(src, h5, "--size", f"{H}x{W}", "--alpha", "keep", "--storage", "hdf5")
    m, images, _ = check_cache(h5, "hdf5")
    check(np.array_equal(images, expected(refs, "keep")), "hdf5 keep: pixels")
    with h5py.File(h5 / m["shards"][0]["file"], "r") as f:
        check_eq(f["images"].attrs["channel_order"], "RGBA", "hdf5 channel_order attribute")
    run(["verify", h5, "--source"])
    # inspect writes an RGBA sample as an RGBA PNG, and draws a contact sheet of them.
    run(["inspect", h5, "--sample", "2", "--out", tmp / "s.png"])
    png = cv2.imread(str(tmp / "s.png"), cv2.IMREAD_UNCHANGED)
    check(png is not None and png.shape == (H, W, 4), "inspect --sample --out of an RGBA cache")
    check(np.array_equal(cv2.cvtColor(png, cv2.COLOR_BGRA2RGBA), expected(refs, "keep")[2]),
          "inspect --sample --out: not the sample's RGBA")
    run(["inspect", h5, "--grid", "4", "--out", tmp / "g.png"])
    check(cv2.imread(str(tmp / "g.png")) is not None, "inspect --grid of an RGBA cache")
    j = run_json(["bench", h5, "--json", "--seconds", "0.2", "--decode-samples", "7"])
    check(j, "bench of an RGBA cache printed nothing")

    rg = tmp / "ragged"
    build(src, rg, "--layout", "ragged", "--max-side", "100", "--alpha", "keep")
    check_ragged_cache(rg, max_side=100, channels=4)
    check_eq(load_manifest(rg)["transparent"], N_TRANSPARENT, "ragged: transparent")
    run(["verify", rg, "--source"])


def case_alpha_usage(tmp):
    src = tmp / "src"
    write_sources(src)
    out = tmp / "out"
    table = [  # [options, exit code, what stderr must say]
        (["--alpha", "blend"], 2, "--alpha 'blend'"),
        (["--alpha", "composite=256,0,0"], 2, "--alpha 'composite=256,0,0'"),
        (["--alpha", "composite=1,2"], 2, "--alpha 'composite=1,2'"),
        (["--alpha", "composite=1,2,x"], 2, "--alpha 'composite=1,2,x'"),
        (["--alpha", "keep=1,2,3"], 2, "--alpha 'keep=1,2,3'"),
        (["--alpha", "keep", "--channels", "1"], 2, "--alpha keep: stores RGBA"),
        (["--alpha", "keep", "--codec", "jpeg"], 2, "JPEG cannot store an alpha channel"),
    ]
    for opts, rc, message in table:
        p = build(src, out, "--size", "8", *opts, expect_rc=rc)
        check(message in p.stderr, f"{opts}: stderr lacks {message!r}: {p.stderr!r}")
        check(not out.exists() and not partial_dir(out).exists(), f"{opts}: left files behind")
    # Grey with composite: the composite's grey conversion, counted all the same.
    build(src, out, "--size", "8", "--channels", "1", "--alpha", "composite")
    m = load_manifest(out)
    check_eq((m["shape"][2], m["transparent"]), (1, N_TRANSPARENT), "grey composite")
    # Opaque sources only: the default build's summary says nothing about alpha (0 is recorded),
    # one that asked for --alpha says its mode.
    opaque_src = tmp / "opaque" / "a"
    opaque_src.mkdir(parents=True)
    Image.fromarray(straight_rgba(7, opaque=True), "RGBA").save(opaque_src / "o.png")
    for opts, said in (([], False), (["--alpha", "composite"], True)):
        o = tmp / f"opaque-out{len(opts)}"
        p = build(opaque_src.parent, o, "--size", "8", *opts)
        check_eq("transparent" in p.stdout, said, f"opaque {opts}: summary {p.stdout!r}")
        check_eq(load_manifest(o)["transparent"], 0, f"opaque {opts}: manifest transparent")


def case_alpha_resume_merge(tmp):
    """The count survives a build killed after its second shard, and merge sums the parts'."""
    src = tmp / "src"
    refs = write_sources(src)
    for k in range(3):  # 28 sources, 16 transparent, in 7-sample shards
        for name in sorted((src / "a").iterdir()):
            (src / f"b{k}").mkdir(exist_ok=True)
            (src / f"b{k}" / name.name).write_bytes(name.read_bytes())
    opts = ["--size", f"{H}x{W}", "--alpha", "composite", "--shard-size", str(H * W * 3 * 7)]
    whole = tmp / "whole"
    build(src, whole, *opts)
    check_eq(load_manifest(whole)["transparent"], 4 * N_TRANSPARENT, "whole build")
    resumed = tmp / "resumed"
    build(src, resumed, *opts, expect_rc=-9, env_extra={"DSCACHE_TEST_KILL_AT": "shard-committed:2"})
    check(partial_dir(resumed).exists(), "the killed build left no partial directory")
    build(src, resumed, *opts, "--resume")
    compare_caches(resumed, whole, "resumed vs whole build")
    parts = []
    for i in range(3):
        parts.append(tmp / f"part{i}")
        build(src, parts[-1], *opts, "--part", f"{i}/3")
    counts = [load_manifest(p)["transparent"] for p in parts]
    check_eq(sum(counts), 4 * N_TRANSPARENT, f"the parts' counts {counts}")
    merged = tmp / "merged"
    run(["merge", *parts, merged])
    check_eq(load_manifest(merged)["transparent"], 4 * N_TRANSPARENT, "merged count")
    check(f"transparent sources: {4 * N_TRANSPARENT} of 28" in run(["inspect", merged]).stdout,
          "inspect of the merged cache")
    # Parts built with another --alpha are refused.
    other = tmp / "other"
    build(src, other, *opts[:2], "--alpha", "drop", *opts[4:], "--part", "2/3")
    p = run(["merge", parts[0], parts[1], other, tmp / "mixed"], expect_rc=2)
    check("alpha" in p.stderr, f"merge of mixed --alpha parts: {p.stderr!r}")
    del refs


CASES = {
    "alpha_modes": case_alpha_modes,
    "alpha_resize_storage": case_alpha_resize_storage,
    "alpha_usage": case_alpha_usage,
    "alpha_resume_merge": case_alpha_resume_merge,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
