#!/usr/bin/python3
"""What the object-storage client (libcache/src/remote/) does when a real server throttles,
fails or drops it, how it addresses buckets as virtual hosts, and how it signs with temporary
credentials: s3_probe (one ObjectStore request per run) and the dscache CLI against a private
Ceph radosgw (rgw.py), with fault_proxy.py in between where a fault must come on cue.

Cases (one meson test each, `s3_faults_<case>`):
  retry_after_503   GETs answered 503 + Retry-After (seconds, then an HTTP date) succeed on the
                    next attempt; each wait lasts at least what Retry-After asked and not much
                    more (bounds from backoff.h); radosgw served the one GET that got through
  retry_after_429   the same for a PUT throttled with 429, before its body was sent (instead of
                    100 Continue) and after: the object holds the bytes once
  retries_spent     503s without Retry-After past --retries: exit 10 (kRemote) naming the key,
                    HTTP 503 and the endpoint, after exactly retries + 1 requests spaced as the
                    backoff says (--retries 0: one, "after 1 attempt"); `dscache verify` exits 10
                    the same way
  no_retry_4xx      400, 403, 404 and 412 are answers: one request each, never retried (429,
                    in the same table, is)
  connection_reset  connections reset before an answer (GET, PUT, a multipart part) and a body
                    cut off mid-transfer (get_to_fd, ranged GET) are retried and give exact bytes;
                    resets past --retries: exit 10 "connection reset"
  virtual_host      radosgw with rgw_dns_name = s3.localhost and addressing=virtual: put, get,
                    head, list, rm and a dscache build + verify reach BUCKET.s3.localhost (libcurl
                    >= 7.85 resolves *.localhost to loopback itself, RFC 6761; SKIP with older
                    ones); the Host the server got
                    is BUCKET.s3.localhost:PORT and no request path names the bucket
  session_token     temporary credentials from radosgw's STS (GetSessionToken): requests work
                    with AWS_SESSION_TOKEN or a profile's aws_session_token, send
                    x-amz-security-token and sign it; without it or
                    with a wrong one: exit 10, HTTP 403 naming the key id, never the secret or
                    the token; the token is in no output of a dscache build, verify, inspect

Usage: test_s3_faults.py CASE   (env S3_PROBE, DSCACHE). SKIP (77) only where radosgw is missing
or cannot start.
"""

import email.utils
import os
import re
import signal
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # testrunner.py

import testrunner  # noqa: E402
from fault_proxy import FaultProxy  # noqa: E402
from rgw import Rgw, run_cases  # noqa: E402
from testrunner import Failure, Skip, run_cmd  # noqa: E402

BUCKET = "dscache-faults"
LOCATION = f"s3://{BUCKET}/caches/c1"
MiB = 1 << 20
EXIT_REMOTE = 10  # dscache::ExitCode::kRemote (libcache/include/dscache/exit_codes.h)
# Scheduling and process start-up on a loaded machine: added to every upper bound on a wait.
SLACK_S = 5.0


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


def backoff_constants():
    """kBackoffFirstS and kBackoffCapS as libcache/src/remote/backoff.h defines them: the
    bounds below follow the client's arithmetic, not a copy of its numbers."""
    text = (HERE.parent.parent / "libcache/src/remote/backoff.h").read_text()
    got = {name: float(v) for name, v in
           re.findall(r"constexpr double (kBackoff\w+) = ([0-9.]+);", text)}
    check({"kBackoffFirstS", "kBackoffCapS"} <= got.keys(), f"backoff.h constants: {got}")
    return got["kBackoffFirstS"], got["kBackoffCapS"]


def backoff_bounds(retry, retry_after=0.0):
    """[low, high] of the wait before retry number `retry` (0 first): backoff_delay_s draws from
    [d/2, d], d = min(cap, first * 2^retry); a Retry-After raises it to at least that."""
    first, cap = backoff_constants()
    d = min(cap, first * 2 ** retry)
    return max(d / 2, retry_after), max(d, retry_after)


def check_gaps(seen, retry_after, what):
    """The time between successive requests the proxy received is the client's wait (plus one
    round trip): at least what backoff_bounds() allows, at most that and SLACK_S more."""
    for i in range(len(seen) - 1):
        gap = seen[i + 1].t - seen[i].t
        ra = retry_after[i] if isinstance(retry_after, list) else retry_after
        low, high = backoff_bounds(i, ra)
        check(low <= gap < high + SLACK_S,
              f"{what}: {gap:.3f} s between attempt {i + 1} and {i + 2}, expected "
              f"[{low:.3f}, {high + SLACK_S:.3f})")


