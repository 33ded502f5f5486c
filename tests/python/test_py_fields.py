#!/usr/bin/python3
"""dscache.Writer(fields=...) and dscache.Cache.field(): a cache written from Python with every
field kind (docs/FORMAT.md "Fields") passes `dscache verify` and reads back equal through
Cache.field() and through numpy alone (np.load(mmap_mode="r") of the field files the manifest
lists); ragged masks follow their images' sizes; a SIGKILL mid-write then resume=True gives the
same field files as an uninterrupted write; bad values are errors naming the field."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np

import dscache
from pyhelpers import DSCACHE, Skip, main, manifest, restamp, verify, xxh64

CLASSES = ["cat", "dog", "emu"]


def all_fields():
    """One field of every kind, in the order the tests write them."""
    return {"mask": dscache.Mask("uint8", classes=["bg", "fg", "edge"]),
            "score": dscache.Scalar("float32"),
            "tags": dscache.Array("uint8", (5,), classes=list("abcde")),
            "boxes": dscache.Boxes(),
            "box_labels": dscache.Rows("int64", rows_of="boxes", classes=CLASSES),
            "keypoints": dscache.Rows("uint16", (2,)),
            "caption": dscache.Text(),
            "blob": dscache.Bytes()}


def items(n, seed=0, ragged=False, shape=(12, 10)):
    """n (image, label, {field: value}) triples; the values are Python lists, floats, str and
    bytes as often as numpy arrays, so the conversions are exercised. Sample 0 has no boxes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = (int(rng.integers(5, 21)), int(rng.integers(5, 21))) if ragged else shape
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        nb = 0 if i == 0 else int(rng.integers(0, 4))
        x1, y1 = rng.uniform(0, w - 1, nb), rng.uniform(0, h - 1, nb)
        boxes = np.stack([x1, y1, x1 + rng.uniform(0.5, w - x1), y1 + rng.uniform(0.5, h - y1)],
                         axis=1).astype(np.float32) if nb else []
        out.append((img, int(rng.integers(0, 3)), {
            "mask": rng.integers(0, 3, size=(h, w), dtype=np.uint8),
            "score": float(rng.normal()),  # a Python float: rounded to float32
            "tags": [int(x) for x in rng.integers(0, 2, size=5)],  # ints into uint8
            "boxes": boxes,
            "box_labels": [int(x) for x in rng.integers(0, 3, size=nb)],
            "keypoints": rng.integers(0, 60000, size=(int(rng.integers(0, 3)), 2)),
            "caption": f"sample {i}: " + "é" * (i % 4),
            "blob": bytes(rng.integers(0, 256, size=i % 7, dtype=np.uint8))}))
    return out


def expected(spec, value):
    """What Cache.field() should give back for a written value."""
    if spec.kind in ("text", "bytes"):
        return value
    a = np.asarray(value, dtype=spec.dtype)
    return a.reshape((-1,) + spec.shape) if spec.variable else a


def same(spec, got, want, what):
    if spec.kind in ("text", "bytes"):
        assert type(got) is type(want) and got == want, (what, got, want)
        return
    got = np.asarray(got)
    assert got.dtype == np.dtype(spec.dtype), (what, got.dtype, spec.dtype)
    assert got.shape == want.shape and np.array_equal(got, want), (what, got, want)


def numpy_values(path, spec, layout):
    """Every sample's value of one field, from the field files alone (np.load, mmap_mode="r"),
    in cache order."""
    out = []
    for s in manifest(path)["shards"]:
        files = s["fields"][spec.name]
        v = np.load(os.path.join(path, files["values"]["file"]), mmap_mode="r")
        if "offsets" not in files:
            assert v.shape[0] == s["count"], (spec.name, v.shape, s["count"])
            out += [v[j] for j in range(s["count"])]
            continue
        off = np.load(os.path.join(path, files["offsets"]["file"]), mmap_mode="r")
        assert off.dtype == np.int64 and off.shape == (s["count"] + 1,) and off[0] == 0
        assert off[-1] == v.shape[0], (spec.name, off[-1], v.shape)
        out += [v[off[j]:off[j + 1]] for j in range(s["count"])]
    return out


