#!/usr/bin/python3
"""The local copy of a cache on object storage, against a real S3 server (a private Ceph radosgw
each case starts in its temp dir: rgw.py): eviction under a budget, a remote cache twice the
budget streamed shard by shard (exact epochs, the budget never exceeded, one or two ranks, a
server restarted mid-stream), and a local disk too small for the copy.

Environment (tests/s3/meson.build): DSCACHE, PYTHONPATH (the built Python module)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import testrunner  # noqa: E402

from rgw import Rgw, run_cases  # noqa: E402
from s3_cache_helpers import (BUCKET, build_both, check, local_copies, run,  # noqa: E402
                              s3_env, stream_budget, write_pngs)


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
        # The other files and seven shards: three windows of two shards, and one to spare.
        shards, total, budget = stream_budget(local, 7)
        check(len(shards) >= 12, f"the cache needs many shards to stream: {len(shards)}")
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
    shards, _, budget = stream_budget(local, spare)
    return local, url, shards, budget


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
    "budget_eviction": case_budget_eviction,
    "stream_under_budget": case_stream_under_budget,
    "stream_two_ranks": case_stream_two_ranks,
    "stream_server_restart": case_stream_server_restart,
    "local_disk_full": case_local_disk_full,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-"))