def probe(env, args, expect_rc=0, timeout=120):
    exe = os.environ.get("S3_PROBE")
    check(exe and Path(exe).exists(), f"S3_PROBE={exe!r} is not the s3_probe binary")
    return run_cmd([exe] + [str(a) for a in args], expect_rc=expect_rc, env=env,
                   timeout=timeout)


def dscache(env, args, expect_rc=0, timeout=300):
    exe = os.environ.get("DSCACHE")
    if not exe:
        raise Skip("DSCACHE not set (run through meson test)")
    return run_cmd([exe] + [str(a) for a in args], expect_rc=expect_rc, env=env,
                   timeout=timeout)


def via(s3, endpoint, **extra):
    """A child's environment: the server's credentials, `endpoint`, no ~/.aws of the machine."""
    env = s3.env({"AWS_ENDPOINT_URL": endpoint})
    for k in ("AWS_ENDPOINT_URL_S3", "AWS_S3_ADDRESSING_STYLE", "DSCACHE_REMOTE_RETRIES"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def idx_source(root, n=40, side=12):
    """A tiny MNIST-style idx pair (images, labels) for `dscache build`: no image library."""
    root.mkdir(parents=True, exist_ok=True)
    images = root / "train-images-idx3-ubyte"
    images.write_bytes(struct.pack(">IIII", 0x803, n, side, side) + os.urandom(n * side * side))
    (root / "train-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 0x801, n) + bytes(i % 4 for i in range(n)))
    return images


def put_object(s3, key, size):
    data = os.urandom(size)
    s3.client().put_object(Bucket=BUCKET, Key=f"caches/c1/{key}", Body=data)
    return data


def get_object(s3, key):
    return s3.client().get_object(Bucket=BUCKET, Key=f"caches/c1/{key}")["Body"].read()


# ----------------------------------------------------------------------------------------------
# Retries.

def case_retry_after_503(tmp):
    with Rgw(tmp) as s3, FaultProxy(s3.port) as proxy:
        s3.make_bucket(BUCKET)
        data = put_object(s3, "k", 300000)
        env = via(s3, proxy.endpoint)
        proxy.fail(2, status=503, retry_after="2", method="GET", contains="/k")
        probe(env, ["get", LOCATION, "k", tmp / "out", "--retries", "3"])
        check((tmp / "out").read_bytes() == data, "bytes after two 503s")
        seen = proxy.requests("GET", "/caches/c1/k")
        check_eq([s.status for s in seen], [503, 503, 200], "what the GETs were answered")
        check_gaps(seen, 2.0, "Retry-After: 2")
        check_eq(s3.gets(f"/{BUCKET}/caches/c1/k"), 1, "GETs radosgw served")

        # The HTTP-date form: an absolute time, whole seconds; >= 3 s ahead when answered.
        proxy.fail(1, status=503, method="HEAD", contains="/k",
                   retry_after=lambda: email.utils.formatdate(time.time() + 4, usegmt=True))
        p = probe(env, ["head", LOCATION, "k", "--retries", "1"])
        check_eq(p.stdout.split()[0], str(len(data)), "HEAD after a dated Retry-After")
        seen = proxy.requests("HEAD", "/caches/c1/k")
        check_eq([s.status for s in seen], [503, 200], "what the HEADs were answered")
        check_gaps(seen, 3.0, "Retry-After: <date 4 s ahead>")


def case_retry_after_429(tmp):
    with Rgw(tmp) as s3, FaultProxy(s3.port) as proxy:
        s3.make_bucket(BUCKET)
        data = os.urandom(MiB + 5)
        (tmp / "in").write_bytes(data)
        # Over 1 MiB, curl sends Expect: 100-continue: the first 429 comes instead of the 100
        # (the body is never sent, as S3 throttles), the second once the body was read.
        proxy.fail(1, action="early", status=429, retry_after="2", method="PUT", contains="/up")
        proxy.fail(1, status=429, retry_after="2", method="PUT", contains="/up")
        probe(via(s3, proxy.endpoint), ["put", LOCATION, "up", tmp / "in", "--xxh64",
                                        "00000000deadbeef", "--retries", "2"])
        check(get_object(s3, "up") == data, "the object after two 429s")
        seen = proxy.requests("PUT", "/caches/c1/up")
        check_eq([(s.fault, s.status) for s in seen],
                 [("early 429", 429), ("status 429", 429), (None, 200)],
                 "what the PUTs were answered")
        check_eq(seen[0].headers.get("expect"), "100-continue", "the first PUT's Expect")
        check_gaps(seen, 2.0, "Retry-After: 2 on a PUT")
        puts = [t for m, t, st in s3.requests() if m == "PUT" and "/up" in t]
        check_eq(len(puts), 1, "PUTs radosgw served")


def case_retries_spent(tmp):
    with Rgw(tmp) as s3, FaultProxy(s3.port) as proxy:
        s3.make_bucket(BUCKET)
        put_object(s3, "k", 1000)
        env = via(s3, proxy.endpoint)
        proxy.fail(None, status=503, contains="/k")  # no Retry-After: the backoff alone
        p = probe(env, ["get", LOCATION, "k", tmp / "out", "--retries", "3"],
                  expect_rc=EXIT_REMOTE)
        check(p.stderr.startswith(f"s3_probe: Remote: {LOCATION}/k: HTTP 503 (SlowDown) from "
                                  f"{proxy.endpoint} after 4 attempts"), f"stderr: {p.stderr}")
        seen = proxy.requests("GET", "/caches/c1/k")
        check_eq(len(seen), 4, "GETs sent (1 + --retries 3)")
        check_gaps(seen, 0.0, "backoff without Retry-After")
        check_eq(s3.gets("/caches/c1/k"), 0, "GETs radosgw served")
        p = probe(env, ["get", LOCATION, "k", tmp / "out", "--retries", "0"],
                  expect_rc=EXIT_REMOTE)
        check(f"from {proxy.endpoint} after 1 attempt\n" in p.stderr, f"stderr: {p.stderr}")
        check_eq(len(proxy.requests("GET", "/caches/c1/k")), 5, "GETs sent with --retries 0")

        # The CLI: the same refusal is exit 10 for a user, naming what it was reading.
        src = idx_source(tmp / "src")
        dscache(via(s3, s3.endpoint, DSCACHE_LOCAL_CACHE=tmp / "local", HOME=tmp),
                ["build", src, f"s3://{BUCKET}/cli", "--shard-size", "2K"])
        proxy.fail(None, status=503, retry_after="1", contains="/cli/")
        env = via(s3, proxy.endpoint, DSCACHE_LOCAL_CACHE=tmp / "local2", HOME=tmp,
                  DSCACHE_REMOTE_RETRIES=1)
        p = dscache(env, ["verify", f"s3://{BUCKET}/cli"], expect_rc=EXIT_REMOTE)
        first = proxy.requests(contains="/cli/")[0].target
        name = first.split("/cli/", 1)[1].split("?")[0]
        check(f"s3://{BUCKET}/cli/{name}" in p.stderr and "HTTP 503" in p.stderr and
              f"from {proxy.endpoint} after 2 attempts" in p.stderr,
              f"dscache verify's message: {p.stderr}")
        check_eq(len(proxy.requests(contains="/cli/")), 2, "requests of `dscache verify`")


def case_no_retry_4xx(tmp):
    with Rgw(tmp) as s3, FaultProxy(s3.port) as proxy:
        s3.make_bucket(BUCKET)
        env = via(s3, proxy.endpoint)
        # (status, s3_probe's exit, requests expected with --retries 2): 429 is the one 4xx
        # that is retried; 404 is NotFound (exit 1), the others Remote.
        table = [(400, EXIT_REMOTE, 1), (403, EXIT_REMOTE, 1), (404, 1, 1),
                 (412, EXIT_REMOTE, 1), (429, EXIT_REMOTE, 3)]
        for status, rc, sent in table:
            key = f"k{status}"
            put_object(s3, key, 100)
            proxy.fail(None, status=status, contains=f"/{key}")
            p = probe(env, ["get", LOCATION, key, tmp / "out", "--retries", "2"], expect_rc=rc)
            check(f"{LOCATION}/{key}: HTTP {status}" in p.stderr and proxy.endpoint in p.stderr,
                  f"{status}: stderr: {p.stderr}")
            check_eq(len(proxy.requests("GET", f"/{key}")), sent, f"GETs answered {status}")
        check_eq(s3.gets("/caches/c1/k"), 0, "GETs radosgw served")


def case_connection_reset(tmp):
    with Rgw(tmp) as s3, FaultProxy(s3.port) as proxy:
        s3.make_bucket(BUCKET)
        env = via(s3, proxy.endpoint)
        data = put_object(s3, "k", 2 * MiB + 3)

        # Reset before any answer, twice.
        proxy.fail(2, action="reset", method="GET", contains="/k")
        probe(env, ["get", LOCATION, "k", tmp / "out", "--retries", "2"])
        check((tmp / "out").read_bytes() == data, "bytes after two resets")
        check_eq([s.fault for s in proxy.requests("GET", "/k")], ["reset", "reset", None],
                 "the GETs")

        # 200 and half the body, then a reset: the file starts over, it does not grow.
        proxy.fail(1, action="cut", method="GET", contains="/k")
        probe(env, ["get", LOCATION, "k", tmp / "out", "--retries", "1"])
        check((tmp / "out").read_bytes() == data, "bytes after a body cut in half")
        proxy.fail(1, action="cut", method="GET", contains="/k")
        probe(env, ["range", LOCATION, "k", MiB, 100000, tmp / "r", "--retries", "1"])
        check((tmp / "r").read_bytes() == data[MiB:MiB + 100000], "a ranged GET after a cut")
        check_eq(len(proxy.requests("GET", "/k")), 7, "GETs in all")

        # A PUT whose connection resets once its body was sent: sent again, stored once.
        up = os.urandom(MiB + 1)
        (tmp / "up").write_bytes(up)
        proxy.fail(1, action="reset", method="PUT", contains="/up")
        probe(env, ["put", LOCATION, "up", tmp / "up", "--retries", "1"])
        check(get_object(s3, "up") == up, "the object after a reset PUT")
        check_eq([s.fault for s in proxy.requests("PUT", "/up")], ["reset", None], "the PUTs")

        # A multipart upload: part 2 reset, and the completing POST refused once (503).
        big = os.urandom(12 * MiB)
        (tmp / "big").write_bytes(big)
        proxy.fail(1, action="reset", method="PUT", contains="partNumber=2&")
        proxy.fail(1, status=503, method="POST", contains="/big?uploadId=")
        probe(env, ["put", LOCATION, "big", tmp / "big", "--part-bytes", 5 * MiB,
                    "--multipart-threshold", 5 * MiB, "--retries", "1"], timeout=300)
        head = s3.client().head_object(Bucket=BUCKET, Key="caches/c1/big")
        check(head["ETag"].strip('"').endswith("-3"), f"not a 3-part upload: {head['ETag']}")
        check(get_object(s3, "big") == big, "the multipart object after a reset part")
        check_eq(len(proxy.requests("PUT", "partNumber=2&")), 2, "PUTs of part 2")
        check_eq([s.status for s in proxy.requests("POST", "/big?uploadId=")], [503, 200],
                 "the completing POSTs")

        # Resets past the retries: exit 10, the cause, the key, the endpoint.
        proxy.fail(None, action="reset", method="GET", contains="/k")
        p = probe(env, ["get", LOCATION, "k", tmp / "out", "--retries", "2"],
                  expect_rc=EXIT_REMOTE)
        check(p.stderr.startswith(f"s3_probe: Remote: {LOCATION}/k: connection reset") and
              f"from {proxy.endpoint} after 3 attempts" in p.stderr, f"stderr: {p.stderr}")
        check_eq(len(proxy.requests("GET", "/k")), 10, "GETs in all")


# ----------------------------------------------------------------------------------------------
# Virtual-host addressing.

def case_virtual_host(tmp):
    # *.localhost is loopback without DNS (RFC 6761): libcurl >= 7.85 resolves
    # BUCKET.s3.localhost itself, where a real endpoint would need wildcard DNS.
    dns = "s3.localhost"
    with Rgw(tmp, dns_name=dns) as s3:
        s3.make_bucket(BUCKET)
        env = via(s3, f"http://{dns}:{s3.port}", AWS_S3_ADDRESSING_STYLE="virtual")
        p = probe(env, ["head", LOCATION, "none", "--retries", "0"], expect_rc=None)
        if p.returncode == EXIT_REMOTE and "resolve host" in p.stderr:
            raise Skip(f"this libcurl does not resolve {BUCKET}.{dns} (*.localhost: libcurl "
                       f"7.85 or later): {p.stderr.strip()}")
        check_eq(p.returncode, 3, f"head of a missing key (stderr: {p.stderr})")
        before = len(s3.requests())
        key = "dir/a b+c=\u00e9.bin"
        data = os.urandom(MiB + 11)
        (tmp / "in").write_bytes(data)
        probe(env, ["put", LOCATION, key, tmp / "in", "--xxh64", "0123456789abcdef"])
        probe(env, ["get", LOCATION, key, tmp / "out"])
        check((tmp / "out").read_bytes() == data, "get_to_fd over virtual-host addressing")
        p = probe(env, ["head", LOCATION, key])
        check_eq(p.stdout.split()[::2], [str(len(data)), "0123456789abcdef"], "head")
        p = probe(env, ["list", LOCATION, ""])
        check(p.stdout.startswith(key + " ") and p.stdout.count("\n") == 1,
              f"listed: {p.stdout!r}")
        check(get_object(s3, key) == data, "boto3 (path-style) read other bytes")
        p = probe(env, ["creds", LOCATION])
        check_eq(p.stdout.splitlines()[1], f"http://{dns}:{s3.port}", "the endpoint named")
        probe(env, ["rm", LOCATION, key])
        probe(env, ["head", LOCATION, key], expect_rc=3)
        # What radosgw served since the bucket was made.
        ours = s3.requests()[before:]
        check_eq([(m, st) for m, _, st in ours],
                 [("PUT", 200), ("GET", 200), ("HEAD", 200), ("GET", 200), ("GET", 200),
                  ("DELETE", 204), ("HEAD", 404)], f"requests radosgw served ({ours})")
        # All but boto3's GET (path-style, the 5th) had the bucket in the Host, not the path.
        check(all(t.startswith(f"/{BUCKET}/") == (i == 4) for i, (_, t, _) in enumerate(ours)),
              f"paths: {ours}")

        # The Host header as the server receives it, seen through the (faultless) proxy.
        with FaultProxy(s3.port) as proxy:
            penv = via(s3, f"http://{dns}:{proxy.port}", AWS_S3_ADDRESSING_STYLE="virtual")
            probe(penv, ["put", LOCATION, "k", tmp / "in"])
            probe(penv, ["list", LOCATION, ""])
            seen = proxy.requests()
            check_eq([(s.method, s.target.split("?")[0], s.headers.get("host"), s.status)
                      for s in seen],
                     [("PUT", "/caches/c1/k", f"{BUCKET}.{dns}:{proxy.port}", 200),
                      ("GET", "/", f"{BUCKET}.{dns}:{proxy.port}", 200)], "requests seen")

        # End to end: a cache built to and served from a virtual-host bucket.
        src = idx_source(tmp / "src")
        cenv = dict(env, DSCACHE_LOCAL_CACHE=str(tmp / "local"), HOME=str(tmp))
        before = len(s3.requests())
        dscache(cenv, ["build", src, f"s3://{BUCKET}/vc", "--shard-size", "2K"])
        dscache(cenv, ["verify", f"s3://{BUCKET}/vc"])
        ours = s3.requests()[before:]
        check(len(ours) > 5 and all(t.startswith("/vc/") or t.startswith("/?")
                                    for _, t, _ in ours), f"the cache's requests: {ours}")
        listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix="vc/")["Contents"]
        check("vc/manifest.json" in [o["Key"] for o in listed], f"objects: {listed}")


# ----------------------------------------------------------------------------------------------
# Session tokens.

def case_session_token(tmp):
    with Rgw(tmp, sts=True) as s3:
        s3.make_bucket(BUCKET)
        cred = s3.session_credentials()
        key_id, secret, token = (cred["AccessKeyId"], cred["SecretAccessKey"],
                                 cred["SessionToken"])
        check(key_id != s3.access_key and token, f"not temporary credentials: {key_id}")
        temp = {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_SESSION_TOKEN": token}
        env = via(s3, s3.endpoint, **temp)
        masked = f"{key_id[:4]}...{key_id[-4:]}"
        outputs = []  # every stdout and stderr of a command given the token

        def ran(p):
            outputs.append(p.stdout + p.stderr)
            return p

        data = os.urandom(MiB + 7)
        (tmp / "in").write_bytes(data)
        ran(probe(env, ["put", LOCATION, "k", tmp / "in"]))
        check(get_object(s3, "k") == data, "the object put with temporary credentials")
        ran(probe(env, ["get", LOCATION, "k", tmp / "out"]))
        check((tmp / "out").read_bytes() == data, "get with temporary credentials")
        p = ran(probe(env, ["list", LOCATION, ""]))
        check_eq([ln.split()[0] for ln in p.stdout.splitlines()], ["k"], "list")
        p = ran(probe(env, ["creds", LOCATION]))
        check_eq(p.stdout.splitlines()[0],
                 f"access key {masked} from AWS_ACCESS_KEY_ID (with a session token)", "creds")

        # The same credentials from a profile of the shared credentials file.
        (tmp / "aws").mkdir()
        (tmp / "aws" / "credentials").write_text(
            f"[temp]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n"
            f"aws_session_token = {token}\n")
        penv = via(s3, s3.endpoint, AWS_PROFILE="temp",
                   AWS_SHARED_CREDENTIALS_FILE=tmp / "aws" / "credentials")
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            penv.pop(k)
        p = ran(probe(penv, ["get", LOCATION, "k", tmp / "out2"]))
        check((tmp / "out2").read_bytes() == data, "get with a profile's session token")
        p = ran(probe(penv, ["creds", LOCATION]))
        check_eq(p.stdout.splitlines()[0],
                 f"access key {masked} from profile 'temp' in {tmp / 'aws' / 'credentials'} "
                 "(with a session token)", "creds from the profile")

        # What goes on the wire: the token in x-amz-security-token, and signed.
        with FaultProxy(s3.port) as proxy:
            ran(probe(via(s3, proxy.endpoint, **temp), ["head", LOCATION, "k"]))
            (seen,) = proxy.requests("HEAD")
            check_eq(seen.headers.get("x-amz-security-token"), token, "x-amz-security-token")
            signed = re.search(r"SignedHeaders=([^,]+)", seen.headers["authorization"]).group(1)
            check("x-amz-security-token" in signed.split(";"), f"SignedHeaders={signed}")
            check(f"Credential={key_id}/" in seen.headers["authorization"], "signing key")

        # The temporary key without its token, or with another token: refused, and said so.
        wrong = token[:-8] + ("A" * 8 if not token.endswith("A" * 8) else "B" * 8)
        for what, extra, suffix in [
                ("no token", {"AWS_SESSION_TOKEN": ""}, ""),
                ("a wrong token", {"AWS_SESSION_TOKEN": wrong}, " (with a session token)")]:
            bad = dict(env, **extra)
            p = ran(probe(bad, ["get", LOCATION, "k", tmp / "out"], expect_rc=EXIT_REMOTE))
            check(f"{LOCATION}/k: HTTP 403" in p.stderr and
                  f"access key {masked} from AWS_ACCESS_KEY_ID{suffix}\n" in p.stderr,
                  f"{what}: stderr: {p.stderr}")
            check(wrong not in p.stderr and secret not in p.stderr, f"{what}: a secret printed")

        # The CLI end to end with temporary credentials.
        src = idx_source(tmp / "src")
        cenv = dict(env, DSCACHE_LOCAL_CACHE=str(tmp / "local"), HOME=str(tmp))
        ran(dscache(cenv, ["build", src, f"s3://{BUCKET}/tc", "--shard-size", "2K"]))
        ran(dscache(cenv, ["verify", f"s3://{BUCKET}/tc"]))
        ran(dscache(cenv, ["inspect", f"s3://{BUCKET}/tc"]))
        ran(dscache(dict(cenv, AWS_SESSION_TOKEN=wrong), ["verify", f"s3://{BUCKET}/tc",
                                                          "--local-cache", tmp / "local3"],
                    expect_rc=EXIT_REMOTE))
        for out in outputs:
            for name, value in (("session token", token), ("wrong token", wrong),
                                ("secret", secret), ("user's secret", s3.secret_key)):
                check(value not in out, f"the {name} was printed:\n{out}")
        check(any("(with a session token)" in o for o in outputs), "no message said so")


CASES = {
    "retry_after_503": case_retry_after_503,
    "retry_after_429": case_retry_after_429,
    "retries_spent": case_retries_spent,
    "no_retry_4xx": case_no_retry_4xx,
    "connection_reset": case_connection_reset,
    "virtual_host": case_virtual_host,
    "session_token": case_session_token,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-faults-"))