def check_cache(path, written, layout, fields):
    """The cache at `path` holds `written` (its items()) with `fields`, through Cache and through
    numpy alone."""
    verify(path)
    c = dscache.Cache(path)
    specs = c.fields
    assert [f.name for f in specs] == list(fields), specs
    assert [(f.kind, f.dtype, f.shape, f.rows_of, f.classes) for f in specs] == [
        (f.kind, f.dtype, f.shape, f.rows_of, f.classes) for f in fields.values()]
    m = manifest(path)
    assert m["format_version"] == 3 and len(m["shards"]) > 1, (m["format_version"], m["shards"])
    sums = np.load(os.path.join(path, m["files"]["checksums"]["file"]), mmap_mode="r")
    assert sums.shape == (len(written), 1 + len(specs)), sums.shape
    for spec in specs:
        from_numpy = numpy_values(path, spec, layout)
        assert len(from_numpy) == len(written)
        for i, (img, label, values) in enumerate(written):
            want = expected(spec, values[spec.name])
            same(spec, c.field(i, spec.name), want, (spec.name, i))
            got = from_numpy[i]
            if spec.kind == "text":
                got = bytes(got).decode("utf-8")
            elif spec.kind == "bytes":
                got = bytes(got)
            elif spec.kind == "mask" and layout == "ragged":
                got = np.asarray(got).reshape(img.shape[:2])  # flat h*w pixels + offsets
            same(spec, got, want, (spec.name, i, "numpy"))
    for i in (0, len(written) - 1):
        img, label = c[i]
        assert np.array_equal(img, written[i][0]) and label == written[i][1]
    return c


def test_every_kind_reads_back_through_cache_and_numpy(tmp):
    written = items(41, seed=1)
    path = os.path.join(tmp, "c")
    with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, fields=all_fields(),
                        shard_size=12 * 10 * 3 * 16) as w:
        assert [f.name for f in w.fields] == list(all_fields())
        for i, (img, label, values) in enumerate(written):
            if i % 2:  # both spellings: keywords and fields={...}
                w.write(img, label, name=f"s{i}", **values)
            else:
                w.write(img, label, f"s{i}", fields=values)
    c = check_cache(path, written, "fixed", all_fields())
    # The fixed kinds' files are plain (n, *shape) arrays: a mask shard is (n, H, W) uint8.
    m = manifest(path)
    masks = np.load(os.path.join(path, m["shards"][0]["fields"]["mask"]["values"]["file"]))
    assert masks.shape == (16, 12, 10) and masks.dtype == np.uint8, masks.shape
    # Field access by index, the dict of all of a sample's fields, and an unknown name.
    assert c.field(3, 1) == c.field(3, "score") and isinstance(c.field(3, "score"), np.float32)
    assert set(c.sample_fields(5)) == set(all_fields())
    for mode in ("pread", "in-process"):  # field files are mapped whatever the memory mode
        other = dscache.Cache(path, memory=mode)
        assert other.memory_mode == mode
        for k, spec in enumerate(other.fields):
            same(spec, other.field(17, k), expected(spec, written[17][2][spec.name]), (mode, k))
    assert c.manifest["fields"][3] == {"name": "boxes", "kind": "boxes", "dtype": "float32",
                                       "shape": [4], "rows_of": "", "classes": [],
                                       "allow_nonfinite": False}
    for bad, err in [("nope", dscache.InvalidArgumentError), (99, IndexError)]:
        try:
            c.field(0, bad)
        except err as e:
            assert str(bad) in str(e), str(e)
        else:
            raise AssertionError(f"no error for field {bad!r}")
    # A cache's .fields declare another cache with the same fields (same format, mergeable).
    with dscache.Writer(os.path.join(tmp, "copy"), shape=(12, 10, 3), fields=c.fields) as w:
        w.write(written[1][0], 0, **written[1][2])
    assert dscache.Cache(os.path.join(tmp, "copy")).fields == c.fields


