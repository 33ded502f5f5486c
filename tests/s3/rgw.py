#!/usr/bin/python3
"""A private one-node Ceph cluster serving S3 (radosgw) from a temporary directory, for the `s3`
test suite: a real S3 server, not a mock.

`with Rgw(tmpdir) as s3:` starts a monitor, one OSD keeping its data in RAM (memstore) and
radosgw on a free loopback port, and creates one S3 user; leaving the block stops them all.
Nothing global is touched: ceph.conf, the keyring, the mon's and OSD's data, run dir, admin
sockets, pid and log files all live under `tmpdir/ceph`, every daemon and tool is given `-c` that
ceph.conf, the fsid is fresh and the ports were free, so two clusters side by side (concurrent
test runs) do not meet. The settings are the ones measured in docs (DESIGN.md, "A real S3 server
in tests"): pool size 1, 8 PGs a pool, chooseleaf type 0, paxos propose interval 0.01 (radosgw
is ready in ~2 s instead of ~9 s: every pool it creates waits on a mon commit).

The daemons run in the foreground (-f) as children of the test, in its process group, and are
stopped by their pids with SIGKILL (the data is thrown away; SIGTERM costs ~2 s a daemon): on
leaving the block, at interpreter exit (atexit), and, should the test process itself be killed,
by the kernel (PR_SET_PDEATHSIG). A test that meson times out loses them with its process group.

Requests served: radosgw's beast frontend logs one line per request at `debug rgw = 1`:
    ... beast: 0x7f..: 127.0.0.1 - USER [06/Dec/2026:14:20:00.123 +0000] "GET /b/k HTTP/1.1" 206 ...
requests() parses those lines (method, target as sent: path and query, status).

Start failures that mean "this machine cannot run Ceph" (a binary missing, a daemon exiting at
start or never answering) raise testrunner.Skip with the reason and the daemon's log tail; any
other failure is an error.
"""

import atexit
import base64
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testrunner.py
import testrunner  # noqa: E402
from testrunner import Failure, Skip  # noqa: E402

DAEMONS = ["ceph-mon", "ceph-osd", "radosgw"]
TOOLS = ["ceph", "monmaptool", "radosgw-admin"]
START_TIMEOUT_S = 60
REGION = "us-east-1"  # radosgw's default zonegroup accepts SigV4 scoped to any region name
RGW_USER = "dscache"
# The beast frontend's access line (rgw_asio_frontend.cc, logged at debug rgw >= 1).
BEAST_LINE = re.compile(r' beast: \S+ \S+ - \S* \[[^\]]*\] "(\S+) (\S+) [^"]*" (\d{3}) ')
# Logged at debug rgw = 1 as a request starts (rgw_process.cc), and once as radosgw starts.
REQ_START = "====== starting new request"
START_LINE = "process radosgw, pid"
PR_SET_PDEATHSIG = 1
# What start_rgw() asks to see radosgw up: a bucket that never exists (404); not in requests().
PROBE = "/dscache-rgw-ready-probe"


