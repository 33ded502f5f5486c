#!/usr/bin/python3
"""Caches on object storage, end to end against a real S3 server (a private Ceph radosgw that each
case starts in its temp dir: rgw.py) and a real web server (nginx: nginx.py): `dscache build`
to s3://, every reader serving it from the verified local copy, byte for byte what the local
build serves; resume of an interrupted upload; N processes downloading each file once (counted
in the server's log); eviction under a budget; a server stopped and restarted; a changed object
refused; wrong credentials; no secret written anywhere.

Environment (tests/s3/meson.build): DSCACHE, PYTHONPATH (the built Python module)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import testrunner  # noqa: E402
from testrunner import Skip  # noqa: E402

from rgw import Rgw, run_cases  # noqa: E402
from nginx import Nginx  # noqa: E402

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


def case_build_serve_exact(tmp):
    """build to s3:// then every reader: the local build's samples and batches, byte for byte;
    manifest.json uploaded last; no secret in any output or file."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, out = build_both(s3, tmp, env)
        check("uploaded" in out, f"build to s3 said nothing of an upload:\n{out}")
        objs = objects(s3, "c")
        m = json.loads((local / "manifest.json").read_text())
        check(len(m["shards"]) >= 3, f"want several shards, got {len(m['shards'])}")
        for s in m["shards"]:
            check(objs.get(s["file"]) == s["bytes"], f"{s['file']} in the bucket: {objs}")
        check("manifest.json" in objs, f"no manifest.json in the bucket: {objs}")
        # The manifest was the last PUT.
        puts = [p for (meth, p, st) in s3.requests() if meth == "PUT" and f"/{BUCKET}/c/" in p]
        check(puts and puts[-1].split("?")[0].endswith("/manifest.json"),
              f"manifest.json was not the last upload: {puts[-3:]}")
        # Every file carries its XXH64 (what a resumed upload compares).
        head = s3.client().head_object(Bucket=BUCKET, Key="c/" + m["shards"][0]["file"])
        check(head["Metadata"].get("xxh64") == m["shards"][0]["xxh64"],
              f"x-amz-meta-xxh64 of the first shard: {head['Metadata']}")

        run(["verify", url], env=env)
        info = json.loads(run(["inspect", url, "--json"], env=env).stdout)
        check(info["count"] == 60, f"inspect --json count {info['count']}")

        use_env(env)
        import dscache
        remote = dscache.Cache(url)
        here = dscache.Cache(str(local))
        check(len(remote) == len(here) == 60, f"{len(remote)} samples remote, {len(here)} local")
        for k, (a, b) in enumerate(zip(samples(remote), samples(here))):
            check(np.array_equal(a[0], b[0]) and a[1] == b[1], f"sample {k} differs")
        same_batches(batches(remote), batches(here), "Loader batches from s3 against local")

        secret = s3.secret_key
        for path in Path(tmp, "local").rglob("*"):
            if path.is_file():
                check(secret.encode() not in path.read_bytes(), f"the secret is in {path}")
        check(secret not in out, "the secret is in the build's output")