def test_ragged_layout_masks(tmp):
    """Ragged: each mask is its own image's (h, w), stored flat with offsets (h*w pixels each);
    uint16 class ids survive above 255."""
    written = items(30, seed=2, ragged=True)
    for img, label, values in written:
        values["mask"] = values["mask"].astype(np.uint16) * 300
    fields = all_fields()
    fields["mask"] = dscache.Mask("uint16", classes=["bg", "fg", "edge"])
    path = os.path.join(tmp, "r")
    with dscache.Writer(path, layout="ragged", classes=CLASSES, fields=fields,
                        shard_size=2000) as w:
        for img, label, values in written:
            w.write(img, label, **values)
    m = manifest(path)
    assert "offsets" in m["shards"][0]["fields"]["mask"], m["shards"][0]["fields"]
    c = dscache.Cache(path)
    assert c.fields[0] == dscache.Mask("uint16", classes=["bg", "fg", "edge"], name="mask")
    for i in range(len(written)):
        got = c.field(i, "mask")
        assert got.shape == written[i][0].shape[:2] and got.dtype == np.uint16, (i, got.shape)
        assert np.array_equal(got, written[i][2]["mask"]), i
    # A ragged mask must match its own image, not some other size.
    img = written[0][0]
    with dscache.Writer(os.path.join(tmp, "bad"), layout="ragged", fields={"m": dscache.Mask()}) as w:
        try:
            w.write(img, 0, m=np.zeros(img.shape[1::-1], np.uint8) if img.shape[0] != img.shape[1]
                    else np.zeros((img.shape[0] + 1, img.shape[1]), np.uint8))
        except dscache.InvalidArgumentError as e:
            assert "field 'm'" in str(e) and "mask shape" in str(e), str(e)
        else:
            raise AssertionError("a mask of another size was written")
        w.write(img, 0, m=np.zeros(img.shape[:2], np.uint8))
    # fields are copied out: changing a returned array changes nothing in the cache
    a = c.field(1, "boxes")
    if a.size:
        a[:] = 0
        assert np.array_equal(c.field(1, "boxes"), expected(fields["boxes"], written[1][2]["boxes"]))
    check_cache(path, written, "ragged", fields)


