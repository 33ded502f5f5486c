#!/usr/bin/python3
"""Debian's nginx serving a directory read-only over plain HTTP on a free loopback port, for the
`s3` test suite's http:// caches: a real HTTP server with Range support, not a mock.

`with Nginx(root_dir, tmpdir) as web:` starts it; leaving the block stops it. Nothing global is
touched: its config, pid file, error and access logs and temp dirs live under `tmpdir/nginx`
(the error log is given with -e, so /var/log/nginx is never opened), and it runs as the test's
user. One process (`master_process off`, `daemon off`), a child of the test, stopped by pid with
SIGKILL on leaving the block, at interpreter exit and, should the test die, by the kernel
(PR_SET_PDEATHSIG): no master can leave workers behind.

The access log has one line per request, `METHOD URI STATUS` (URI as sent, path and query);
requests() and gets(substring) read it like Rgw's.
"""

import atexit
import grp
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testrunner.py
from rgw import die_with_parent, free_ports, sbin_path, tail  # noqa: E402
from testrunner import Skip  # noqa: E402

START_TIMEOUT_S = 30
# What start() asks to see nginx up (a 404); left out of requests().
PROBE = "/dscache-nginx-ready-probe"
LINE = re.compile(r"^(\S+) (\S+) (\d{3})$", re.M)


class Nginx:
    """nginx serving `root_dir` (GET and HEAD only) at `url` ("http://127.0.0.1:PORT").

    Public: url, port, requests(), gets(substring), stop(). Owns its process and
    `tmpdir/nginx`; not thread-safe."""

    def __init__(self, root_dir, tmpdir):
        self.root_dir = Path(root_dir).resolve()
        self.dir = Path(tmpdir) / "nginx"
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = self.dir / "nginx.conf"
        self.proc = None
        self._atexit = False

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
        exe = shutil.which("nginx", path=sbin_path())
        if exe is None:
            raise Skip("not installed: nginx (scripts/setup-deps --s3 installs nginx-light)")
        for d in ("tmp", "log"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        self._write_conf()
        atexit.register(self.stop)
        self._atexit = True
        out = open(self.dir / "log" / "nginx.out", "ab")
        try:
            self.proc = subprocess.Popen(
                [exe, "-c", self.conf, "-p", self.dir, "-e", self.dir / "log" / "error.log"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                preexec_fn=die_with_parent)
        except OSError as e:
            raise Skip(f"nginx cannot start: {e}") from e
        finally:
            out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None:
                raise Skip(f"nginx exited ({self.proc.returncode}) at start:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise Skip(f"nginx did not answer on {self.url} in {START_TIMEOUT_S}s:\n"
                           f"{self.logs()}")
            time.sleep(0.02)

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None
        if self._atexit:
            atexit.unregister(self.stop)
            self._atexit = False

    def requests(self):
        """[(method, uri, http_status)] of every request served, in order, but for start()'s own
        probes. nginx logs a request just after answering it: this reads until two reads agree,
        so call it once the clients are done."""
        prev = None
        for _ in range(50):
            cur = self._parse_log()
            if cur == prev:
                return cur
            prev = cur
            time.sleep(0.05)
        return prev

    def gets(self, substring):
        """How many GET requests had a URI containing `substring`."""
        return sum(1 for m, u, _ in self.requests() if m == "GET" and substring in u)

    def logs(self):
        return "\n".join(f"--- {n} ---\n{tail(self.dir / 'log' / n)}"
                         for n in ("nginx.out", "error.log"))

    def _write_conf(self):
        d = self.dir
        # As root, nginx would hand its workers to `nobody`, who cannot read a 0700 temp dir;
        # as any other user the directive is ignored.
        user = ""
        if os.geteuid() == 0:
            user = (f"user {pwd.getpwuid(os.getuid()).pw_name} "
                    f"{grp.getgrgid(os.getgid()).gr_name};")
        temps = "\n".join(f"  {k}_temp_path {d / 'tmp' / k};"
                          for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        self.conf.write_text(f"""# Written by tests/s3/nginx.py.
{user}
daemon off;
master_process off;
worker_processes 1;
pid {d / 'nginx.pid'};
error_log {d / 'log' / 'error.log'} info;
events {{ worker_connections 256; }}
http {{
  log_format requests '$request_method $request_uri $status';
  access_log {d / 'log' / 'access.log'} requests;
{temps}
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root_dir};
    location / {{
      # Read-only: GET (and HEAD) only, 403 for anything else.
      limit_except GET {{ deny all; }}
    }}
  }}
}}
""")

    def _answers(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(f"GET {PROBE} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                          .encode())
                return s.recv(12).startswith(b"HTTP/1.1 ")
        except OSError:
            return False

    def _parse_log(self):
        try:
            text = (self.dir / "log" / "access.log").read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [(m.group(1), m.group(2), int(m.group(3))) for m in LINE.finditer(text)
                if m.group(2) != PROBE]