def case_resume_upload(tmp):
    """An upload cut short (objects missing, one damaged, no manifest): --resume keeps what the
    bucket holds with the right size and XXH64, sends the rest, and the cache reads exact. A
    finished cache is not replaced without --force (exit 4)."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        src = str(Path(tmp, "src"))
        opts = ["--size", "16", "--shard-size", "2K"]
        r = run(["build", src, url, *opts], env=env, check_rc=4)
        check("--resume" in r.stderr and "--force" in r.stderr, r.stderr)

        m = json.loads((local / "manifest.json").read_text())
        c = s3.client()
        shards = [s["file"] for s in m["shards"]]
        c.delete_object(Bucket=BUCKET, Key="c/manifest.json")
        c.delete_object(Bucket=BUCKET, Key="c/" + shards[0])
        c.delete_object(Bucket=BUCKET, Key="c/" + shards[1])
        size = m["shards"][2]["bytes"]
        c.put_object(Bucket=BUCKET, Key="c/" + shards[2], Body=b"\0" * size)  # same size
        # A reader meanwhile: no manifest, not a cache (never half of one).
        r = run(["verify", url], env=env, check_rc=1)
        check("manifest.json" in r.stderr, r.stderr)

        before = len([1 for (meth, p, st) in s3.requests() if meth == "PUT"])
        r = run(["build", src, url, *opts, "--resume"], env=env)
        puts = [p for (meth, p, st) in s3.requests() if meth == "PUT"][before:]
        sent = sorted(p.split("?")[0].rsplit("/", 1)[1] for p in puts)
        check(sent == sorted([shards[0], shards[1], shards[2], "manifest.json"]),
              f"a resumed upload sent {sent}")
        check("kept" in r.stdout, r.stdout)

        use_env(env)
        import dscache
        remote, here = dscache.Cache(url), dscache.Cache(str(local))
        same_batches(batches(remote), batches(here), "after a resumed upload")


OPEN_AND_SUM = """
import sys, dscache, numpy as np
c = dscache.Cache(sys.argv[1])
print(sum(int(np.asarray(c[i][0], dtype=np.int64).sum()) for i in range(len(c))))
"""


def case_shared_download_once(tmp):
    """Three processes opening one remote cache at once on one node download each file once
    (the server's log counts the GETs), and all three read the same samples."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        m = json.loads((local / "manifest.json").read_text())
        procs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_SUM, url], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(3)]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (o, e) in zip(procs, outs):
            check(p.returncode == 0, f"a reader failed: {e}")
        check(len({o for o, _ in outs}) == 1, f"readers disagree: {outs}")
        names = [s["file"] for s in m["shards"]] + [f["file"] for f in m["files"].values()]
        for name in names:
            if any(e["file"] == name and e["bytes"] == 0 for e in m["files"].values()):
                continue  # an empty file is made, not fetched
            n = s3.gets(f"/{BUCKET}/c/{name}")
            check(n == 1, f"{name} was downloaded {n} times by 3 processes on one node")
        check(s3.gets(f"/{BUCKET}/c/manifest.json") == 3,
              f"each process reads the manifest: {s3.gets('manifest.json')}")


OPEN_AND_HOLD = """
import os, sys, time, dscache
c = dscache.Cache(sys.argv[1])
open(os.path.join(sys.argv[2], str(os.getpid())), "w").close()
deadline = time.monotonic() + 60
while len(os.listdir(sys.argv[2])) < int(sys.argv[3]):  # every process has it open
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.01)
print(len(c))
"""


def case_open_together_held(tmp):
    """Processes that open one remote cache at the same moment and keep it open until all have
    it (as the ranks of a job do) all get it: the one that downloads never makes the others wait
    for it to close the copy. Several rounds, each with an empty local cache, so that the
    processes race for the download."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        # Deterministic first: one process holds the copy open; a second one finds it incomplete
        # (its manifest removed) and must finish it without waiting for the first to close it.
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, dscache; c = dscache.Cache(sys.argv[1]); print('open', flush=True); "
             "sys.stdin.read()", url], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        try:
            check(holder.stdout.readline().strip() == "open", "the holder did not open the cache")
            (tmp / "local" / local_copies(tmp)[0] / "manifest.json").unlink()
            r = run(["verify", url], env=env, timeout=120)
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
        for r in range(4):
            barrier = tmp / f"barrier{r}"
            barrier.mkdir()
            env_r = dict(env, DSCACHE_LOCAL_CACHE=str(tmp / f"local{r}"))
            procs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_HOLD, url, str(barrier),
                                       "3"], env=env_r, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(3)]
            try:
                outs = [p.communicate(timeout=120) for p in procs]
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                raise AssertionError(f"round {r}: a process never got the copy (deadlock)")
            for p, (o, e) in zip(procs, outs):
                check(p.returncode == 0 and o.strip() == "60",
                      f"round {r}: exit {p.returncode}, {o!r}, {e}")


def local_copies(tmp):
    root = Path(tmp, "local")
    return sorted(p.name for p in root.iterdir() if p.is_dir() and "-" in p.name
                  and not p.name.startswith("upload-"))


def case_budget_eviction(tmp):
    """Under a budget that holds one cache: opening a second evicts the first (nobody holds
    it); while a process holds the first open, the second is refused naming both numbers."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local_a, url_a, _ = build_both(s3, tmp, env, prefix="a")
        local_b, url_b, _ = build_both(s3, tmp, env, prefix="b")
        size = max(sum(f.stat().st_size for f in d.iterdir()) for d in (local_a, local_b))
        budget = str(int(size * 1.5))
        lim = ["--local-cache-size", budget]
        run(["verify", url_a, *lim], env=env)
        first = local_copies(tmp)
        check(len(first) == 1, f"one copy after opening a: {first}")
        run(["verify", url_b, *lim], env=env)
        second = local_copies(tmp)
        check(len(second) == 1 and second != first, f"a was not evicted for b: {second}")

        # A holds b open; opening a must not evict it.
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, dscache; c = dscache.Cache(sys.argv[1]); print('open', flush=True); "
             "sys.stdin.read()", url_b],
            env=dict(env, DSCACHE_LOCAL_CACHE_SIZE=budget), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        try:
            check(holder.stdout.readline().strip() == "open", "the holder did not open b")
            r = run(["verify", url_a, *lim], env=env, check_rc=1)
            check("budget" in r.stderr and budget in r.stderr, f"refusal: {r.stderr}")
            check(local_copies(tmp) == second, "a held copy was evicted")
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
        run(["verify", url_a, *lim], env=env)  # b is free again: evicted now
        check(len(local_copies(tmp)) == 1, f"copies: {local_copies(tmp)}")