def free_ports(n):
    """n TCP ports on 127.0.0.1 that were free a moment ago (bound to port 0, then released
    together so that no two are the same)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path, lines=25):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"({path}: {e.strerror})"


def run_cases(cases, argv, prefix):
    """testrunner.main for a file of cases that start daemons: meson's timeout sends SIGTERM,
    which unwinds (SystemExit) so that the `with Rgw(...)`/`with Nginx(...)` blocks stop them."""
    def unwind(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
    return testrunner.main(cases, argv, prefix=prefix)


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when the test process dies, even by SIGKILL, where no
    atexit or `with` block runs."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def ceph_key():
    """A new cephx secret in keyring form: base64 of (type 1 = AES, created sec + nsec, length,
    16 random bytes), what `ceph-authtool --gen-key` writes, without a process per key."""
    now = time.time()
    raw = struct.pack("<hiih", 1, int(now), int(now % 1 * 1e9), 16) + os.urandom(16)
    return base64.b64encode(raw).decode()


def sbin_path():
    path = os.environ.get("PATH", "/usr/bin:/bin")
    for d in ("/usr/sbin", "/sbin"):
        if d not in path.split(":"):
            path += ":" + d
    return path


class Rgw:
    """One ceph-mon, one memstore ceph-osd and one radosgw serving S3 on 127.0.0.1.

    Public: endpoint ("http://127.0.0.1:PORT"), access_key, secret_key, region, env(),
    client(), make_bucket(name), stop_rgw(), start_rgw(), requests(), gets(substring),
    session_credentials() (sts=True).
    Owns the daemons it starts and everything under `root/ceph`. Not thread-safe; one Rgw per
    test."""

    def __init__(self, root, memstore_bytes=1 << 30, dns_name=None, sts=False):
        self.root = Path(root) / "ceph"
        self.memstore_bytes = memstore_bytes  # the OSD's RAM cap: what the tests may store
        # rgw_dns_name: requests whose Host is BUCKET.dns_name[:port] address BUCKET
        # (virtual-host style); path-style requests to any other Host still work.
        self.dns_name = dns_name
        # STS (GetSessionToken): temporary credentials for the user (session_credentials()).
        self.sts = sts
        self.procs = {}  # daemon name -> Popen
        self.conf = self.root / "ceph.conf"
        self.log_dir = self.root / "log"
        self.fsid = str(uuid.uuid4())
        self.mon_port, self.port = free_ports(2)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.region = REGION
        # radosgw's key rules: a 20-character access key, a 40-character secret.
        self.access_key = "DSC" + os.urandom(9).hex()[:17].upper()
        self.secret_key = base64.b64encode(os.urandom(30)).decode()
        self._atexit = False

    # ----------------------------------------------------------------------------------------
    # Lifecycle.

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        missing = [p for p in DAEMONS + TOOLS if shutil.which(p, path=sbin_path()) is None]
        if missing:
            raise Skip(f"not installed: {' '.join(missing)} (scripts/setup-deps --s3 installs "
                       "Ceph's mon, osd and radosgw)")
        try:
            import boto3  # noqa: F401 - the tests' reference client; checked before any daemon
        except ImportError as e:
            raise Skip(f"python3-boto3 is missing ({e}): scripts/setup-deps --s3") from e
        for d in ("mon", "osd", "rgw", "run", "log", "crash"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        self._atexit = True
        self._write_conf()
        self._run(["monmaptool", "--create", "--fsid", self.fsid, "--addv", "a",
                   f"[v2:127.0.0.1:{self.mon_port}]", self.root / "monmap"], "monmaptool")
        self._run(["ceph-mon", "-c", self.conf, "--mkfs", "-i", "a", "--monmap",
                   self.root / "monmap", "--keyring", self.root / "keyring"], "ceph-mon --mkfs")
        self._start("ceph-mon", ["ceph-mon", "-c", self.conf, "-f", "-i", "a"])
        osd_uuid = str(uuid.uuid4())
        # `osd new` waits for the mon's quorum itself: no separate wait for the mon.
        p = self._ceph(["osd", "new", osd_uuid], timeout=START_TIMEOUT_S, skip=True)
        osd_id = p.stdout.strip()
        if osd_id != "0":
            raise Failure(f"`ceph osd new` gave id {osd_id!r}, the keyring holds osd.0")
        self._run(["ceph-osd", "-c", self.conf, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid],
                  "ceph-osd --mkfs")
        self._start("ceph-osd", ["ceph-osd", "-c", self.conf, "-f", "-i", "0"])
        self.start_rgw()
        self._run(["radosgw-admin", "-c", self.conf, "-n", "client.admin", "user", "create",
                   "--uid", RGW_USER, "--display-name", RGW_USER, "--access-key",
                   self.access_key, "--secret", self.secret_key], "radosgw-admin user create")
        if self.sts:
            # Attaching a user policy (session_credentials()) takes the user-policy cap.
            self._run(["radosgw-admin", "-c", self.conf, "-n", "client.admin", "caps", "add",
                       "--uid", RGW_USER, "--caps", "user-policy=*"], "radosgw-admin caps add")

    def stop(self):
        """Ends every daemon by pid with SIGKILL and waits for it: nothing is left running."""
        for name in ("radosgw", "ceph-osd", "ceph-mon"):
            self._kill(name)
        if self._atexit:
            atexit.unregister(self.stop)
            self._atexit = False

    def stop_rgw(self):
        """Kills radosgw alone (SIGKILL, as a crash would): requests then fail to connect. The
        mon and the OSD keep the data; start_rgw() brings it back on the same port.
        radosgw writes its log from a thread: what it still holds dies with it, so the log is
        flushed and settled first (requests() before the kill). Every request answered before
        stop_rgw() stays counted; one still in flight at the kill may or may not be."""
        if "radosgw" in self.procs and self.procs["radosgw"].poll() is None:
            self.requests()
        self._kill("radosgw")

    def start_rgw(self):
        """Starts radosgw on self.port and returns once it answers HTTP."""
        if "radosgw" in self.procs:
            raise Failure("radosgw is already running")
        self._start("radosgw", ["radosgw", "-c", self.conf, "-n", "client.rgw", "-f"])
        self._wait(self._rgw_answers, f"radosgw to answer on {self.endpoint}", "radosgw")

    # ----------------------------------------------------------------------------------------
    # Using the server.

    def env(self, extra=None):
        """The variables a child process (dscache, an AWS SDK) reads to reach this server."""
        env = dict(os.environ)
        env.update({
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
        })
        for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            env.pop(k, None)  # the machine's own credentials must not mix with ours
        env.update(extra or {})
        return env

    def client(self, secret_key=None):
        """A boto3 S3 client for this server, path-style (bucket in the path, as radosgw
        without DNS names needs). secret_key: another secret (a test of a wrong one)."""
        import boto3
        from botocore.config import Config
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret_key if secret_key is not None else self.secret_key,
            config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                          retries={"max_attempts": 1}, connect_timeout=5, read_timeout=60))

    def session_credentials(self, seconds=900):
        """Temporary credentials of the user from radosgw's STS (GetSessionToken, Rgw(sts=True)):
        {"AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"}. First attaches the
        policy Ceph's STS Lite documentation gives (a user may call GetSessionToken with its
        permanent keys); S3 requests with the temporary ones act as the user."""
        import boto3
        if not self.sts:
            raise Failure("session_credentials() needs Rgw(..., sts=True)")
        kw = dict(endpoint_url=self.endpoint, region_name=self.region,
                  aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)
        policy = json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "sts:GetSessionToken", "Resource": "*"}]})
        boto3.client("iam", **kw).put_user_policy(UserName=RGW_USER, PolicyName="sts",
                                                  PolicyDocument=policy)
        got = boto3.client("sts", **kw).get_session_token(DurationSeconds=seconds)
        return got["Credentials"]

    def make_bucket(self, name):
        self.client().create_bucket(Bucket=name)

    def requests(self):
        """[(method, target, http_status)] of every request radosgw served since start (across
        restarts), in order, but for start_rgw()'s own probes; target is the request line's URI,
        path and query as sent. Call it once the clients are done: radosgw logs a request just
        after answering it, from a logging thread, so this flushes the log (admin socket) until
        the running radosgw has logged as many requests done as it logged started."""
        deadline = time.monotonic() + 10
        while True:
            self._flush_log()
            reqs, settled = self._parse_log()
            if settled or time.monotonic() > deadline:
                return reqs
            time.sleep(0.02)

    def gets(self, substring):
        """How many GET requests had a target containing `substring`."""
        return sum(1 for m, t, _ in self.requests() if m == "GET" and substring in t)

    def logs(self):
        return "\n".join(f"--- {n}.log ---\n{tail(self.log_dir / (n + '.log'))}"
                         for n in ("mon.a", "osd.0", "client.rgw"))

    # ----------------------------------------------------------------------------------------
    # Internals.

    def _write_conf(self):
        r = self.root
        keys = {
            "mon.": {"caps mon": "allow *"},
            "client.admin": {"caps mon": "allow *", "caps osd": "allow *", "caps mds": "allow *",
                             "caps mgr": "allow *"},
            "osd.0": {"caps mon": "allow profile osd", "caps osd": "allow *",
                      "caps mgr": "allow profile osd"},
            "client.rgw": {"caps mon": "allow rw", "caps osd": "allow rwx"},
        }
        keyring = ""
        for name, caps in keys.items():
            keyring += f"[{name}]\n\tkey = {ceph_key()}\n"
            keyring += "".join(f'\t{k} = "{v}"\n' for k, v in caps.items())
        (r / "keyring").write_text(keyring)
        os.chmod(r / "keyring", 0o600)
        self.conf.write_text(f"""# Written by tests/s3/rgw.py: a private one-node cluster.
