#!/usr/bin/python3
"""Tests of what reads and rewrites caches with fields: verify naming the file and sample of a
flipped byte in each kind of field side file, --resume after a kill and merge of parts equal to
one build (field files byte for byte), and inspect's field list, values and pictures. Fixtures in
fields_helpers.py.

Usage: test_fields_ops.py CASE   (env DSCACHE = the built binary, DSCACHE_SOURCE_ROOT = the repo
root) Exit 0 = pass, 1 = fail, 2 = unknown case.
"""

import json
import re
import shutil
import sys

import cv2
import numpy as np

from cli_helpers import (
    build, check, check_eq, compare_caches, file_xxh64, imread_rgb, load_manifest, main,
    partial_dir, run, run_json,
)
from fields_helpers import (
    COCO_IMAGES, RED, RED_ID, field_files, fixed_images, flip, load_fields, load_npy, make_coco,
    make_table, verify_ok,
)


def case_verify_fields(tmp):
    src = tmp / "src"
    make_table(src)
    out = tmp / "out"
    # Two samples per shard: sample 3 is shard 1's second sample.
    build(src / "list.csv", out, "--size", "16", "--field", "mask_path=mask", "--field",
          "tags=multi-hot", "--shard-size", str(16 * 16 * 3 * 2), "--quiet")
    verify_ok(out)
    m = load_manifest(out)
    check_eq([s["count"] for s in m["shards"]], [2, 2, 2], "shard counts")

    def variant(name, file, offset_of, must):
        d = tmp / name
        shutil.copytree(out, d)
        p = d / file
        flip(p, offset_of(p))
        r = run(["verify", d], expect_rc=5)
        text = r.stdout + r.stderr
        for s in must:
            check(re.search(r"(?<![\w.-])%s(?![\w.-])" % re.escape(s), text),
                  f"{name}: verify output does not name {s!r}:\n{text}")
        if len(must) > 1:
            check(any(all(re.search(r"(?<![\w.-])%s(?![\w.-])" % re.escape(s), line)
                          for s in must) for line in text.splitlines()),
                  f"{name}: no one line names {must}:\n{text}")
        vj = run_json(["verify", d, "--json"], expect_rc=5)
        check(file in json.dumps(vj), f"{name}: verify --json does not name {file}: {vj}")

    # A values file: sample 3's score (float32), a fixed kind.
    variant("values", "score-00001.npy", lambda p: load_npy(p).offset + 4 * 1 + 2,
            ["score-00001.npy", "3"])
    # A variable kind's values: sample 3's caption bytes.
    def caption_at(p):
        off = np.load(p.parent / "caption-offsets-00001.npy")
        check(off[2] > off[1], "sample 3's caption is empty")
        return load_npy(p).offset + int(off[1])
    variant("text_values", "caption-00001.npy", caption_at, ["caption-00001.npy", "3"])
    # A mask.
    variant("mask_values", "mask_path-00002.npy", lambda p: load_npy(p).offset + 16 * 16 + 40,
            ["mask_path-00002.npy", "5"])
    # An offsets file: offset 1 of shard 1, the end of sample 2 (now past the next one).
    variant("offsets", "caption-offsets-00001.npy", lambda p: load_npy(p).offset + 8 + 1,
            ["caption-offsets-00001.npy", "2"])
    # checksums.npy: sample 4's field column.
    variant("checksums", "checksums.npy", lambda p: load_npy(p).offset + (4 * 6 + 3) * 8,
            ["checksums.npy"])
    verify_ok(out)

# Where the resumed build was killed: after shard 3 was committed (the brief's case), while a
# shard's side files (field files among them) were written, after a shard's rename and before
# its sidecar, after a sidecar.
KILL_POINTS = ["shard-committed:3", "side-file:3", "shard-renamed:2", "sidecar-written:2"]