STREAM_EPOCHS = """
import json, os, sys, time, numpy as np, dscache
url, out, kw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
gate = kw.pop("gate", None)  # after epoch 0, wait for this file
c = dscache.Cache(url)
res = {"n": len(c), "epochs": []}
for epoch in range(3):
    opts = dict(batch_size=8, shuffle="windowed", seed=11, workers=2, prefetch=1,
                return_indices=True)
    opts.update(kw)
    loader = dscache.Loader(c, **opts)
    loader.set_epoch(epoch)
    idx, images, labels = [], [], []
    for b in loader:
        images.append(np.asarray(b[0]).copy())
        labels.append(np.asarray(b[1]).copy())
        idx.append(np.asarray(b[2]).copy())
    np.savez(f"{out}-{epoch}.npz", images=np.concatenate(images), labels=np.concatenate(labels),
             idx=np.concatenate(idx))
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
print("done")
"""


def local_bytes(root):
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass  # evicted or renamed while counted
    return total


def case_stream_under_budget(tmp):
    """A remote cache twice as large as the local cache's budget is streamed shard by shard:
    every epoch of a windowed Loader is exact (each sample once, the bytes and labels of the
    local build's), the local cache never holds more than the budget (sampled while it runs),
    shards are evicted and fetched again across epochs (the server's log), and the same explicit
    window geometry gives the local build's batches byte for byte. A budget too small for the
    Loader's windows is refused at once, naming the numbers."""
    import threading
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        write_pngs(tmp / "src", per_class=40)
        local, url, _ = build_both(s3, tmp, env, shard_size="6K")  # 8 samples a shard
        m = json.loads((local / "manifest.json").read_text())
        shards = [s["file"] for s in m["shards"]]
        check(len(shards) >= 12, f"the cache needs many shards to stream: {len(shards)}")
        total = sum(f.stat().st_size for f in local.iterdir())
        shard_bytes = [(local / name).stat().st_size for name in shards]
        # The other files and seven shards: three windows of two shards, and one to spare.
        budget = total - sum(shard_bytes) + 7 * max(shard_bytes)
        check(budget < total * 2 // 3, f"budget {budget} of {total}: not streamed")
        env = dict(env, DSCACHE_LOCAL_CACHE_SIZE=str(budget))
        import dscache
        ref = dscache.Cache(str(local))
        n = len(ref)
        most = [0]
        done = threading.Event()

        def watch():
            while not done.is_set():
                most[0] = max(most[0], local_bytes(tmp / "local"))
                time.sleep(0.005)

        t = threading.Thread(target=watch)
        t.start()
        try:
            for name, kw in (("auto", {}), ("explicit", {"block": 8, "window_blocks": 2})):
                p = subprocess.run([sys.executable, "-c", STREAM_EPOCHS, url, str(tmp / name),
                                    json.dumps(kw)], env=env, capture_output=True, text=True,
                                   timeout=240)
                check(p.returncode == 0, f"{name}: streaming reader failed: {p.stderr}")
        finally:
            done.set()
            t.join()
        check(0 < most[0] <= budget,
              f"the local cache held {most[0]} bytes, over its budget of {budget}")
        # Too small for the Loader's windows: refused when the Loader is made, not mid-epoch.
        p = subprocess.run([sys.executable, "-c", STREAM_EPOCHS, url, str(tmp / "big"),
                            json.dumps({"batch_size": 64})], env=env, capture_output=True,
                           text=True, timeout=120)
        check(p.returncode != 0 and "InvalidArgument" in p.stderr and "budget" in p.stderr,
              f"a Loader whose windows cannot fit: {p.returncode} {p.stderr}")
        for name in ("auto", "explicit"):
            for epoch in range(3):
                got = np.load(tmp / f"{name}-{epoch}.npz")
                idx = got["idx"]
                check(sorted(idx.tolist()) == list(range(n)),
                      f"{name} epoch {epoch}: not every sample once")
                for k, i in enumerate(idx.tolist()):
                    image, label = ref[i]
                    check(np.array_equal(got["images"][k], np.asarray(image)) and
                          int(got["labels"][k]) == label,
                          f"{name} epoch {epoch}: sample {i} differs from the local build's")
        # The explicit geometry: the local build's batches, order included.
        for epoch in range(3):
            loader = dscache.Loader(ref, batch_size=8, shuffle="windowed", seed=11, workers=2,
                                    prefetch=1, return_indices=True, block=8, window_blocks=2)
            loader.set_epoch(epoch)
            want = np.concatenate([np.asarray(b[2]).copy() for b in loader])
            got = np.load(tmp / f"explicit-{epoch}.npz")["idx"]
            check(np.array_equal(want, got), f"epoch {epoch}: the order differs from local")
        gets = {name: s3.gets(f"/{BUCKET}/c/{name}") for name in shards}
        check(all(g >= 1 for g in gets.values()), f"a shard never fetched: {gets}")
        check(sum(gets.values()) > len(shards),
              f"no shard was fetched again after eviction ({sum(gets.values())} GETs of "
              f"{len(shards)} shards): the cache was not streamed")
        copy = [d for d in (tmp / "local").iterdir() if d.is_dir()]
        check(len(copy) == 1, f"local copies: {copy}")
        present = [name for name in shards if (copy[0] / name).exists()]
        check(len(present) < len(shards), "every shard is local: nothing was evicted")
        # A whole-copy reader (verify) of a cache larger than the budget is refused clearly.
        r = run(["verify", url], env=env, check_rc=1)
        check("budget" in r.stderr and str(budget) in r.stderr, f"verify: {r.stderr}")


def stream_setup(s3, tmp, env, spare=7, per_class=40):
    """A cache of 3 * per_class / 8 shards (8 samples each) built locally and to s3://, and a
    budget that holds its other files and `spare` shards; returns (local, url, shard names,
    budget)."""
    write_pngs(tmp / "src", per_class=per_class)
    local, url, _ = build_both(s3, tmp, env, shard_size="6K")
    m = json.loads((local / "manifest.json").read_text())
    shards = [s["file"] for s in m["shards"]]
    total = sum(f.stat().st_size for f in local.iterdir())
    shard_bytes = [(local / name).stat().st_size for name in shards]
    return local, url, shards, total - sum(shard_bytes) + spare * max(shard_bytes)


def shard_gets(s3, shards):
    """GETs of these shards of s3://BUCKET/c that the server answered (one read of its log)."""
    targets = {f"/{BUCKET}/c/{name}" for name in shards}
    return sum(1 for m, t, _ in s3.requests() if m == "GET" and t.split("?")[0] in targets)


def check_stream_epochs(ref, out, epochs, **kw):
    """Each saved epoch of STREAM_EPOCHS equals the local cache's Loader with the same options,
    batch by batch (indices, images, labels)."""
    import dscache
    for epoch in range(epochs):
        opts = dict(batch_size=8, shuffle="windowed", seed=11, workers=2, prefetch=1,
                    return_indices=True, block=8, window_blocks=2)
        opts.update(kw)
        loader = dscache.Loader(ref, **opts)
        loader.set_epoch(epoch)
        want = [tuple(np.asarray(x).copy() for x in b) for b in loader]
        got = np.load(f"{out}-{epoch}.npz")
        check(np.array_equal(np.concatenate([w[2] for w in want]), got["idx"]),
              f"{out} epoch {epoch}: the order differs from the local cache's")
        check(np.array_equal(np.concatenate([w[0] for w in want]), got["images"]) and
              np.array_equal(np.concatenate([w[1] for w in want]), got["labels"]),
              f"{out} epoch {epoch}: the images or labels differ from the local cache's")


def case_stream_two_ranks(tmp):
    """Two ranks (two processes, world_size 2) stream one cache through one local cache at half
    its size, at the same time: each rank's batches equal the local cache's for that rank, and
    the ranks share the downloads (they read the same windows): fewer GETs than two ranks with
    a local cache each would need at the least."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        # Each rank's windows at hand (4 of 2 shards, with batches of 16 global positions
        # filled two at a time) and a shard, twice: the ranks are not kept in step by a
        # collective here, so each may be anywhere in its window.
        local, url, shards, budget = stream_setup(s3, tmp, env, spare=18, per_class=80)
        check(len(shards) >= 28, f"shards: {len(shards)}")
        env = dict(env, DSCACHE_LOCAL_CACHE_SIZE=str(budget))
        procs = [subprocess.Popen(
            [sys.executable, "-c", STREAM_EPOCHS, url, str(tmp / f"rank{r}"),
             json.dumps({"block": 8, "window_blocks": 2, "rank": r, "world_size": 2})],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(2)]
        outs = [p.communicate(timeout=240) for p in procs]
        for p, (o, e) in zip(procs, outs):
            check(p.returncode == 0, f"a rank failed: {e}")
        import dscache
        ref = dscache.Cache(str(local))
        for r in range(2):
            check_stream_epochs(ref, tmp / f"rank{r}", 3, rank=r, world_size=2)
        gets = shard_gets(s3, shards)
        print(f"stream_two_ranks: {gets} shard GETs for {len(shards)} shards x 3 epochs x 2 ranks")
        # Unshared, each rank would fetch every shard in epoch 0 and, with at most 18 of them
        # kept, at least the other S - 18 in each later epoch.
        unshared = 2 * (len(shards) + 2 * (len(shards) - 18))
        check(len(shards) <= gets < unshared,
              f"{gets} shard GETs for {len(shards)} shards, 3 epochs, 2 ranks (unshared: at "
              f"least {unshared}): the ranks did not share the downloads")


def case_stream_server_restart(tmp):
    """The server stopped for a while in the middle of a streamed run (shards still to fetch):
    the reader retries and the run completes with exact batches."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp, DSCACHE_REMOTE_RETRIES=8)
        local, url, shards, budget = stream_setup(s3, tmp, env)
        env = dict(env, DSCACHE_LOCAL_CACHE_SIZE=str(budget))
        out = tmp / "run"
        gate = tmp / "go"
        p = subprocess.Popen([sys.executable, "-c", STREAM_EPOCHS, url, str(out),
                              json.dumps({"block": 8, "window_blocks": 2, "gate": str(gate)})],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not Path(f"{out}-0.npz").exists() and p.poll() is None:
            check(time.monotonic() < deadline, "the first epoch never finished")
            time.sleep(0.01)
        if p.poll() is not None:
            raise AssertionError(f"the reader stopped after epoch 0: {p.communicate()}")
        before = shard_gets(s3, shards)
        s3.stop_rgw()
        gate.touch()  # epoch 1 starts with the server down: 7 of the 15 shards are kept
        time.sleep(2)
        s3.start_rgw()
        o, e = p.communicate(timeout=240)
        check(p.returncode == 0, f"after the restart: exit {p.returncode}: {e}")
        after = shard_gets(s3, shards)
        check(after > before, "no shard was fetched after the restart: nothing was tested")
        import dscache
        check_stream_epochs(dscache.Cache(str(local)), out, 3)


def case_server_restart(tmp):
    """The server stopped while a reader downloads: the reader retries and succeeds once it is
    back, with exact samples; stopped for good, the reader gives up with exit 10 naming the
    endpoint."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp, DSCACHE_REMOTE_RETRIES=8)
        local, url, _ = build_both(s3, tmp, env)
        s3.stop_rgw()
        p = subprocess.Popen([DSCACHE, "verify", url], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        check(p.poll() is None, "the reader did not wait for the server")
        s3.start_rgw()
        out, err = p.communicate(timeout=300)
        check(p.returncode == 0, f"after the restart: exit {p.returncode}: {err}")
        use_env(env)
        import dscache
        same_batches(batches(dscache.Cache(url)), batches(dscache.Cache(str(local))),
                     "after a server restart")

        s3.stop_rgw()
        env2 = s3_env(s3, tmp, DSCACHE_REMOTE_RETRIES=1, DSCACHE_LOCAL_CACHE=Path(tmp, "l2"))
        r = run(["verify", url], env=env2, check_rc=10)
        check(s3.endpoint.split("//")[1] in r.stderr, f"the endpoint is not named: {r.stderr}")


def case_changed_object_refused(tmp):
    """A shard replaced in the bucket under its manifest (same size, other bytes) is refused:
    exit 5 naming its URL; nothing of it is left in the local cache."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        m = json.loads((local / "manifest.json").read_text())
        name = m["shards"][1]["file"]
        data = bytearray((local / name).read_bytes())
        data[-1] ^= 0xFF
        s3.client().put_object(Bucket=BUCKET, Key="c/" + name, Body=bytes(data))
        r = run(["verify", url], env=env, check_rc=5)
        check(f"s3://{BUCKET}/c/{name}" in r.stderr and "changed" in r.stderr, r.stderr)
        left = [p.name for p in Path(tmp, "local").rglob(f"*{name}*")]
        check(not left, f"the refused file stayed in the local cache: {left}")
        r = run(["inspect", url], env=env, check_rc=5)  # every reader refuses it


def case_wrong_credentials(tmp):
    """A wrong secret: exit 10 naming the S3 error and which key was used, never a secret."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        wrong = "wrong" + s3.secret_key[5:]
        r = run(["verify", url], env=dict(env, AWS_SECRET_ACCESS_KEY=wrong), check_rc=10)
        check("SignatureDoesNotMatch" in r.stderr or "403" in r.stderr, r.stderr)
        check(s3.access_key[-4:] in r.stderr, f"which key was used is not said: {r.stderr}")
        check(wrong not in r.stderr and s3.secret_key not in r.stderr, "a secret was printed")


def case_stale_parts_never_trusted(tmp):
    """What a download killed with SIGKILL leaves (a temporary file, no manifest in the copy) is
    never served: the next reader removes it, downloads, and reads exact samples."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        # A real kill: a reader stopped with SIGKILL as soon as its copy directory exists.
        p = subprocess.Popen([DSCACHE, "verify", url], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        root = Path(tmp, "local")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [d for d in root.glob("*-*") if d.is_dir()]:
            time.sleep(0.001)
        p.send_signal(signal.SIGKILL)
        p.wait()
        copies = [d for d in root.glob("*-*") if d.is_dir() and not d.name.startswith("upload")]
        check(copies, "no copy directory was made")
        m = json.loads((local / "manifest.json").read_text())
        name = m["shards"][0]["file"]
        # And the worst a kill can leave: a half file under a temporary name, no manifest.
        (copies[0] / "manifest.json").unlink(missing_ok=True)
        (copies[0] / f".{name}.part-99999-0").write_bytes(b"half")
        run(["verify", url], env=env)
        check(not list(copies[0].glob(".*.part-*")), "a temporary file stayed")
        # A copy from an earlier boot of the machine (a crash may have lost unwritten pages):
        # its files are hashed again, and one that lost its bytes is downloaded again.
        shard = copies[0] / name
        good = shard.read_bytes()
        shard.write_bytes(b"\0" * len(good))
        (copies[0] / ".boot").write_text("an-earlier-boot")
        run(["verify", url], env=env)
        check(shard.read_bytes() == good, "a copy from an earlier boot was trusted unchecked")
        check((copies[0] / ".boot").read_text() != "an-earlier-boot", ".boot not renewed")
        check(s3.gets(f"/{BUCKET}/c/{name}") >= 2, "the damaged file was not fetched again")
        use_env(env)
        import dscache
        same_batches(batches(dscache.Cache(url)), batches(dscache.Cache(str(local))),
                     "after a killed download")


def case_http_nginx(tmp):
    """An http:// location: a cache directory served by nginx reads exactly as the local one."""
    src = Path(tmp, "src")
    write_pngs(src)
    www = Path(tmp, "www")
    www.mkdir()
    run(["build", str(src), str(www / "c"), "--size", "16", "--shard-size", "2K"])
    with Nginx(www, tmp / "nginx") as web:
        env = dict(os.environ, DSCACHE_LOCAL_CACHE=str(Path(tmp, "local")), HOME=str(tmp))
        url = f"{web.url}/c"
        run(["verify", url], env=env)
        info = json.loads(run(["inspect", url, "--json"], env=env).stdout)
        check(info["count"] == 60, f"count {info['count']}")
        check(web.gets("/c/manifest.json") == 2, f"manifest GETs: {web.gets('/c/manifest.json')}")
        check(web.gets("/c/labels.npy") == 1, "the copy was downloaded again")
        use_env(env)
        import dscache
        same_batches(batches(dscache.Cache(url)), batches(dscache.Cache(str(www / "c"))),
                     "http:// against local")
        r = run(["build", str(src), url, "--size", "16"], env=env, check_rc=2)
        check("read-only" in r.stderr, r.stderr)


def case_torch_dataloader(tmp):
    """dscache.torch.CacheDataset over s3:// in a DataLoader with 2 workers (fork): the local
    cache's batches; the workers read the copy the main process made (no second download)."""
    try:
        import torch
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        use_env(env)
        from dscache.torch import CacheDataset

        def epoch(where):
            dl = torch.utils.data.DataLoader(CacheDataset(where, batch_size=8, seed=1),
                                             batch_size=None, num_workers=2)
            return sorted((b[0].numpy().tobytes(), b[1].numpy().tobytes()) for b in dl)
        check(epoch(url) == epoch(str(local)), "DataLoader batches from s3 differ from local")
        m = json.loads((local / "manifest.json").read_text())
        for s in m["shards"]:
            n = s3.gets(f"/{BUCKET}/c/{s['file']}")
            check(n == 1, f"{s['file']} downloaded {n} times by a DataLoader and its workers")


def case_train_two_ranks(tmp):
    """dscache-train --nproc-per-node 2 --train s3://...: the model the same run trains from the
    local cache, byte for byte; the two ranks on this node download each shard once; no secret
    in the run's files."""
    train = os.environ.get("DSCACHE_TRAIN", "")
    if not train:
        raise Skip("dscache-train is not built (meson feature trainer)")
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        flags = ["--nproc-per-node", "2", "--threads", "1", "--batch", "8", "--max-steps", "4",
                 "--precision", "fp32", "--seed", "3", "--no-progress"]
        for where, out in ((str(local), "ref"), (url, "s3")):
            r = subprocess.run([train, "--train", where, "--output", str(tmp / out), *flags],
                               env=env, capture_output=True, text=True, timeout=600)
            check(r.returncode == 0, f"dscache-train --train {where}: {r.returncode}\n{r.stderr}")
        check((tmp / "s3" / "model.pt").read_bytes() == (tmp / "ref" / "model.pt").read_bytes(),
              "the model trained from s3:// differs from the one trained from the local cache")
        m = json.loads((local / "manifest.json").read_text())
        for s in m["shards"]:
            n = s3.gets(f"/{BUCKET}/c/{s['file']}")
            check(n == 1, f"{s['file']} downloaded {n} times by 2 ranks on one node")
        for path in (tmp / "s3").rglob("*"):
            if path.is_file():
                check(s3.secret_key.encode() not in path.read_bytes(), f"the secret is in {path}")


def case_build_from_s3_source(tmp):
    """dscache build s3://BUCKET/raw OUT: class folders listed with ListObjectsV2 (one listing
    request for the whole tree), each image GET once; the cache equals the one built from the
    same tree on disk, sample for sample, with the same classes and source names. Hidden
    objects, objects outside any class and folder markers are not samples, as on disk."""
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        src = Path(tmp, "src")
        write_pngs(src, classes=3, per_class=7)
        c = s3.client()
        for f in sorted(src.rglob("*.png")):
            c.upload_file(str(f), BUCKET, "raw/" + str(f.relative_to(src)))
        c.put_object(Bucket=BUCKET, Key="raw/README.txt", Body=b"no class")
        c.put_object(Bucket=BUCKET, Key="raw/class1/.DS_Store", Body=b"hidden")
        c.put_object(Bucket=BUCKET, Key="raw/class2/", Body=b"")
        opts = ["--size", "16", "--shard-size", "2K"]
        run(["build", str(src), str(tmp / "here"), *opts], env=env)
        r = run(["build", f"s3://{BUCKET}/raw", str(tmp / "there"), *opts], env=env)
        check("built 21 samples" in r.stdout, r.stdout)
        lists = [p for (m, p, st) in s3.requests() if m == "GET" and "list-type=2" in p]
        check(len(lists) == 1, f"listing requests: {lists}")
        for f in sorted(src.rglob("*.png")):
            key = f"/{BUCKET}/raw/{f.relative_to(src)}"
            check(s3.gets(key) == 1, f"{key} read {s3.gets(key)} times")
        mh = json.loads((tmp / "here" / "manifest.json").read_text())
        mt = json.loads((tmp / "there" / "manifest.json").read_text())
        check(mh["classes"] == mt["classes"], f"classes {mh['classes']} / {mt['classes']}")
        check(mt["source"]["root"] == f"s3://{BUCKET}/raw", f"source root {mt['source']}")
        check((tmp / "here" / "sources.jsonl").read_text() ==
              (tmp / "there" / "sources.jsonl").read_text(), "source names differ")
        r = run(["verify", str(tmp / "there"), "--source"], env=env)  # re-decodes from s3
        check("OK" in r.stdout, r.stdout)
        use_env(env)
        import dscache
        a, b = dscache.Cache(str(tmp / "here")), dscache.Cache(str(tmp / "there"))
        for k, (x, y) in enumerate(zip(samples(a), samples(b))):
            check(np.array_equal(x[0], y[0]) and x[1] == y[1], f"sample {k} differs")


def case_local_disk_full(tmp):
    """A local cache on a disk too small for the copy: exit 7 (out of space) naming the file,
    and nothing half-written left that a later reader could trust."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cli"))
    from test_disk_full import small_tmpfs
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        local, url, _ = build_both(s3, tmp, env)
        total = sum(f.stat().st_size for f in local.iterdir())
        check(total > 40 * 1024, f"fixture: the cache ({total} B) fits in the 32k tmpfs")
        with small_tmpfs(tmp / "mnt", "32k") as mnt:
            r = run(["verify", url, "--local-cache", str(mnt)], env=env, check_rc=7)
            check(str(mnt) in r.stderr and "No space left" in r.stderr, r.stderr)
            left = [p.name for p in mnt.rglob("*") if ".part-" in p.name or
                    p.name == "manifest.json"]
            check(not left, f"a half-written copy stayed: {left}")


CASES = {
    "build_serve_exact": case_build_serve_exact,
    "resume_upload": case_resume_upload,
    "shared_download_once": case_shared_download_once,
    "budget_eviction": case_budget_eviction,
    "server_restart": case_server_restart,
    "changed_object_refused": case_changed_object_refused,
    "wrong_credentials": case_wrong_credentials,
    "stale_parts_never_trusted": case_stale_parts_never_trusted,
    "http_nginx": case_http_nginx,
    "torch_dataloader": case_torch_dataloader,
    "train_two_ranks": case_train_two_ranks,
    "build_from_s3_source": case_build_from_s3_source,
    "local_disk_full": case_local_disk_full,
    "open_together_held": case_open_together_held,
    "stream_under_budget": case_stream_under_budget,
    "stream_two_ranks": case_stream_two_ranks,
    "stream_server_restart": case_stream_server_restart,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-"))
