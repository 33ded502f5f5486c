#!/usr/bin/python3
"""A remote cache mixes like a local one, against a real S3 server (a private Ceph radosgw each
case starts in its temp dir: rgw.py): dscache.Mixture([Cache("s3://..."), Cache(local)]) with
different class lists serves, epoch by epoch, each source's count of Hamilton's largest
remainder (computed here), every sample's bytes and unified label those of the same source built
locally, and a state_dict taken mid-epoch resumes in a new Loader (over caches opened again)
with the uninterrupted run's remaining batches. The same holds when the remote cache is larger
than the local cache's budget and is streamed shard by shard (the budget never exceeded, shards
fetched again after eviction).

Environment (tests/s3/meson.build): DSCACHE, PYTHONPATH (the built Python module)."""
import json
import math
import sys
import threading
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rgw import Rgw, run_cases  # noqa: E402
from s3_cache_helpers import (BUCKET, check, local_copies, run, s3_env,  # noqa: E402
                              stream_budget, use_env, write_pngs)
from test_s3_local import local_bytes  # noqa: E402

# Source "a" (remote) has classes class0..class2; source "b" (local) has class2 and dog, so the
# unified list is a's names, then dog: b's class2 is label 2 in both, its dog label 3.
B_CLASSES = {"class0": "class2", "class1": "dog"}
UNIFIED = ["class0", "class1", "class2", "dog"]
BATCH = 8


def q32(x):
    """llround(x * 2^32) for x >= 0, exactly (libcache quantizes each weight so)."""
    return math.floor(Fraction(x) * 2**32 + Fraction(1, 2))


