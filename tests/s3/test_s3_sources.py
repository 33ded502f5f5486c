#!/usr/bin/python3
"""Sources on object storage other than class folders, end to end against a real S3 server (a
private Ceph radosgw each case starts in its temp dir: rgw.py) and a real web server (nginx):
CSV/TSV/JSONL tables read from s3:// or http(s)://, their paths s3:// URLs or relative to the
table; COCO with its JSON local or on s3:// and --image-root s3://. Each cache built from object
storage is the cache built from the same files on local disk, file for file (but the manifest's
source record), sample for sample and field for field. Objects are listed with ListObjectsV2 once
and read with one GET each; a missing object is a skip naming its URL (fatal under --strict), a
missing table an error naming it; an object changed after a build changes the source digest and
fails verify --source.

Environment (tests/s3/meson.build): DSCACHE, PYTHONPATH (the built Python module)."""
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import testrunner  # noqa: E402

from nginx import Nginx  # noqa: E402
from rgw import Rgw, run_cases  # noqa: E402
from s3_cache_helpers import BUCKET, check, run, s3_env, samples, use_env, write_pngs  # noqa: E402

OPTS = ["--size", "16", "--shard-size", "2K"]


def upload_tree(s3, root, prefix):
    """Every file under `root` as s3://BUCKET/prefix/RELATIVE_PATH."""
    c = s3.client()
    for f in sorted(Path(root).rglob("*")):
        if f.is_file():
            c.upload_file(str(f), BUCKET, f"{prefix}/{f.relative_to(root)}")


def listings(requests):
    """The ListObjectsV2 requests among `requests` (Rgw.requests()), sorted."""
    return sorted(p for (m, p, st) in requests if m == "GET" and "list-type=2" in p)


def manifest(cache):
    return json.loads(Path(cache, "manifest.json").read_text())


def same_cache(here, there, same_names=True):
    """The cache `there` (built from object storage) is `here` (built from local disk): every file
    byte for byte, the manifest but its source record (and, when the sources' names differ, the
    checksums of sources.jsonl and skipped.jsonl), and every sample, label and field as read."""
    names = {p.name for p in Path(here).iterdir()}
    check(names == {p.name for p in Path(there).iterdir()},
          f"files {sorted(names)} / {sorted(p.name for p in Path(there).iterdir())}")
    for name in sorted(names - {"manifest.json"}):
        if not same_names and name in ("sources.jsonl", "skipped.jsonl"):
            continue
        check(Path(here, name).read_bytes() == Path(there, name).read_bytes(), f"{name} differs")
    mh, mt = manifest(here), manifest(there)
    for m in (mh, mt):
        del m["source"], m["created_utc"]
        if not same_names:
            for f in m["files"].values():
                if f["file"] in ("sources.jsonl", "skipped.jsonl"):
                    del f["xxh64"], f["bytes"]
    check(mh == mt, f"manifests differ:\n{json.dumps(mh)}\n{json.dumps(mt)}")
    import dscache
    a, b = dscache.Cache(str(here)), dscache.Cache(str(there))
    check(len(a) == len(b) and len(a) > 0, f"{len(a)} / {len(b)} samples")
    for k, (x, y) in enumerate(zip(samples(a), samples(b))):
        check(np.array_equal(x[0], y[0]) and x[1] == y[1], f"sample {k} differs")
        fa, fb = a.sample_fields(k), b.sample_fields(k)
        check(fa.keys() == fb.keys(), f"sample {k}: fields {list(fa)} / {list(fb)}")
        for name in fa:
            check(np.array_equal(np.asarray(fa[name]), np.asarray(fb[name])),
                  f"sample {k}: field {name} {fa[name]!r} / {fb[name]!r}")


def sources(cache):
    return [json.loads(line) for line in Path(cache, "sources.jsonl").read_text().splitlines()]


