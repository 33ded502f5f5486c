#!/usr/bin/python3
"""libcache's object-storage client (libcache/src/remote/) against real servers: each case drives
s3_probe (tests/s3/s3_probe.cpp, one ObjectStore request per run) against its own private Ceph
radosgw (rgw.py) or nginx (nginx.py), and checks the result with boto3's view of the bucket.

Cases (one meson test each, `s3_client_<case>`; the list is tests/s3/client_cases.txt):
  roundtrip      put_file (single PUT) of an odd-sized file under a key with spaces, '+', '=' and
                 UTF-8, with x-amz-meta-xxh64: boto3 reads the same bytes and metadata; get and
                 head read them back; remove deletes it; creds names the masked key, not the
                 secret
  multipart      a 40 MiB file with 5 MiB parts: boto3 sees a 9-part ETag ("-9") and the same
                 bytes; the parts went up as parallel PUTs and no upload is left open
  range          ranged GETs (first byte, middle, last byte) equal boto3's bytes; a range past
                 the end is a Remote error
  list_pages     1001 objects under a prefix list in two pages (continuation-token sent), keys
                 relative to the location; an object outside the prefix is not listed
  not_found      GET of a missing key: exit 1, NotFound naming the s3:// URL; head: exit 3
  wrong_secret   a wrong secret: exit 10 naming SignatureDoesNotMatch and the masked key id,
                 never the secret
  restart        radosgw down when the GET starts and back within the retry window: the GET
                 succeeds, after failed attempts
  down           radosgw down for good: exit 10 naming the endpoint, the cause and the attempts
  stall          radosgw stopped (SIGSTOP: connections accepted, nothing answered): each attempt
                 times out after --stall seconds and the retries are spent (exit 10, "timed
                 out"); resumed (SIGCONT) within the retry window, the GET succeeds
  http_range     an http:// location on nginx: get, head and a ranged GET; put is Unsupported

Usage: test_s3_client.py CASE   (env S3_PROBE: the s3_probe binary). SKIP (77) only where the
servers are missing or cannot start.
"""

import hashlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # testrunner.py

import testrunner  # noqa: E402
from rgw import Rgw, run_cases  # noqa: E402
from testrunner import Failure, run_cmd  # noqa: E402

BUCKET = "dscache-client"
LOCATION = f"s3://{BUCKET}/caches/c1"
MiB = 1 << 20


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


def probe(s3, args, expect_rc=0, env=None, timeout=120):
    exe = os.environ.get("S3_PROBE")
    check(exe and Path(exe).exists(), f"S3_PROBE={exe!r} is not the s3_probe binary")
    return run_cmd([exe] + [str(a) for a in args], expect_rc=expect_rc,
                   env=env if env is not None else s3.env(), timeout=timeout)


def random_file(path, size):
    data = os.urandom(size)
    Path(path).write_bytes(data)
    return data