def largest_remainder(total, weights):
    """Hamilton's method over the quantized weights, written here independently of libcache:
    floors, then one more to the largest remainders, ties to the lower index."""
    quotas = [q32(w) for w in weights]
    s = sum(quotas)
    parts = [total * q // s for q in quotas]
    rest = [total * q % s for q in quotas]
    for k in sorted(range(len(quotas)), key=lambda k: (-rest[k], k))[:total - sum(parts)]:
        parts[k] += 1
    return parts


def build(src, dest, env, shard_size):
    run(["build", str(src), str(dest), "--size", "16", "--shard-size", shard_size], env=env)


def build_sources(tmp, env, a_per_class, a_shard_size):
    """Source a (3 classes) built to s3://BUCKET/a and locally (the reference); source b (2
    classes: class2 and dog, 10 samples each) built locally twice: the mixture's member and the
    reference. Returns (url, local a, member b, reference b)."""
    write_pngs(tmp / "src-a", classes=3, per_class=a_per_class, seed=5)
    write_pngs(tmp / "src-b", classes=2, per_class=10, seed=9)
    for old, new in B_CLASSES.items():
        (tmp / "src-b" / old).rename(tmp / "src-b" / f"tmp-{new}")
    for new in B_CLASSES.values():
        (tmp / "src-b" / f"tmp-{new}").rename(tmp / "src-b" / new)
    url = f"s3://{BUCKET}/a"
    build(tmp / "src-a", url, env, a_shard_size)
    build(tmp / "src-a", tmp / "ref-a", env, a_shard_size)
    build(tmp / "src-b", tmp / "b", env, "2K")
    build(tmp / "src-b", tmp / "ref-b", env, "2K")
    return url, tmp / "ref-a", tmp / "b", tmp / "ref-b"


def mixture(url, local_b, weights, epoch_samples):
    """A new Mixture over freshly opened caches: the remote a, the local b."""
    import dscache
    return dscache.Mixture([dscache.Cache(url), dscache.Cache(str(local_b))], weights=weights,
                           epoch_samples=epoch_samples, names=["remote", "local"])


def loader(mix):
    import dscache
    return dscache.Loader(mix, batch_size=BATCH, seed=13, workers=2, prefetch=2)


def take(batch):
    return {k: np.asarray(batch[k]).copy() for k in ("source", "index", "label", "image")}


def check_epoch(batches, refs, counts, what):
    """Each source's count is `counts`; every sample (source, index) has the image bytes of
    refs[source][index] and its label unified by class name."""
    source = np.concatenate([b["source"] for b in batches]).tolist()
    got = Counter(source)
    check([got[k] for k in range(len(refs))] == counts,
          f"{what}: per-source counts {dict(got)}, expected {counts} (largest remainder)")
    for j, b in enumerate(batches):
        for t, (k, i) in enumerate(zip(b["source"].tolist(), b["index"].tolist())):
            ref = refs[k]
            image = np.asarray(ref[i][0])
            want = UNIFIED.index(ref.classes[ref.label(i)])
            check(np.array_equal(b["image"][t], image),
                  f"{what}: batch {j} sample {t} (source {k}, index {i}): the image differs "
                  f"from the local build's")
            check(int(b["label"][t]) == want,
                  f"{what}: batch {j} sample {t} (source {k}, index {i}): label "
                  f"{int(b['label'][t])}, expected {want} ({ref.classes[ref.label(i)]})")


def serve_and_check(url, local_b, refs, weights, epoch_samples, what):
    """Two epochs of a Loader over the mixture, checked (check_epoch); in epoch 1 a state_dict
    after 3 batches resumes in a new Loader over a new Mixture (the caches opened again) with
    the same remaining batches. Returns the mixture."""
    import dscache
    mix = mixture(url, local_b, weights, epoch_samples)
    check(mix.classes == UNIFIED, f"{what}: unified classes {mix.classes}")
    counts = largest_remainder(epoch_samples, weights)
    epochs, state = [], None
    ld = loader(mix)
    for epoch in range(2):
        ld.set_epoch(epoch)
        batches = []
        for b in ld:
            batches.append(take(b))
            if epoch == 1 and len(batches) == 3:
                state = json.loads(json.dumps(ld.state_dict()))
        check(len(batches) == math.ceil(epoch_samples / BATCH),
              f"{what} epoch {epoch}: {len(batches)} batches")
        check_epoch(batches, refs, counts, f"{what} epoch {epoch}")
        epochs.append(batches)
    order = [np.concatenate([b[k] for b in e]) for e in epochs for k in ("source", "index")]
    check(not (np.array_equal(order[0], order[2]) and np.array_equal(order[1], order[3])),
          f"{what}: epochs 0 and 1 served the same order")
    check(state is not None and state["epoch"] == 1 and "mix" in state,
          f"{what}: the mid-epoch state: {state}")
    again = loader(mixture(url, local_b, weights, epoch_samples))
    again.load_state_dict(state)
    rest = [take(b) for b in again]
    want = epochs[1][3:]
    check(len(rest) == len(want), f"{what}: resumed {len(rest)} batches, expected {len(want)}")
    for j, (x, y) in enumerate(zip(rest, want)):
        for k in x:
            check(np.array_equal(x[k], y[k]),
                  f"{what}: resumed batch {3 + j} differs in {k!r} from the uninterrupted run's")
    check(isinstance(mix.sources[0].cache, dscache.Cache), "source 0 is not a dscache.Cache")
    return mix


def case_remote_local(tmp):
    """A remote cache (downloaded whole into the local cache) mixed 0.7/0.3 with a local one."""
    import dscache
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        url, ref_a, local_b, ref_b = build_sources(tmp, env, a_per_class=12, a_shard_size="2K")
        use_env(env)
        refs = [dscache.Cache(str(ref_a)), dscache.Cache(str(ref_b))]
        check(refs[1].classes == ["class2", "dog"], f"fixture: b's classes {refs[1].classes}")
        check((len(refs[0]), len(refs[1])) == (36, 20), "fixture: sizes")
        before = s3.gets(f"/{BUCKET}/a/")
        mix = serve_and_check(url, local_b, refs, [0.7, 0.3], 56, "remote+local")
        check(s3.gets(f"/{BUCKET}/a/") > before, "nothing was read from the server")
        copies = local_copies(tmp)
        shards = {s["file"] for s in json.loads((ref_a / "manifest.json").read_text())["shards"]}
        held = {p.name for c in copies for p in (tmp / "local" / c).iterdir()}
        check(len(copies) == 1 and shards <= held,
              f"the remote cache was not copied whole: {copies}, {sorted(held)}")
        check(mix.sources[0].cache.memory_mode != "pread", "the remote cache was streamed")


def case_streamed_local(tmp):
    """A remote cache twice the local cache's budget, streamed shard by shard (global shuffle,
    the one a mixture serves), mixed with a local one: the same checks; the local cache never
    holds more than its budget, and shards are fetched again after eviction."""
    import dscache
    with Rgw(tmp / "rgw") as s3:
        s3.make_bucket(BUCKET)
        env = s3_env(s3, tmp)
        url, ref_a, local_b, ref_b = build_sources(tmp, env, a_per_class=40, a_shard_size="6K")
        shards, total, budget = stream_budget(ref_a, 7)
        check(len(shards) >= 12, f"the remote cache needs many shards to stream: {len(shards)}")
        check(budget < total * 2 // 3, f"budget {budget} of {total}: not streamed")
        use_env(dict(env, DSCACHE_LOCAL_CACHE_SIZE=str(budget)))
        refs = [dscache.Cache(str(ref_a)), dscache.Cache(str(ref_b))]
        most, done = [0], threading.Event()

        def watch():
            while not done.is_set():
                most[0] = max(most[0], local_bytes(tmp / "local"))
                time.sleep(0.005)

        t = threading.Thread(target=watch)
        t.start()
        try:
            mix = serve_and_check(url, local_b, refs, [0.65, 0.35], 57, "streamed+local")
            mode = mix.sources[0].cache.memory_mode
        finally:
            done.set()
            t.join()
        check(mode == "pread", f"the remote cache's memory mode is {mode!r}, not streamed")
        check(0 < most[0] <= budget,
              f"the local cache held {most[0]} bytes, over its budget of {budget}")
        gets = sum(s3.gets(f"/{BUCKET}/a/{name}") for name in shards)
        print(f"streamed_local: {gets} shard GETs for {len(shards)} shards; the local cache "
              f"held at most {most[0]} of {budget} bytes")
        check(gets > len(shards), f"{gets} GETs of {len(shards)} shards: nothing was fetched "
              f"again after eviction, the remote cache was not streamed")


CASES = {
    "remote_local": case_remote_local,
    "streamed_local": case_streamed_local,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-"))
