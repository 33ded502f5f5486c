"""What the object-storage cache tests share (test_s3_cache.py, test_s3_local.py,
test_s3_sources.py): PNG class folders, running `dscache` against a server's environment, the
samples and batches a cache serves, the same source built locally and to s3://, a bucket's
objects, the local copies of remote caches."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testrunner import Skip  # noqa: E402



DSCACHE = os.environ.get("DSCACHE", "")


BUCKET = "dsc"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def write_pngs(root, classes=3, per_class=20, h=24, w=20, seed=5):
    import cv2
    rng = np.random.default_rng(seed)
    for c in range(classes):
        os.makedirs(f"{root}/class{c}", exist_ok=True)
        for i in range(per_class):
            img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            assert cv2.imwrite(f"{root}/class{c}/{i:03d}.png", img)


def run(args, env=None, timeout=300, check_rc=0):
    if not DSCACHE:
        raise Skip("DSCACHE not set (run through meson test)")
    r = subprocess.run([DSCACHE, *args], capture_output=True, text=True, timeout=timeout,
                       env=env)
    if check_rc is not None:
        check(r.returncode == check_rc,
              f"dscache {' '.join(args)}: exit {r.returncode}, expected {check_rc}\n"
              f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def s3_env(s3, tmp, **extra):
    """A child's environment: the server's credentials and endpoint, a local cache under tmp."""
    env = dict(os.environ)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        env.pop(k, None)
    env.update(s3.env())
    env["DSCACHE_LOCAL_CACHE"] = str(Path(tmp, "local"))
    env["HOME"] = str(tmp)  # no ~/.aws of the machine's user
    env.update({k: str(v) for k, v in extra.items()})
    return env


def use_env(env):
    """This process's environment for in-process dscache opens (the module reads it then)."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION",
              "DSCACHE_LOCAL_CACHE", "DSCACHE_LOCAL_CACHE_SIZE", "HOME"):
        if k in env:
            os.environ[k] = env[k]


def samples(cache):
    return [(np.asarray(cache[i][0]).copy(), cache.label(i)) for i in range(len(cache))]


def batches(cache, seed=3):
    import dscache
    out = []
    loader = dscache.Loader(cache, batch_size=8, shuffle=True, seed=seed, workers=2)
    for b in loader:
        out.append((np.asarray(b[0]).copy(), np.asarray(b[1]).copy()))
    return out


def same_batches(a, b, what):
    check(len(a) == len(b), f"{what}: {len(a)} batches against {len(b)}")
    for k, (x, y) in enumerate(zip(a, b)):
        check(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]),
              f"{what}: batch {k} differs")


def build_both(s3, tmp, env, prefix="c", extra=(), shard_size="2K"):
    """The same source built locally and to s3://BUCKET/prefix; returns (local dir, url, stdout)."""
    src = Path(tmp, "src")
    if not src.exists():
        write_pngs(src)
    local = Path(tmp, f"local-{prefix}")
    opts = ["--size", "16", "--shard-size", shard_size, *extra]
    run(["build", str(src), str(local), *opts], env=env)
    url = f"s3://{BUCKET}/{prefix}"
    r = run(["build", str(src), url, *opts], env=env)
    return local, url, r.stdout + r.stderr


def objects(s3, prefix):
    c = s3.client()
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = o["Size"]
    return out


def local_copies(tmp):
    root = Path(tmp, "local")
    return sorted(p.name for p in root.iterdir() if p.is_dir() and "-" in p.name
                  and not p.name.startswith("upload-"))


def stream_budget(local, spare):
    """The shard names of the cache at `local` and a local-cache budget that holds its other
    files and `spare` of its largest shards (what the streamed tests give DSCACHE_LOCAL_CACHE_SIZE);
    returns (shard names, total bytes, budget)."""
    m = json.loads((Path(local) / "manifest.json").read_text())
    shards = [s["file"] for s in m["shards"]]
    total = sum(f.stat().st_size for f in Path(local).iterdir())
    shard_bytes = [(Path(local) / name).stat().st_size for name in shards]
    return shards, total, total - sum(shard_bytes) + spare * max(shard_bytes)