def case_resume_fields(tmp):
    src = tmp / "src"
    rows = [(i * 3 - 5, i / 4, ";".join("abc"[: 1 + i % 3]), f"caption {i}") for i in range(12)]
    make_table(src, rows)
    opts = ["--size", "16", "--field", "mask_path=mask", "--field", "tags=multi-hot",
            "--shard-size", str(16 * 16 * 3 * 2)]
    ref = tmp / "ref"
    build(src / "list.csv", ref, *opts, "--quiet")
    b = field_files(ref)
    check(len(b) == 6 * 6, f"expected 6 shards x 6 field files, got {len(b)}")
    for point in KILL_POINTS:
        out = tmp / point.replace(":", "_")
        build(src / "list.csv", out, *opts, "--quiet", expect_rc=-9,
              env_extra={"DSCACHE_TEST_KILL_AT": point})
        check(not out.exists() and partial_dir(out).is_dir(), f"{point}: no partial dir")
        run(["build", src / "list.csv", out] + opts + ["--shuffle", "none", "--quiet", "--resume"])
        a = field_files(out)
        check_eq(sorted(a), sorted(b), f"{point}: field files, resumed vs uninterrupted")
        for name in a:
            check(a[name] == b[name], f"{point}: {name} differs from the uninterrupted build's")
        compare_caches(out, ref, f"{point}: resumed vs uninterrupted")
        verify_ok(out)


def case_merge_fields(tmp):
    src = tmp / "src"
    # Tag z only in part 1's rows: the parts still agree on the classes (typing reads the whole
    # table). Two samples per shard: each part has several shards of field files.
    rows = [(i, i * 1.5, ("b;z" if i > 5 else "b") if i % 2 else "a;c", f"c{i}" * (i % 4))
            for i in range(9)]
    make_table(src, rows)
    opts = ["--size", "16", "--field", "mask_path=mask", "--field", "tags=multi-hot",
            "--shard-size", str(16 * 16 * 3 * 2)]
    one = tmp / "one"
    build(src / "list.csv", one, *opts, "--quiet")
    parts = []
    for k in range(2):
        p = tmp / f"part{k}"
        build(src / "list.csv", p, *opts, "--part", f"{k}/2", "--quiet")
        parts.append(p)
    merged = tmp / "merged"
    run(["merge"] + parts + [merged])
    verify_ok(merged)
    m1, v1 = load_fields(one)
    mm, vm = load_fields(merged)
    check_eq(mm["fields"], m1["fields"], "merged fields")
    check_eq(next(f for f in mm["fields"] if f["name"] == "tags")["classes"], ["a", "b", "c", "z"],
             "merged multi-hot classes")
    check(len(mm["shards"]) >= 4, f"merged cache has {len(mm['shards'])} shards")
    check_eq(mm["count"], m1["count"], "merged count")
    check(np.array_equal(fixed_images(merged, mm), fixed_images(one, m1)), "merged images")
    check_eq(np.load(merged / "labels.npy").tolist(), np.load(one / "labels.npy").tolist(),
             "merged labels")
    check(np.array_equal(np.load(merged / "checksums.npy"), np.load(one / "checksums.npy")),
          "merged checksums.npy")
    for f in m1["fields"]:
        for i in range(m1["count"]):
            check(np.array_equal(vm[f["name"]][i], v1[f["name"]][i]),
                  f"merged {f['name']} of sample {i}: {vm[f['name']][i]} vs {v1[f['name']][i]}")
    # A part whose mask file holds another shape (its manifest entry rewritten to match) is
    # refused as every reader refuses it (CacheDir::check_open), naming the file: exit 5.
    name = "mask_path-00000.npy"
    a = np.load(parts[0] / name)
    np.save(parts[0] / name, a.reshape(len(a), 8, -1))
    mp = parts[0] / "manifest.json"
    m = json.loads(mp.read_text())
    entry = m["shards"][0]["fields"]["mask_path"]["values"]
    entry["bytes"], entry["xxh64"] = (parts[0] / name).stat().st_size, file_xxh64(parts[0] / name)
    mp.write_text(json.dumps(m, indent=2))
    p = run(["merge"] + parts + [tmp / "merged2"], expect_rc=5)
    check(name in p.stderr and "shape" in p.stderr, f"merge of a damaged part: {p.stderr!r}")
    check(not (tmp / "merged2").exists(), "a refused merge left its output")