def case_roundtrip(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        key = "dir/a b+c=d&\u00e9.bin"
        data = random_file(tmp / "in.bin", 3 * MiB + 17)
        probe(s3, ["put", LOCATION, key, tmp / "in.bin", "--xxh64", "0123456789abcdef"])
        got = s3.client().get_object(Bucket=BUCKET, Key=f"caches/c1/{key}")
        check(got["Body"].read() == data, "boto3 read other bytes than were put")
        check_eq(got["Metadata"].get("xxh64"), "0123456789abcdef", "x-amz-meta-xxh64")
        etag = got["ETag"].strip('"')
        check_eq(etag, hashlib.md5(data).hexdigest(), "ETag of a single PUT (its MD5)")
        p = probe(s3, ["get", LOCATION, key, tmp / "out.bin"])
        check((tmp / "out.bin").read_bytes() == data, "get_to_fd wrote other bytes")
        check_eq(p.stdout.split(), [str(len(data)), etag], "get's size and etag")
        p = probe(s3, ["head", LOCATION, key])
        check_eq(p.stdout.split(), [str(len(data)), etag, "0123456789abcdef"], "head")
        p = probe(s3, ["creds", LOCATION])
        masked = f"{s3.access_key[:4]}...{s3.access_key[-4:]}"
        check_eq(p.stdout.splitlines(),
                 [f"access key {masked} from AWS_ACCESS_KEY_ID", s3.endpoint], "creds")
        check(s3.secret_key not in p.stdout + p.stderr, "the secret was printed")
        probe(s3, ["rm", LOCATION, key])
        probe(s3, ["head", LOCATION, key], expect_rc=3)
        probe(s3, ["rm", LOCATION, key])  # removing what is gone is no error


def case_multipart(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        data = random_file(tmp / "big.bin", 40 * MiB + 12345)
        probe(s3, ["put", LOCATION, "big.bin", tmp / "big.bin", "--xxh64", "feedfacecafebeef",
                   "--part-bytes", 5 * MiB, "--multipart-threshold", 5 * MiB, "--requests", 4],
              timeout=300)
        c = s3.client()
        head = c.head_object(Bucket=BUCKET, Key="caches/c1/big.bin")
        check_eq(head["ContentLength"], len(data), "size")
        check(head["ETag"].strip('"').endswith("-9"),
              f"not a 9-part upload: ETag {head['ETag']}")
        check_eq(head["Metadata"].get("xxh64"), "feedfacecafebeef", "xxh64 of a multipart upload")
        body = c.get_object(Bucket=BUCKET, Key="caches/c1/big.bin")["Body"].read()
        check(body == data, f"boto3 read {len(body)} other bytes")
        probe(s3, ["get", LOCATION, "big.bin", tmp / "out.bin"], timeout=300)
        check((tmp / "out.bin").read_bytes() == data, "get_to_fd of the multipart object")
        check_eq(c.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []), [],
                 "uploads left open")
        parts = [t for m, t, _ in s3.requests() if m == "PUT" and "partNumber=" in t]
        check_eq(len(parts), 9, "part PUTs")


def case_range(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        data = os.urandom(2 * MiB + 3)
        s3.client().put_object(Bucket=BUCKET, Key="caches/c1/shard", Body=data)
        for offset, length in [(0, 1), (MiB - 5, 70000), (len(data) - 1, 1), (0, len(data))]:
            probe(s3, ["range", LOCATION, "shard", offset, length, tmp / "r.bin"])
            check((tmp / "r.bin").read_bytes() == data[offset:offset + length],
                  f"bytes {offset}+{length}")
        p = probe(s3, ["range", LOCATION, "shard", len(data) - 10, 20, tmp / "r.bin"],
                  expect_rc=10)
        check("s3://dscache-client/caches/c1/shard" in p.stderr, f"URL not named: {p.stderr}")


def case_list_pages(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        c = s3.client()
        keys = [f"caches/c1/shards/s-{i:05d}" for i in range(1001)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: c.put_object(Bucket=BUCKET, Key=k, Body=k.encode()), keys))
        c.put_object(Bucket=BUCKET, Key="caches/c1/other", Body=b"x")
        c.put_object(Bucket=BUCKET, Key="caches/c10/shards/s-x", Body=b"x")
        p = probe(s3, ["list", LOCATION, "shards/"])
        lines = [ln.split() for ln in p.stdout.splitlines()]
        check_eq([ln[0] for ln in lines], [k[len("caches/c1/"):] for k in keys], "listed keys")
        check_eq({ln[1] for ln in lines}, {str(len(keys[0]))}, "listed sizes")
        etag0 = hashlib.md5(keys[0].encode()).hexdigest()
        check_eq(lines[0][2], etag0, "listed ETag")
        check_eq(s3.gets("continuation-token="), 1, "second-page requests")
        p = probe(s3, ["list", LOCATION, ""])
        check_eq(len(p.stdout.splitlines()), 1002, "objects under the location (not c10/)")


def case_not_found(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        p = probe(s3, ["get", LOCATION, "none", tmp / "out"], expect_rc=1)
        check(p.stderr.startswith("s3_probe: NotFound: s3://dscache-client/caches/c1/none: "
                                  "HTTP 404 NoSuchKey"), f"stderr: {p.stderr}")
        probe(s3, ["head", LOCATION, "none"], expect_rc=3)
        probe(s3, ["range", LOCATION, "none", 0, 10, tmp / "out"], expect_rc=1)


def case_wrong_secret(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        wrong = "W" * 40
        p = probe(s3, ["get", LOCATION, "k", tmp / "out"], expect_rc=10,
                  env=s3.env({"AWS_SECRET_ACCESS_KEY": wrong}))
        masked = f"{s3.access_key[:4]}...{s3.access_key[-4:]}"
        check("HTTP 403 SignatureDoesNotMatch from " + s3.endpoint in p.stderr,
              f"stderr: {p.stderr}")
        check(f"access key {masked} from AWS_ACCESS_KEY_ID" in p.stderr, f"stderr: {p.stderr}")
        check(wrong not in p.stdout + p.stderr, "the wrong secret was printed")
        check(s3.secret_key not in p.stdout + p.stderr, "the secret was printed")
        check(s3.access_key not in p.stderr, "the whole key id was printed")


def case_restart(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        data = os.urandom(100000)
        s3.client().put_object(Bucket=BUCKET, Key="caches/c1/k", Body=data)
        s3.stop_rgw()
        # The probe runs in the background and radosgw restarts from this thread: rgw.py's
        # daemons die with the thread that started them (PR_SET_PDEATHSIG), so not from another.
        cmd = [os.environ["S3_PROBE"], "get", LOCATION, "k", tmp / "out", "--retries", "8"]
        t0 = time.monotonic()
        proc = subprocess.Popen([str(a) for a in cmd], env=s3.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(2)
            check(proc.poll() is None, "the GET ended while radosgw was down")
            s3.start_rgw()
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        took = time.monotonic() - t0
        check_eq(proc.returncode, 0, f"s3_probe get (stderr: {err})")
        check((tmp / "out").read_bytes() == data, "bytes after the restart")
        check(took >= 2, f"the GET took {took:.1f} s: radosgw cannot have been down")
        check_eq(s3.gets("/caches/c1/k"), 1, "GETs radosgw served (the one that succeeded)")


def case_down(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        s3.stop_rgw()
        t0 = time.monotonic()
        p = probe(s3, ["get", LOCATION, "k", tmp / "out", "--retries", "3"], expect_rc=10)
        took = time.monotonic() - t0
        check(p.stderr.startswith("s3_probe: Remote: s3://dscache-client/caches/c1/k: "
                                  "connection refused"), f"stderr: {p.stderr}")
        check(f"from {s3.endpoint} after 4 attempts" in p.stderr, f"stderr: {p.stderr}")
        # Three waits of 0.1-0.2, 0.2-0.4 and 0.4-0.8 s: between 0.7 and 1.4 s, plus start-up.
        check(0.7 <= took < 10, f"the retries took {took:.1f} s")


def case_stall(tmp):
    with Rgw(tmp) as s3:
        s3.make_bucket(BUCKET)
        data = os.urandom(1000)
        s3.client().put_object(Bucket=BUCKET, Key="caches/c1/k", Body=data)
        rgw_pid = s3.procs["radosgw"].pid
        # SIGSTOP: the kernel still accepts connections, but no byte comes back: a stall.
        os.kill(rgw_pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            p = probe(s3, ["get", LOCATION, "k", tmp / "out", "--stall", "1", "--retries", "1"],
                      expect_rc=10)
            took = time.monotonic() - t0
            check("timed out (stalled)" in p.stderr and "after 2 attempts" in p.stderr,
                  f"stderr: {p.stderr}")
            check(2 <= took < 8, f"two 1 s stalls and a retry took {took:.1f} s")
            cmd = [os.environ["S3_PROBE"], "get", LOCATION, "k", tmp / "out", "--stall", "1",
                   "--retries", "6"]
            proc = subprocess.Popen([str(a) for a in cmd], env=s3.env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            time.sleep(2.5)
            check(proc.poll() is None, "the GET ended while radosgw was stopped")
        finally:
            os.kill(rgw_pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
        check_eq(proc.returncode, 0, f"s3_probe get after SIGCONT (stderr: {err})")
        check((tmp / "out").read_bytes() == data, "bytes after the stall")


def case_http_range(tmp):
    from nginx import Nginx
    www = tmp / "www"
    (www / "cache").mkdir(parents=True)
    data = random_file(www / "cache" / "shard.bin", MiB + 7)
    with Nginx(www, tmp) as web:
        loc = f"{web.url}/cache"
        env = dict(os.environ)
        run = lambda args, rc=0: run_cmd([os.environ["S3_PROBE"]] + [str(a) for a in args],  # noqa: E731
                                         expect_rc=rc, env=env)
        run(["get", loc, "shard.bin", tmp / "out"])
        check((tmp / "out").read_bytes() == data, "GET over http")
        p = run(["head", loc, "shard.bin"])
        check_eq(p.stdout.split()[0], str(len(data)), "head size")
        run(["range", loc, "shard.bin", 1000, 5000, tmp / "r"])
        check((tmp / "r").read_bytes() == data[1000:6000], "ranged GET over http")
        run(["head", loc, "none"], rc=3)
        p = run(["put", loc, "x", tmp / "out"], rc=1)
        check(p.stderr.startswith(f"s3_probe: Unsupported: {loc}/x: "), f"stderr: {p.stderr}")
        check_eq(web.gets("shard.bin"), 2, "GETs served by nginx")


CASES = {
    "roundtrip": case_roundtrip,
    "multipart": case_multipart,
    "range": case_range,
    "list_pages": case_list_pages,
    "not_found": case_not_found,
    "wrong_secret": case_wrong_secret,
    "restart": case_restart,
    "down": case_down,
    "stall": case_stall,
    "http_range": case_http_range,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-client-"))
