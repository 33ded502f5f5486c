"""bench/scale.py's synthetic sources, made in a multiprocessing pool and reused by their
`.complete` marker: N small JPEGs in class folders with a CSV table naming them, and COCO
instances files (80 categories with COCO's ids, RLE crowds and polygons) over small JPEGs."""
import json
import math
import multiprocessing
import os
import shutil
import time

import numpy as np


GEN_VERSION = 1


# COCO's 80 category ids (1..90 with gaps), as instances_train2017.json has them.
COCO_IDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
            25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49,
            50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74,
            75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]


# ---------------------------------------------------------------------------------------------
# Synthetic sources


def _jpeg(rng, w, h):
    import cv2
    # A smooth gradient with a little noise: compresses like a small photo thumbnail.
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    c = rng.random(6, dtype=np.float32)
    img = np.empty((h, w, 3), np.float32)
    for k in range(3):
        img[:, :, k] = 255 * (c[k] * x + c[k + 3] * y) / 2
    img += rng.normal(0, 8, img.shape).astype(np.float32)
    ok, buf = cv2.imencode(".jpg", np.clip(img, 0, 255).astype(np.uint8),
                           [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def _write_folder_chunk(job):
    root, start, stop, classes = job
    rng = np.random.default_rng(start)
    for i in range(start, stop):
        w, h = (int(v) for v in rng.integers(32, 65, 2))
        with open(os.path.join(root, f"c{i % classes:04d}", f"{i:07d}.jpg"), "wb") as f:
            f.write(_jpeg(rng, w, h))
    return stop - start


def _write_coco_chunk(job):
    root, sizes, start, stop = job
    rng = np.random.default_rng(10**9 + start)
    for i in range(start, stop):
        w, h = sizes[i - start]
        with open(os.path.join(root, f"{i + 1:012d}.jpg"), "wb") as f:
            f.write(_jpeg(rng, w, h))
    return stop - start


def _chunks(n, parts):
    step = max(1, min(2000, -(-n // parts)))
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def _marker_ok(d, params):
    try:
        with open(os.path.join(d, ".complete")) as f:
            return json.load(f) == params
    except (OSError, ValueError):
        return False


def _write_marker(d, params):
    with open(os.path.join(d, ".complete"), "w") as f:
        json.dump(params, f)


def make_folder(work, n, procs):
    """WORK/src-N: N JPEGs in class folders plus table.csv; reused when complete."""
    d = os.path.join(work, f"src-{n}")
    classes = min(1000, n)
    params = {"version": GEN_VERSION, "n": n, "classes": classes}
    if _marker_ok(d, params):
        return d, 0.0, True
    t0 = time.perf_counter()
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for c in range(classes):
        os.mkdir(os.path.join(d, f"c{c:04d}"))
    with multiprocessing.Pool(procs) as pool:
        done = sum(pool.imap_unordered(
            _write_folder_chunk, [(d, a, b, classes) for a, b in _chunks(n, procs * 8)]))
    assert done == n
    rng = np.random.default_rng(n)
    ints = rng.integers(0, 1000, n)
    floats = rng.random(n)
    with open(os.path.join(d, "table.csv"), "w") as f:
        f.write("image_path,label,aux_int,aux_float\n")
        for i in range(n):
            f.write(f"c{i % classes:04d}/{i:07d}.jpg,c{i % classes:04d},{ints[i]},"
                    f"{floats[i]:.6f}\n")
    _write_marker(d, params)
    return d, time.perf_counter() - t0, False


def _rle_string(counts):
    """COCO's compressed RLE counts string (pycocotools' rleToString)."""
    out = []
    for i, x in enumerate(counts):
        x = int(x)
        if i > 2:
            x -= int(counts[i - 2])
        more = True
        while more:
            c = x & 0x1f
            x >>= 5
            more = (x != -1) if (c & 0x10) else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def _rle_counts(mask):
    """Column-major run lengths starting with a background run (COCO's RLE)."""
    flat = mask.T.reshape(-1).astype(np.uint8)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat[0] == 1:
        runs = [0] + runs
    return runs


def make_coco(work, images, annotations, procs):
    """WORK/coco-I-A: instances.json with I images and A annotations over I small JPEGs."""
    d = os.path.join(work, f"coco-{images}-{annotations}")
    params = {"version": GEN_VERSION, "images": images, "annotations": annotations}
    if _marker_ok(d, params):
        return d, 0.0, True
    t0 = time.perf_counter()
    shutil.rmtree(d, ignore_errors=True)
    img_dir = os.path.join(d, "images")
    os.makedirs(img_dir)
    rng = np.random.default_rng(2017)
    sizes = rng.integers(40, 65, (images, 2))
    jobs = [(img_dir, [tuple(int(v) for v in sizes[i]) for i in range(a, b)], a, b)
            for a, b in _chunks(images, procs * 8)]
    with multiprocessing.Pool(procs) as pool:
        assert sum(pool.imap_unordered(_write_coco_chunk, jobs)) == images
    # Annotations spread over the images as COCO's are (some with none, some with many).
    owner = np.sort(rng.integers(0, images, annotations))
    imgs = [{"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "width": int(sizes[i][0]),
             "height": int(sizes[i][1]), "license": 1, "coco_url": "", "date_captured": ""}
            for i in range(images)]
    anns = []
    for k in range(annotations):
        i = int(owner[k])
        w, h = int(sizes[i][0]), int(sizes[i][1])
        bw = float(rng.uniform(4, w - 1))
        bh = float(rng.uniform(4, h - 1))
        x0 = float(rng.uniform(0, w - bw))
        y0 = float(rng.uniform(0, h - bh))
        a = {"id": k + 1, "image_id": i + 1, "category_id": COCO_IDS[k % 80],
             "bbox": [round(x0, 2), round(y0, 2), round(bw, 2), round(bh, 2)],
             "area": round(bw * bh * 0.6, 2)}
        if k % 100 == 0:
            m = np.zeros((h, w), np.uint8)
            m[int(y0):int(y0 + bh), int(x0):int(x0 + bw)] = 1
            runs = _rle_counts(m)
            a["iscrowd"] = 1
            a["segmentation"] = {"size": [h, w],
                                 "counts": _rle_string(runs) if k % 200 == 0 else runs}
        else:
            pts = int(rng.integers(4, 25))
            t = np.sort(rng.uniform(0, 2 * math.pi, pts))
            cx, cy = x0 + bw / 2, y0 + bh / 2
            px = cx + np.cos(t) * bw / 2 * rng.uniform(0.6, 1.0, pts)
            py = cy + np.sin(t) * bh / 2 * rng.uniform(0.6, 1.0, pts)
            poly = np.empty(2 * pts)
            poly[0::2], poly[1::2] = px, py
            a["iscrowd"] = 0
            a["segmentation"] = [[round(float(v), 2) for v in poly]]
        anns.append(a)
    cats = [{"id": c, "name": f"cat{c}", "supercategory": "thing"} for c in COCO_IDS]
    doc = {"info": {"description": "synthetic, bench/scale.py"}, "licenses": [],
           "images": imgs, "annotations": anns, "categories": cats}
    with open(os.path.join(d, "instances.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    _write_marker(d, params)
    return d, time.perf_counter() - t0, False