def case_table_csv_relative(tmp):
    """A CSV table in the bucket whose paths are relative to it ('class0/000.png', with a './'
    and a 'sub/../' among them): the table read with one GET, the images listed with one
    ListObjectsV2 request (of the folder they share; the masks with another) and read with one
    GET each; the cache is the one built from the same table and files on disk, label and fields
    (text, float, a mask image beside each) included; verify --source re-reads the objects."""
    import cv2
    src = Path(tmp, "src")
    write_pngs(src, classes=3, per_class=5)
    Path(src, "sub").mkdir()
    Path(src, "masks").mkdir()
    rows = ["image_path,label,caption,score,seg"]
    for k, f in enumerate(sorted(src.rglob("*.png"))):
        rel = str(f.relative_to(src))
        mask = f"masks/{k:03d}.png"
        assert cv2.imwrite(str(src / mask), np.full((24, 20), k % 4, dtype=np.uint8))
        rel = {3: "./" + rel, 7: "sub/../" + rel}.get(k, rel)
        rows.append(f"{rel},{f.parent.name},a photo of {k},{k / 4},{mask}")
    Path(src, "table.csv").write_text("\n".join(rows) + "\n")
    opts = [*OPTS, "--field", "seg=mask"]
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        upload_tree(s3, src, "raw")
        run(["build", str(src / "table.csv"), str(tmp / "here"), *opts], env=env)
        before = len(s3.requests())
        r = run(["build", f"s3://{BUCKET}/raw/table.csv", str(tmp / "there"), *opts], env=env)
        check("built 15 samples" in r.stdout, r.stdout + r.stderr)
        seen = s3.requests()[before:]
        lists = listings(seen)
        check(lists == [f"/{BUCKET}?list-type=2&prefix=raw%2F",
                        f"/{BUCKET}?list-type=2&prefix=raw%2Fmasks%2F"],
              f"listing requests: {lists}")
        check(s3.gets(f"/{BUCKET}/raw/table.csv") == 1, "the table was not read once")
        for f in sorted(src.rglob("*.png")):  # images and masks
            key = f"/{BUCKET}/raw/{f.relative_to(src)}"
            check(s3.gets(key) == 1, f"{key} read {s3.gets(key)} times")
        check(manifest(tmp / "there")["source"]["root"] == f"s3://{BUCKET}/raw/table.csv",
              f"source {manifest(tmp / 'there')['source']}")
        use_env(env)
        same_cache(tmp / "here", tmp / "there")
        r = run(["verify", str(tmp / "there"), "--source"], env=env)
        check("OK" in r.stdout, r.stdout)


def case_table_jsonl_s3_urls(tmp):
    """A local JSONL table whose image_path values are s3:// URLs (two prefixes of the bucket):
    the cache is the one built from a JSONL naming the same files on disk, class names, a float
    and a multi-hot field included; one listing request for the bucket's objects."""
    src = Path(tmp, "src")
    write_pngs(src, classes=2, per_class=6)
    here, there = [], []
    for k, f in enumerate(sorted(src.rglob("*.png"))):
        row = {"label": f.parent.name, "weight": k / 8,
               "tags": ["odd"] if k % 2 else ["even", "small"] if k < 5 else ["even"]}
        prefix = "a" if k % 3 else "b"
        here.append(dict(row, image_path=str(f)))
        there.append(dict(row, image_path=f"s3://{BUCKET}/{prefix}/{f.relative_to(src)}"))
    Path(tmp, "here.jsonl").write_text("".join(json.dumps(r) + "\n" for r in here))
    Path(tmp, "there.jsonl").write_text("".join(json.dumps(r) + "\n" for r in there))
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        upload_tree(s3, src, "a")
        upload_tree(s3, src, "b")
        fields = ["--field", "tags=multi-hot"]
        run(["build", str(tmp / "here.jsonl"), str(tmp / "here"), *OPTS, *fields], env=env)
        before = len(s3.requests())
        r = run(["build", str(tmp / "there.jsonl"), str(tmp / "there"), *OPTS, *fields], env=env)
        check("built 12 samples" in r.stdout, r.stdout + r.stderr)
        lists = listings(s3.requests()[before:])
        check(lists == [f"/{BUCKET}?list-type=2&prefix="], f"listing requests: {lists}")
        for row in there:
            key = row["image_path"][len("s3:/"):]
            check(s3.gets(key) == 1, f"{key} read {s3.gets(key)} times")
        check(sorted(sources(tmp / "there")) == sorted(r["image_path"] for r in there),
              f"sources.jsonl names {sources(tmp / 'there')}")
        use_env(env)
        same_cache(tmp / "here", tmp / "there", same_names=False)
        r = run(["verify", str(tmp / "there"), "--source"], env=env)
        check("OK" in r.stdout, r.stdout)


