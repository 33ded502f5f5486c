#!/usr/bin/python3
"""The `s3` suite's servers checked on their own, before any dscache code meets them: the private
Ceph radosgw (rgw.py) and nginx (nginx.py) behave as the object-storage tests rely on.

Cases (one meson test each, `s3_<case>`):
  server_sigv4    the cluster starts; a bucket; PUT then GET of a few MB with boto3 (SigV4) gives
                  the same bytes; a ranged GET is 206 with the right bytes; a wrong secret gets
                  403 SignatureDoesNotMatch; requests()/gets() count exactly the requests made;
                  no daemon of the cluster outlives the `with` block;
  server_restart  stop_rgw() makes requests fail to connect; start_rgw() serves again on the same
                  port with the data intact, and the request log spans both runs;
  server_killed   a test process that dies holding a cluster (SIGTERM as meson's timeout sends it,
                  or SIGKILL, where no Python code runs) leaves no daemon behind;
  nginx_range     nginx serves a directory read-only: a Range GET is 206 with the right bytes,
                  a PUT is refused, the access log counts the requests.

Usage: test_s3_server.py CASE   (env DSCACHE_SOURCE_ROOT). SKIP (77) only where the daemons are
missing or cannot start.
"""

import hashlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # testrunner.py

import testrunner  # noqa: E402
from nginx import Nginx  # noqa: E402
from rgw import Rgw, run_cases  # noqa: E402
from testrunner import Failure  # noqa: E402


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


def pids_of(procs):
    return [p.pid for p in procs.values()]


def alive(pid):
    """True while `pid` is a process that has not exited (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def processes_under(root):
    """Processes whose command line names a path under `root` (ours pass `-c root/...`)."""
    mark = str(root).encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if mark in d.joinpath("cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def client_error(fn):
    """The botocore ClientError `fn()` raises: (HTTP status, error code)."""
    from botocore.exceptions import ClientError
    try:
        fn()
    except ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]
    raise AssertionError("the request succeeded; an error was expected")


def case_server_sigv4(tmp):
    t0 = time.monotonic()
    with Rgw(tmp) as s3:
        started = time.monotonic() - t0
        pids = pids_of(s3.procs)
        check_eq(len(pids), 3, "daemons running (mon, osd, radosgw)")
        check(s3.endpoint == f"http://127.0.0.1:{s3.port}", f"endpoint {s3.endpoint}")
        env = s3.env()
        check_eq((env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_ENDPOINT_URL"],
                  env["AWS_REGION"]), (s3.access_key, s3.secret_key, s3.endpoint, s3.region),
                 "env()")
        s3.make_bucket("dscache-test")
        c = s3.client()
        check_eq([b["Name"] for b in c.list_buckets()["Buckets"]], ["dscache-test"], "buckets")
        data = os.urandom(5 * 1024 * 1024 + 123)
        c.put_object(Bucket="dscache-test", Key="cache/shard-00000.bin", Body=data)
        got = c.get_object(Bucket="dscache-test", Key="cache/shard-00000.bin")
        body = got["Body"].read()
        check(body == data, f"GET gave {len(body)} bytes (sha256 "
              f"{hashlib.sha256(body).hexdigest()[:12]}), PUT {len(data)}")
        r = c.get_object(Bucket="dscache-test", Key="cache/shard-00000.bin",
                         Range="bytes=1048576-1049599")
        check_eq(r["ResponseMetadata"]["HTTPStatusCode"], 206, "ranged GET status")
        check_eq(r["ContentRange"], f"bytes 1048576-1049599/{len(data)}", "Content-Range")
        check(r["Body"].read() == data[1048576:1049600], "ranged GET gave the wrong bytes")
        listed = c.list_objects_v2(Bucket="dscache-test", Prefix="cache/")
        check_eq([o["Key"] for o in listed["Contents"]], ["cache/shard-00000.bin"], "listing")
        bad = s3.client(secret_key="x" * 40)
        check_eq(client_error(lambda: bad.get_object(Bucket="dscache-test",
                                                     Key="cache/shard-00000.bin")),
                 (403, "SignatureDoesNotMatch"), "GET with a wrong secret")
        check_eq(client_error(lambda: c.get_object(Bucket="dscache-test", Key="cache/none")),
                 (404, "NoSuchKey"), "GET of a missing key")

        reqs = s3.requests()
        shard = "/dscache-test/cache/shard-00000.bin"
        want = [("PUT", "/dscache-test", 200), ("GET", "/", 200), ("PUT", shard, 200),
                ("GET", shard, 200), ("GET", shard, 206)]
        check_eq(reqs[:5], want, "the first requests served")
        check_eq(reqs[5][:1] + reqs[5][2:], ("GET", 200), "the listing")
        check("list-type=2" in reqs[5][1], f"listing target {reqs[5][1]}")
        check_eq(reqs[6:], [("GET", shard, 403), ("GET", "/dscache-test/cache/none", 404)],
                 "the refused requests")
        check_eq(s3.gets("shard-00000"), 3, "GETs of the shard (two good, one refused)")
        check_eq(s3.gets("/dscache-test"), 5, "GETs in the bucket")
        check_eq(s3.gets("shard-99999"), 0, "GETs of a key never asked for")
        # A GET made now is counted at once: requests() waits for radosgw's log line.
        c.get_object(Bucket="dscache-test", Key="cache/shard-00000.bin", Range="bytes=0-0")
        check_eq(s3.gets("shard-00000"), 4, "GETs of the shard after one more")
        t1 = time.monotonic()
    stopped = time.monotonic() - t1
    print(f"cluster started in {started:.1f}s, stopped in {stopped:.2f}s")
    check_eq([p for p in pids if alive(p)], [], "daemons alive after the block")
    check_eq(processes_under(tmp), [], "processes naming the cluster's dir after the block")


def case_server_restart(tmp):
    from botocore.exceptions import EndpointConnectionError
    with Rgw(tmp) as s3:
        s3.make_bucket("restart")
        c = s3.client()
        data = os.urandom(300000)
        c.put_object(Bucket="restart", Key="k", Body=data)
        old_pid = s3.procs["radosgw"].pid
        s3.stop_rgw()
        check(not alive(old_pid), "radosgw still alive after stop_rgw()")
        try:
            c.get_object(Bucket="restart", Key="k")
        except EndpointConnectionError:
            pass
        else:
            raise AssertionError("a GET succeeded while radosgw was stopped")
        port = s3.port
        t0 = time.monotonic()
        s3.start_rgw()
        print(f"radosgw restarted in {time.monotonic() - t0:.1f}s")
        check_eq(s3.port, port, "port after restart")
        check(s3.procs["radosgw"].pid != old_pid, "start_rgw() started no new radosgw")
        check(c.get_object(Bucket="restart", Key="k")["Body"].read() == data,
              "the object differs after the restart")
        c.put_object(Bucket="restart", Key="k2", Body=b"after")
        check_eq(s3.client().get_object(Bucket="restart", Key="k2")["Body"].read(), b"after",
                 "an object written after the restart")
        check_eq(s3.gets("/restart/k"), 2, "GETs served across the restart (the failed one "
                 "never reached radosgw)")
        check_eq(s3.requests()[:2], [("PUT", "/restart", 200), ("PUT", "/restart/k", 200)],
                 "requests before the restart are still counted")
        pids = pids_of(s3.procs)
    check_eq([p for p in pids if alive(p)], [], "daemons alive after the block")
    check_eq(processes_under(tmp), [], "processes naming the cluster's dir after the block")


HOLDER = """
import signal, sys, time
sys.path.insert(0, sys.argv[1])
from rgw import Rgw
from nginx import Nginx
def stop_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)
signal.signal(signal.SIGTERM, stop_on_sigterm)
with Rgw(sys.argv[2]) as s3, Nginx(sys.argv[2], sys.argv[2]) as web:
    print("up", flush=True)
    time.sleep(300)
