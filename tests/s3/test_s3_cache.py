#!/usr/bin/python3
"""Caches on object storage, end to end against a real S3 server (a private Ceph radosgw that each
case starts in its temp dir: rgw.py) and a real web server (nginx: nginx.py): `dscache build`
to s3://, every reader serving it from the verified local copy, byte for byte what the local
build serves; resume of an interrupted upload; N processes downloading each file once (counted
in the server's log); eviction under a budget; a server stopped and restarted; a changed object
refused; wrong credentials; no secret written anywhere. The local copy's budget, eviction,
streaming and a full local disk are in test_s3_local.py; the shared helpers in
s3_cache_helpers.py.

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
from s3_cache_helpers import (BUCKET, DSCACHE, batches, build_both, check,  # noqa: E402
                              local_copies, objects, run, s3_env, same_batches, samples,
                              use_env, write_pngs)


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


CASES = {
    "build_serve_exact": case_build_serve_exact,
    "resume_upload": case_resume_upload,
    "shared_download_once": case_shared_download_once,
    "open_together_held": case_open_together_held,
    "server_restart": case_server_restart,
    "changed_object_refused": case_changed_object_refused,
    "wrong_credentials": case_wrong_credentials,
    "stale_parts_never_trusted": case_stale_parts_never_trusted,
    "http_nginx": case_http_nginx,
    "torch_dataloader": case_torch_dataloader,
    "train_two_ranks": case_train_two_ranks,
    "build_from_s3_source": case_build_from_s3_source,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-"))