def coco_fixture(tmp):
    """A COCO instances file over 8 PNGs under tmp/coco/images (two in a sub-folder), with boxes,
    a polygon and a crowd RLE; returns (images folder, JSON path)."""
    import cv2
    images = Path(tmp, "coco", "images")
    (images / "val").mkdir(parents=True)
    rng = np.random.default_rng(11)
    doc = {"images": [], "annotations": [],
           "categories": [{"id": 3, "name": "cat"}, {"id": 7, "name": "dog"}]}
    for k in range(8):
        h, w = 20 + k, 24
        name = f"val/{k:03d}.png" if k < 2 else f"{k:03d}.png"
        assert cv2.imwrite(str(images / name), rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        doc["images"].append({"id": 100 + k, "file_name": name, "height": h, "width": w})
        doc["annotations"].append({"id": 2 * k, "image_id": 100 + k, "category_id": 3 if k % 2
                                   else 7, "bbox": [1, 2, 10, 8], "iscrowd": 0,
                                   "segmentation": [[1, 2, 11, 2, 11, 10, 1, 10]]})
        if k % 3 == 0:
            doc["annotations"].append({"id": 2 * k + 1, "image_id": 100 + k, "category_id": 3,
                                       "bbox": [5, 5, 4, 4], "iscrowd": 1,
                                       "segmentation": {"size": [h, w],
                                                        "counts": [5 * h, w * h - 5 * h]}})
    path = Path(tmp, "coco", "instances.json")
    path.write_text(json.dumps(doc))
    return images, path


def case_coco_image_root_s3(tmp):
    """COCO with --image-root s3://BUCKET/coco/images/ (trailing '/' or not), the JSON local and
    then in the bucket too: each cache is the one built with the images on disk (boxes, box
    labels, crowd flags, image ids and the semantic mask); the images listed once and read with
    one GET each; verify --source reads them again from the image root."""
    images, ann = coco_fixture(tmp)
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        upload_tree(s3, images, "coco/images")
        s3.client().upload_file(str(ann), BUCKET, "coco/ann/instances.json")
        opts = [*OPTS, "--coco-mask", "semantic"]
        run(["build", str(ann), str(tmp / "here"), "--image-root", str(images), *opts], env=env)
        root = f"s3://{BUCKET}/coco/images"
        for json_at, out, root_arg in ((str(ann), "there", root + "/"),
                                       (f"s3://{BUCKET}/coco/ann/instances.json", "there2", root)):
            before = len(s3.requests())
            r = run(["build", json_at, str(tmp / out), "--image-root", root_arg, *opts], env=env)
            check("built 8 samples" in r.stdout, r.stdout + r.stderr)
            seen = s3.requests()[before:]
            lists = listings(seen)
            check(lists == [f"/{BUCKET}?list-type=2&prefix=coco%2Fimages%2F"],
                  f"listing requests: {lists}")
            for f in sorted(images.rglob("*.png")):
                key = f"/{BUCKET}/coco/images/{f.relative_to(images)}"
                n = sum(1 for (m, p, st) in seen if m == "GET" and p == key)
                check(n == 1, f"{key} read {n} times")
            m = manifest(tmp / out)
            check(m["source"]["kind"] == "coco" and m["source"]["labels"] == root and
                  m["source"]["root"] == json_at, f"source {m['source']}")
            use_env(env)
            same_cache(tmp / "here", tmp / out)
            r = run(["verify", str(tmp / out), "--source"], env=env)
            check("OK" in r.stdout, r.stdout)


def case_table_http_nginx(tmp):
    """A TSV table served over http:// by nginx, its paths relative to it: each image looked up
    with a HEAD (a web server cannot be listed) and read with one GET; the cache is the one built
    from the same table on disk."""
    src = Path(tmp, "www", "ds")
    write_pngs(src, classes=2, per_class=4)
    rows = ["path\tlabel"] + [f"{f.relative_to(src)}\t{f.parent.name}"
                               for f in sorted(src.rglob("*.png"))]
    Path(src, "list.tsv").write_text("\n".join(rows) + "\n")
    run(["build", str(src / "list.tsv"), str(tmp / "here"), *OPTS])
    with Nginx(Path(tmp, "www"), tmp / "nginx") as web:
        env = s3_env_free(tmp)
        run(["build", f"{web.url}/ds/list.tsv", str(tmp / "there"), *OPTS], env=env)
        for f in sorted(src.rglob("*.png")):
            path = f"/ds/{f.relative_to(src)}"
            heads = [p for (m, p, st) in web.requests() if m == "HEAD" and p == path]
            check(web.gets(path) == 1 and len(heads) == 1,
                  f"{path}: {web.gets(path)} GETs, {len(heads)} HEADs")
        use_env(env)
        same_cache(tmp / "here", tmp / "there")


def s3_env_free(tmp):
    """A child's environment with no credentials or endpoint, a local cache under tmp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(DSCACHE_LOCAL_CACHE=str(Path(tmp, "local")), HOME=str(tmp))
    return env


def class_table(tmp, extra_row=None):
    """tmp/src: 2 class folders of 3 PNGs and table.csv listing them (image_path,label), with
    `extra_row` (position, line) inserted; returns the folder."""
    src = Path(tmp, "src")
    write_pngs(src, classes=2, per_class=3)
    rows = ["image_path,label"] + [f"{f.relative_to(src)},{f.parent.name}"
                                   for f in sorted(src.rglob("*.png"))]
    if extra_row is not None:
        rows.insert(*extra_row)
    Path(src, "table.csv").write_text("\n".join(rows) + "\n")
    return src


def case_missing_object(tmp):
    """A table naming an object that is not there: the build skips it with a reason naming its
    URL, as a missing file on disk is; --strict stops on it (exit 3) naming the URL; a table,
    COCO file or image root that is not there is an error naming the URL. Nothing hangs: every
    command is given 60 s."""
    src = class_table(tmp, extra_row=(3, "class0/gone.png,class0"))
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        upload_tree(s3, src, "raw")
        gone = f"s3://{BUCKET}/raw/class0/gone.png"
        table = f"s3://{BUCKET}/raw/table.csv"
        r = run(["build", table, str(tmp / "skips"), *OPTS], env=env, timeout=60)
        out = r.stdout + r.stderr
        check("built 6 samples (1 skipped" in out and gone in out and "no such object" in out,
              out)
        skips = Path(tmp, "skips", "skipped.jsonl").read_text()
        check("class0/gone.png" in skips and "no such object" in skips, skips)
        r = run(["build", table, str(tmp / "strict"), "--strict", *OPTS], env=env, timeout=60,
                check_rc=3)
        check(gone in r.stderr and "no such object" in r.stderr, r.stderr)
        check(not (tmp / "strict" / "manifest.json").exists(), "a --strict build published")
        missing = f"s3://{BUCKET}/raw/nothing.csv"
        r = run(["build", missing, str(tmp / "none"), *OPTS], env=env, timeout=60, check_rc=1)
        check(missing in r.stderr and "404" in r.stderr, r.stderr)
        images, ann = coco_fixture(tmp)
        r = run(["build", f"s3://{BUCKET}/coco/none.json", str(tmp / "c1"), "--image-root",
                 f"s3://{BUCKET}/coco/images", *OPTS], env=env, timeout=60, check_rc=1)
        check(f"s3://{BUCKET}/coco/none.json" in r.stderr, r.stderr)
        r = run(["build", str(ann), str(tmp / "c2"), "--image-root",
                 f"s3://{BUCKET}/coco/images", *OPTS], env=env, timeout=60, check_rc=1)
        check(f"skipped s3://{BUCKET}/coco/images/val/000.png: no such object" in r.stderr and
              "all 8 of 8 entries were skipped" in r.stderr, r.stderr)
        r = run(["build", str(ann), str(tmp / "c3"), "--image-root",
                 "s3://no-such-bucket/images", *OPTS], env=env, timeout=60, check_rc=1)
        check("s3://no-such-bucket/images/" in r.stderr and "NoSuchBucket" in r.stderr, r.stderr)


def case_changed_object(tmp):
    """An object a table names, rewritten after the build: the listing's ETag is in the source
    digest (a --resume of the old build would refuse the new listing), and verify --source on
    the cache reports the sample, naming its URL."""
    src = class_table(tmp)
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        upload_tree(s3, src, "raw")
        table = f"s3://{BUCKET}/raw/table.csv"
        run(["build", table, str(tmp / "a"), *OPTS], env=env)
        run(["build", table, str(tmp / "b"), *OPTS], env=env)
        digest = manifest(tmp / "a")["source"]["digest"]
        check(manifest(tmp / "b")["source"]["digest"] == digest, "one listing, two digests")
        old, new = src / "class1" / "001.png", src / "class0" / "000.png"
        check(old.stat().st_size == new.stat().st_size, "fixture: the PNGs differ in size")
        s3.client().upload_file(str(new), BUCKET, "raw/class1/001.png")  # only the ETag says
        run(["build", table, str(tmp / "c"), *OPTS], env=env)
        check(manifest(tmp / "c")["source"]["digest"] != digest,
              "the source digest missed a changed object")
        r = run(["verify", str(tmp / "a"), "--source"], env=env, check_rc=None)
        check(r.returncode != 0 and f"s3://{BUCKET}/raw/class1/001.png" in r.stdout + r.stderr,
              f"exit {r.returncode}: {r.stdout} {r.stderr}")


CASES = {
    "table_csv_relative": case_table_csv_relative,
    "table_jsonl_s3_urls": case_table_jsonl_s3_urls,
    "coco_image_root_s3": case_coco_image_root_s3,
    "table_http_nginx": case_table_http_nginx,
    "missing_object": case_missing_object,
    "changed_object": case_changed_object,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-"))