# --------------------------------------------------------------------------------------------
# inspect.

def case_inspect_fields(tmp):
    src = tmp / "src"
    recs = make_table(src)
    out = tmp / "out"
    build(src / "list.csv", out, "--size", "24", "--field", "mask_path=mask", "--field",
          "tags=multi-hot", "--quiet")
    p = run(["inspect", out])
    block = p.stdout[p.stdout.find("fields"):]
    for s in ("mask_path", "mask", "score", "float32", "tags", "array", "[3]", "3 classes",
              "caption", "text"):
        check(s in block, f"inspect summary's fields block lacks {s!r}:\n{p.stdout}")
    info = run_json(["inspect", out, "--json"])
    check_eq([(f["name"], f["kind"], f["dtype"], f["shape"]) for f in info["fields"]],
             [("mask_path", "mask", "uint8", []), ("count", "scalar", "int64", []),
              ("score", "scalar", "float32", []), ("tags", "array", "uint8", [3]),
              ("caption", "text", "uint8", [])], "inspect --json fields")
    check_eq(info["fields"][3]["classes"], ["a", "b", "c"], "inspect --json tags classes")
    smp = run_json(["inspect", out, "--sample", "1", "--json"])
    f = smp["fields"]
    check_eq(f["count"], -2, "--sample 1 count")
    check_eq(f["score"], -2000.0, "--sample 1 score")
    check_eq(f["tags"], [0, 0, 1], "--sample 1 tags")
    check_eq(f["caption"], recs[1]["caption"], "--sample 1 caption")
    check_eq({d["id"] for d in f["mask_path"]["ids"]}, {0, 2, RED_ID}, "--sample 1 mask ids")
    p = run(["inspect", out, "--sample", "1"])
    for s in ("-2", "-2000", "[0 0 1] (c)", recs[1]["caption"]):
        check(s in p.stdout, f"inspect --sample 1 lacks {s!r}:\n{p.stdout}")
    png = tmp / "s.png"
    run(["inspect", out, "--sample", "1", "--out", png])
    pic = imread_rgb(png)
    check(pic.shape[0] >= 256 and pic.shape[1] >= 256, f"--sample picture {pic.shape} not scaled")
    # The mask blended over the picture: inside the red rectangle the colour is no longer red.
    check(not np.any(np.all(pic == RED, axis=-1)), "no mask drawn over the red rectangle")
    # COCO: boxes drawn in their label's colour.
    csrc = tmp / "coco"
    js = make_coco(csrc, COCO_IMAGES)
    cout = tmp / "cout"
    build(js, cout, "--image-root", csrc, "--size", "32", "--resize", "stretch", "--quiet")
    p = run(["inspect", cout, "--sample", "2"])
    for s in ("box 0", "box_labels 1 (car)", "box_labels 0 (person)", "image_id", "1002"):
        check(s in p.stdout, f"inspect --sample 2 of COCO lacks {s!r}:\n{p.stdout}")
    for k, n in ((0, 1), (1, 4)):
        g = tmp / f"g{k}.png"
        run(["inspect", cout, "--grid", str(n), "--out", g])
        check(cv2.imread(str(g)) is not None, f"--grid {n}: unreadable PNG")
    # A damaged offsets file: exit 5 naming it, never a wrong picture.
    bad = tmp / "bad"
    shutil.copytree(cout, bad)
    flip(bad / "boxes-offsets-00000.npy", load_npy(bad / "boxes-offsets-00000.npy").offset + 9)
    p = run(["inspect", bad, "--sample", "0"], expect_rc=5)
    check("boxes-" in p.stderr, f"inspect of a damaged offsets file: {p.stderr}")
    plain = tmp / "plain.png"
    run(["inspect", cout, "--sample", "3", "--out", plain])  # no boxes: still a picture
    check(imread_rgb(plain).shape[0] >= 256, "--sample 3 picture not scaled")

CASES = {
    "verify_fields": case_verify_fields,
    "resume_fields": case_resume_fields,
    "merge_fields": case_merge_fields,
    "inspect_fields": case_inspect_fields,
}


if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