"""


def case_server_killed(tmp):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        d = tmp / sig.name
        d.mkdir()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(HERE), str(d)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = holder.stdout.readline()
            if line != "up\n":
                holder.wait(timeout=60)
                if holder.returncode == 77 or "Skip" in holder.stderr.read():
                    raise testrunner.Skip("the holder could not start the servers")
                raise Failure(f"the holder printed {line!r}, exit {holder.returncode}")
            daemons = [p for p in processes_under(d) if p != holder.pid]
            check_eq(len(daemons), 4, f"daemons (mon, osd, radosgw, nginx) under {d}")
            holder.send_signal(sig)
            holder.wait(timeout=60)
            deadline = time.monotonic() + 10
            while [p for p in daemons if alive(p)] and time.monotonic() < deadline:
                time.sleep(0.05)
            check_eq([p for p in daemons if alive(p)], [], f"daemons alive after {sig.name}")
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()


def case_nginx_range(tmp):
    www = tmp / "www"
    (www / "cache").mkdir(parents=True)
    data = os.urandom(2 * 1024 * 1024)
    (www / "cache" / "shard-00000.bin").write_bytes(data)
    with Nginx(www, tmp) as web:
        url = f"{web.url}/cache/shard-00000.bin"
        with urllib.request.urlopen(url, timeout=30) as r:
            check_eq(r.status, 200, "plain GET status")
            check(r.read() == data, "plain GET gave the wrong bytes")
        req = urllib.request.Request(url, headers={"Range": "bytes=1000000-1000999"})
        with urllib.request.urlopen(req, timeout=30) as r:
            check_eq(r.status, 206, "ranged GET status")
            check_eq(r.headers["Content-Range"], f"bytes 1000000-1000999/{len(data)}",
                     "Content-Range")
            check(r.read() == data[1000000:1001000], "ranged GET gave the wrong bytes")
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="PUT"),
                                   timeout=30)
        except urllib.error.HTTPError as e:
            check(e.code in (403, 405), f"PUT answered {e.code}")
        else:
            raise AssertionError("nginx accepted a PUT")
        check(data == (www / "cache" / "shard-00000.bin").read_bytes(), "the file changed")
        try:
            urllib.request.urlopen(f"{web.url}/cache/none", timeout=30)
        except urllib.error.HTTPError as e:
            check_eq(e.code, 404, "GET of a missing file")
        reqs = web.requests()
        check_eq([(m, s) for m, _, s in reqs], [("GET", 200), ("GET", 206), ("PUT", 403),
                                                ("GET", 404)], "requests served")
        check_eq(web.gets("shard-00000"), 2, "GETs of the shard")
        pid = web.proc.pid
    check(not alive(pid), "nginx alive after the block")
    check_eq(processes_under(tmp), [], "processes naming the test's dir after the block")


CASES = {
    "server_sigv4": case_server_sigv4,
    "server_restart": case_server_restart,
    "server_killed": case_server_killed,
    "nginx_range": case_nginx_range,
}


if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv, prefix="dscache-s3-"))