[global]
fsid = {self.fsid}
mon host = v2:127.0.0.1:{self.mon_port}
mon initial members = a
# Else the OSD binds 0.0.0.0.
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
keyring = {r / 'keyring'}
run dir = {r / 'run'}
admin socket = {r / 'run'}/$name.asok
pid file = {r / 'run'}/$name.pid
log file = {self.log_dir}/$name.log
crash dir = {r / 'crash'}
log to stderr = false
err to stderr = true
mon data = {r / 'mon'}
osd data = {r / 'osd'}
# Unused by memstore, but named in the OSD's start line: not the default under /var/lib/ceph.
osd journal = {r / 'osd'}/journal
osd objectstore = memstore
memstore device bytes = {self.memstore_bytes}
# One OSD: pools of one copy, placed on this host's only OSD, few PGs.
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
# Each pool radosgw creates waits on a mon commit: ~9 s to ready at the default 1 s.
paxos propose interval = 0.01
mon data avail warn = 1
mon data avail crit = 1
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{self.port}
rgw data = {r / 'rgw'}
# One `beast:` line a request: method, URI, status (requests()).
debug rgw = 1
""")
        with open(self.conf, "a") as f:
            if self.dns_name:
                f.write(f"rgw dns name = {self.dns_name}\n")
            if self.sts:
                # The key that encrypts session tokens: 16 characters (Ceph's STS Lite docs).
                f.write(f"rgw s3 auth use sts = true\nrgw sts key = {os.urandom(8).hex()}\n")

    def _popen(self, args, **kw):
        return subprocess.Popen([str(a) for a in args], env=self._env(), cwd=self.root,
                                stdin=subprocess.DEVNULL, preexec_fn=die_with_parent, **kw)

    def _env(self):
        env = dict(os.environ)
        env["PATH"] = sbin_path()
        env.pop("CEPH_CONF", None)
        env.pop("CEPH_ARGS", None)
        return env

    def _run(self, args, what, timeout=START_TIMEOUT_S):
        """Runs a setup step; its failure means Ceph cannot run here: Skip with its output."""
        p = self._popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise Skip(f"{what} did not finish in {timeout}s\n{self.logs()}") from None
        if p.returncode != 0:
            raise Skip(f"{what} failed ({p.returncode}):\n{out.decode(errors='replace')}\n"
                       f"{self.logs()}")
        return out.decode(errors="replace")

    def _ceph(self, args, timeout=30, skip=False):
        p = self._popen(["ceph", "-c", self.conf, "-n", "client.admin",
                         "--connect-timeout", str(timeout)] + args,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = p.communicate(timeout=timeout + 10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        p = subprocess.CompletedProcess(p.args, p.returncode, out.decode(errors="replace"),
                                        err.decode(errors="replace"))
        if p.returncode != 0:
            msg = f"ceph {' '.join(args)}: exit {p.returncode}\n{p.stderr}\n{self.logs()}"
            raise Skip(msg) if skip else Failure(msg)
        return p

    def _start(self, name, args):
        out = open(self.log_dir / f"{name}.out", "ab")
        try:
            self.procs[name] = self._popen(args, stdout=out, stderr=subprocess.STDOUT)
        except OSError as e:
            raise Skip(f"{name} cannot start: {e}") from e
        finally:
            out.close()

    def _kill(self, name):
        p = self.procs.pop(name, None)
        if p is None:
            return
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)

    def _rgw_answers(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(f"GET {PROBE} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                          .encode())
                return s.recv(12).startswith(b"HTTP/1.1 ")
        except OSError:
            return False

    def _wait(self, ready, what, daemon):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise Skip(f"{name} exited ({p.returncode}) while waiting for {what}:\n"
                               f"{tail(self.log_dir / (name + '.out'))}\n{self.logs()}")
            if ready():
                return
            time.sleep(0.05)
        raise Skip(f"{daemon} did not come up in {START_TIMEOUT_S}s (waiting for {what}):\n"
                   f"{self.logs()}")

    def _flush_log(self):
        """Asks radosgw's admin socket to write out its log (the asok protocol: a JSON command
        and a NUL; the answer is a big-endian 32-bit length and that many bytes)."""
        if "radosgw" not in self.procs:
            return
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(10)
                s.connect(str(self.root / "run" / "client.rgw.asok"))
                s.sendall(json.dumps({"prefix": "log flush"}).encode() + b"\0")
                n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
                s.recv(n, socket.MSG_WAITALL)
        except OSError:
            pass  # radosgw killed since: its log is already complete

    def _parse_log(self):
        """(requests, settled): the beast lines as requests() returns them, and whether the
        running radosgw (the log since its last start line) has ended every request it started:
        one it was killed in the middle of never gets its line."""
        try:
            text = (self.log_dir / "client.rgw.log").read_text(errors="replace")
        except FileNotFoundError:
            return [], True
        reqs = [(m.group(1), m.group(2), int(m.group(3))) for m in BEAST_LINE.finditer(text)
                if m.group(2) != PROBE]
        last = text[text.rfind(START_LINE):] if START_LINE in text else text
        settled = last.count(REQ_START) == len(BEAST_LINE.findall(last))
        return reqs, settled