def test_kill_mid_write_and_resume_fields_identical(tmp):
    """A child writes 60 samples with every field kind and is SIGKILLed just after its second
    shard; a resumed Writer continues from `position`, and every file of the published cache
    (field files included) is byte-identical to an uninterrupted write's. A resume with other
    fields is refused and keeps the partial directory."""
    script = textwrap.dedent("""
        import sys, dscache
        sys.path.insert(0, sys.argv[3])
        from test_py_fields import items, all_fields, CLASSES
        fields = all_fields()
        if sys.argv[4] == "other":
            fields["score"] = dscache.Scalar("int64")
        written = items(60, seed=7)
        with dscache.Writer(sys.argv[1], shape=(12, 10, 3), classes=CLASSES, fields=fields,
                            shard_size=12 * 10 * 3 * 16, resume=sys.argv[2] == "1") as w:
            start = w.position
            for i in range(start, len(written)):
                img, label, values = written[i]
                w.write(img, label, name=f"s{i}", **values)
        print(start)
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))

    def child(path, resume, extra=None, variant="same"):
        return subprocess.run(
            [sys.executable, "-c", script, path, "1" if resume else "0", here, variant],
            capture_output=True, text=True, timeout=300, env=dict(env, **(extra or {})))

    ref, out = os.path.join(tmp, "ref"), os.path.join(tmp, "out")
    r = child(ref, False)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr
    r = child(out, False, {"DSCACHE_TEST_KILL_AT": "shard-committed:2"})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    partial = os.path.join(tmp, ".out.partial")
    kept = sorted(n for n in os.listdir(partial) if n.startswith("box_labels-"))
    assert kept == ["box_labels-00000.npy", "box_labels-00001.npy", "box_labels-offsets-00000.npy",
                    "box_labels-offsets-00001.npy"], kept
    r = child(out, True, variant="other")
    assert r.returncode != 0 and "InvalidArgument" in r.stderr, (r.returncode, r.stderr)
    assert os.path.isdir(partial)
    r = child(out, True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "32", f"resumed at {r.stdout.strip()}, expected 2 x 16"
    verify(out)
    a, b = manifest(out), manifest(ref)
    a.pop("created_utc")
    b.pop("created_utc")
    assert a == b
    names = sorted(os.listdir(ref))
    assert names == sorted(os.listdir(out)), (names, sorted(os.listdir(out)))
    assert any(n.startswith("caption-offsets-") for n in names), names
    for n in names:
        if n == "manifest.json":
            continue  # compared above, without created_utc
        with open(os.path.join(ref, n), "rb") as f1, open(os.path.join(out, n), "rb") as f2:
            assert f1.read() == f2.read(), f"{n} differs from the uninterrupted write's"


def test_bad_values_are_named_errors(tmp):
    """Each bad value is refused before anything is written, with an error naming the field;
    the writer goes on and publishes the good sample."""
    path = os.path.join(tmp, "c")
    img, label, good = items(1, seed=3)[0]
    good = dict(good, boxes=[[1, 1, 4, 5]], box_labels=[2])
    inv = dscache.InvalidArgumentError
    cases = [  # (changes to the good values, error class, text the message holds)
        (dict(mask=np.zeros((12, 9), np.uint8)), inv, "field 'mask'"),
        (dict(mask=np.zeros((10, 12), np.uint8)), inv, "field 'mask'"),
        (dict(boxes=[[1, 1, 11, 5]], box_labels=[0]), inv, "field 'boxes'"),  # x2 > width 10
        (dict(boxes=[[5, 1, 4, 5]], box_labels=[0]), inv, "field 'boxes'"),  # x2 < x1
        (dict(boxes=[[1, 1, 4, 5]], box_labels=[0, 1]), inv, "box_labels"),  # rows_of count
        (dict(boxes=[[1, 1, 4]], box_labels=[0]), inv, "field 'boxes'"),  # 3 columns
        (dict(box_labels=[1.5]), inv, "field 'box_labels'"),  # float 1.5 into int64
        (dict(box_labels=[float("nan")]), inv, "field 'box_labels'"),
        (dict(tags=[0, 1, 256, 0, 0]), inv, "field 'tags'"),  # 256 into uint8
        (dict(tags=[0, 1, -1, 0, 0]), inv, "field 'tags'"),  # -1 into uint8
        (dict(tags=[0, 1, 0, 0]), inv, "field 'tags'"),  # 4 of (5,)
        (dict(keypoints=[[70000, 1]]), inv, "field 'keypoints'"),  # into uint16
        (dict(score=1e39), inv, "field 'score'"),  # a finite float32 overflow
        (dict(score=float("nan")), inv, "allow_nonfinite"),  # refused by CacheWriter
        (dict(score=np.float32("-inf")), inv, "field 'score'"),
        (dict(score=[1.0, 2.0]), inv, "field 'score'"),
        (dict(score="high"), TypeError, "field 'score'"),
        (dict(caption=b"\xff\xfe"), inv, "caption"),  # not UTF-8 (libcache's check)
        (dict(caption=3), TypeError, "field 'caption'"),
        (dict(blob="text"), TypeError, "field 'blob'"),
        (dict(colour=1), inv, "unknown field 'colour'"),
        ({"score": None}, TypeError, "field 'score'"),
    ]
    for change, err, part in cases:
        values = dict(good, **change)
        with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, fields=all_fields(),
                            force=True) as w:
            w.write(img, label, **good)
            try:
                w.write(img, label, name="bad", **values)
            except err as e:
                assert part in str(e), (part, str(e))
            else:
                raise AssertionError(f"no error for {change}")
        assert len(dscache.Cache(path)) == 1, change
    # A missing value, and a field given both ways.
    with dscache.Writer(path, shape=(12, 10, 3), classes=CLASSES, fields=all_fields(),
                        force=True) as w:
        no_caption = {k: v for k, v in good.items() if k != "caption"}
        for call, part in [(lambda: w.write(img, label, **no_caption),
                            "no value for field 'caption'"),
                           (lambda: w.write(img, label, fields=good, score=1.0), "given twice"),
                           (lambda: w.write(img, label), "no value for field 'mask'")]:
            try:
                call()
            except inv as e:
                assert part in str(e), (part, str(e))
            else:
                raise AssertionError(f"no error for {part}")
        w.write(img, label, **good)
    # Specs libcache refuses, named at open, leaving no partial directory.
    specs = [({"Mask": dscache.Mask()}, "Mask"),
             ({"label": dscache.Scalar("int64")}, "label"),
             ({"s": dscache.Scalar("uint8")}, "'s'"),
             ({"r": dscache.Rows("int64", rows_of="s"), "s": dscache.Scalar("int64")}, "'r'"),
             ({"b": dscache.Boxes(), "b2": dscache.Array("uint8", ())}, "'b2'")]
    for fields, part in specs:
        try:
            dscache.Writer(os.path.join(tmp, "bad"), shape=(12, 10, 3), fields=fields)
        except inv as e:
            assert part in str(e), (part, str(e))
        else:
            raise AssertionError(f"no error for {fields}")
        assert not os.path.exists(os.path.join(tmp, ".bad.partial")), fields
    for make, err in [(lambda: dscache.Scalar("float64"), inv),
                      (lambda: dscache.Writer(os.path.join(tmp, "bad"), shape=(12, 10, 3),
                                              fields={"x": "int64"}), TypeError)]:
        try:
            make()
        except err:
            pass
        else:
            raise AssertionError("no error")


def test_nonfinite_only_where_declared(tmp):
    """NaN and inf are stored only in a float32 field declared allow_nonfinite=True, recorded in
    the manifest (so readers, merge and verify know); others refuse them at write() and at
    declaration for the kinds they cannot apply to."""
    path = os.path.join(tmp, "c")
    fields = {"target": dscache.Scalar("float32", allow_nonfinite=True),
              "points": dscache.Rows("float32", (2,), allow_nonfinite=True),
              "strict": dscache.Scalar("float32")}
    img = np.zeros((4, 4, 3), np.uint8)
    with dscache.Writer(path, shape=(4, 4, 3), fields=fields) as w:
        w.write(img, 0, target=float("nan"), points=[[float("inf"), 1]], strict=1.0)
        w.write(img, 0, target=-np.inf, points=[], strict=2.0)
        try:
            w.write(img, 0, target=1.0, points=[], strict=float("nan"))
        except dscache.InvalidArgumentError as e:
            assert "field 'strict'" in str(e) and "allow_nonfinite" in str(e), str(e)
        else:
            raise AssertionError("NaN in a field without allow_nonfinite was stored")
    c = dscache.Cache(path)
    assert len(c) == 2
    assert np.isnan(c.field(0, "target")) and c.field(1, "target") == -np.inf
    assert np.isinf(c.field(0, "points")[0, 0])
    assert [f.allow_nonfinite for f in c.fields] == [True, True, False]
    assert c.fields == [dscache.Scalar("float32", name="target", allow_nonfinite=True),
                        dscache.Rows("float32", (2,), name="points", allow_nonfinite=True),
                        dscache.Scalar("float32", name="strict")]
    assert [f.get("allow_nonfinite", False) for f in manifest(path)["fields"]] == [
        True, True, False]
    verify(path)
    r = subprocess.run([DSCACHE, "inspect", path, "--json"], capture_output=True, text=True,
                       timeout=60, check=True)
    assert [f["allow_nonfinite"] for f in json.loads(r.stdout)["fields"]] == [True, True, False]
    r = subprocess.run([DSCACHE, "inspect", path], capture_output=True, text=True, timeout=60,
                       check=True)
    assert r.stdout.count("NaN/inf allowed") == 2, r.stdout
    for spec in (dscache.Scalar("int64", allow_nonfinite=True), dscache.Array(
            "uint8", 2, allow_nonfinite=True)):
        try:
            dscache.Writer(os.path.join(tmp, "bad"), shape=(4, 4, 3), fields={"x": spec})
        except dscache.InvalidArgumentError as e:
            assert "allow_nonfinite" in str(e), str(e)
        else:
            raise AssertionError(f"{spec} accepted")


def test_damaged_text_is_corruption_naming_file_and_sample(tmp):
    """A text value that is not UTF-8 on disk (its manifest entry and checksum rewritten to
    match): Cache.field raises CorruptionError naming the file and the sample (not a bare
    UnicodeDecodeError), the Loader's batch too, and `dscache verify` exits 5 naming both."""
    if not DSCACHE:
        raise Skip("DSCACHE not set (run through meson test)")
    path = os.path.join(tmp, "c")
    with dscache.Writer(path, shape=(4, 4, 3), fields={"caption": dscache.Text()}) as w:
        for i in range(3):
            w.write(np.full((4, 4, 3), i, np.uint8), 0, caption=f"caf\u00e9 {i}")
    values = os.path.join(path, "caption-00000.npy")
    a = np.load(values)
    off = np.load(os.path.join(path, "caption-offsets-00000.npy"))
    a[off[1] + 3] = 0xFF  # sample 1's "\u00e9" loses its first byte
    np.save(values, a)
    sums = np.load(os.path.join(path, "checksums.npy"))
    sums[1, 1] = xxh64(a[off[1]:off[2]].tobytes())
    np.save(os.path.join(path, "checksums.npy"), sums)
    restamp(path)
    c = dscache.Cache(path)
    assert c.field(0, "caption") == "caf\u00e9 0"
    try:
        c.field(1, "caption")
    except dscache.CorruptionError as e:
        assert "caption-00000.npy" in str(e) and "sample 1" in str(e), str(e)
        assert "UTF-8" in str(e), str(e)
    else:
        raise AssertionError("invalid UTF-8 read back without an error")
    try:
        for _ in dscache.Loader(c, batch_size=3, shuffle=False):
            pass
    except dscache.CorruptionError as e:
        assert "sample 1" in str(e) and "UTF-8" in str(e), str(e)
    else:
        raise AssertionError("the Loader served invalid UTF-8")
    r = subprocess.run([DSCACHE, "verify", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 5, (r.returncode, r.stdout, r.stderr)
    assert "caption-00000.npy: sample 1: field 'caption': text is not valid UTF-8" in r.stdout, (
        r.stdout)
    assert "checksum" not in r.stdout, r.stdout  # the only problem is the text itself


if __name__ == "__main__":
    sys.exit(main(globals()))
