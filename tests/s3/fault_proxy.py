#!/usr/bin/python3
"""An HTTP proxy that injects faults in front of a real server, for the `s3` suite's retry
cases (test_s3_faults.py): radosgw answers 429 or 503 or resets a connection only when it is
overloaded or crashing, never on demand, so the proxy does it on the test's script.

`with FaultProxy(upstream_port) as proxy:` listens on a free loopback port (proxy.endpoint);
the client under test is pointed there. Each request is forwarded to 127.0.0.1:upstream_port
unchanged: the same method, request target, headers (Host and Authorization included, so a
SigV4 signature made for the proxy's Host still verifies: radosgw, path-style, reads the bucket
from the path and signs with whatever Host it received) and body bytes. Only hop-by-hop headers
(Connection, Keep-Alive, Expect, ...) stay behind. The upstream answer goes back the same way:
status, headers, body (re-framed with a Content-Length).

proxy.fail(count, ...) scripts the next `count` requests that match (method, a substring of the
target) to be answered by the proxy instead:
  action "status"  an S3-style XML error with `status` and optional Retry-After (429, 503, 403..)
                   once the request's body was read
  action "early"   the same error before the body is read (instead of 100 Continue, when the
                   client sent Expect: 100-continue), then the connection is closed: what S3
                   does to a PUT it throttles
  action "reset"   the request is read, then the connection is reset (RST), nothing answered
  action "cut"     the request is forwarded, the upstream's status and headers and half its body
                   are sent, then the connection is reset (a body cut off mid-transfer)
Rules are consulted in the order they were added; count=None never runs out.

proxy.requests(method, contains) lists what arrived: Seen(method, target, headers, t, fault,
status), `t` a time.monotonic() taken once the request's head was read, before any answer.

Standard library only (http.server, http.client). Thread-safe: ThreadingHTTPServer serves
each connection on its own thread; the rule list and the record are under one lock.
"""

import http.client
import http.server
import io
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

# Headers that describe one connection, not the request (RFC 9110 7.6.1), plus Expect: the proxy
# has already answered 100-continue itself and sends the whole body at once.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "expect"}
UPSTREAM_TIMEOUT_S = 120

S3_CODES = {400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey",
            429: "TooManyRequests", 500: "InternalError", 503: "SlowDown"}


@dataclass
class Rule:
    action: str                # "status", "early", "reset" or "cut"
    count: int | None          # requests left to fault; None: all of them
    status: int = 503
    retry_after: object = None  # the header's value, or a function giving it when answered
    method: str | None = None  # None: any
    contains: str = ""         # a substring of the request target


@dataclass
class Seen:
    method: str
    target: str                # path and query, as sent
    headers: dict = field(default_factory=dict)  # lower-case name -> value
    t: float = 0.0
    fault: str | None = None   # "status 503", "early 503", "reset", "cut"; None: forwarded
    status: int | None = None  # what the client was sent; None when the connection was reset


class FaultProxy:
    """A fault-injecting forwarder to 127.0.0.1:upstream_port (module docstring)."""

    def __init__(self, upstream_port, upstream_host="127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self._lock = threading.Lock()
        self._rules = []
        self._seen = []
        self._server = None
        self._thread = None
        self.port = None
        self.endpoint = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None

    def fail(self, count, action="status", status=503, retry_after=None, method=None,
             contains=""):
        """Answers the next `count` matching requests (None: every one) with a fault."""
        if action not in ("status", "early", "reset", "cut"):
            raise ValueError(f"unknown fault action {action!r}")
        with self._lock:
            self._rules.append(Rule(action, count, status, retry_after, method, contains))

    def clear(self):
        """Forgets the rules not yet spent: every later request is forwarded."""
        with self._lock:
            self._rules.clear()

    def requests(self, method=None, contains=""):
        with self._lock:
            return [s for s in self._seen
                    if (method is None or s.method == method) and contains in s.target]

    # ------------------------------------------------------------------------------------------
    # Used by the handler threads.

    def _take_rule(self, method, target):
        with self._lock:
            for r in self._rules:
                if (r.method is None or r.method == method) and r.contains in target and \
                        (r.count is None or r.count > 0):
                    if r.count is not None:
                        r.count -= 1
                    return Rule(r.action, r.count, r.status, r.retry_after)
        return None

    def _record(self, seen):
        with self._lock:
            self._seen.append(seen)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects of an S3 endpoint
    owner = None                   # the FaultProxy (set by a subclass per proxy)

    def log_message(self, fmt, *args):  # noqa: D102 - quiet: the record is in owner.requests()
        pass

    def do_GET(self):
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def handle_expect_100(self):
        """Expect: 100-continue (curl's, for bodies over 1 MiB): an "early" fault is answered
        here, instead of the 100, so that the client never sends the body (S3's way)."""
        self._t = time.monotonic()
        self._rule = self.owner._take_rule(self.command, self.path)
        if self._rule is not None and self._rule.action == "early":
            self._early(self._rule)
            return False
        return super().handle_expect_100()

    def parse_request(self):
        self._t, self._rule = None, None
        ok = super().parse_request()  # calls handle_expect_100 when the client expects a 100
        if ok and self._t is None:
            self._t = time.monotonic()
            self._rule = self.owner._take_rule(self.command, self.path)
        return ok

    def _seen(self, fault=None, status=None):
        """Records this request. Done, and filled in, before the client sees any answer: once
        it has one, the test may look at requests()."""
        seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                    self._t, fault, status)
        self.owner._record(seen)
        return seen

    def _handle(self):
        rule = self._rule
        if rule is not None and rule.action == "early":
            self._early(rule)
            return
        body = self._read_body()
        if rule is None:
            status, reason, headers, payload = self._forward(body)
            self._seen(None, status)
            self._answer(status, reason, headers, payload)
        elif rule.action == "status":
            self._seen(f"status {rule.status}", rule.status)
            self._answer_error(rule)
        elif rule.action == "reset":
            self._seen("reset")
            self._reset()
        else:
            status, reason, headers, payload = self._forward(body)
            self._seen("cut", status)
            self._answer(status, reason, headers, payload, cut=True)

    def _early(self, rule):
        """The error answered before the body is read; the connection then closes, since the
        unread body would otherwise be taken for the next request."""
        self._seen(f"early {rule.status}", rule.status)
        self.close_connection = True
        self._answer_error(rule, close=True)

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise ValueError("fault_proxy: chunked request bodies are not supported")
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(n) if n else b""

    def _forward(self, body):
        """The request to the upstream server as it came; returns its answer."""
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=UPSTREAM_TIMEOUT_S)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    conn.putheader(name, value)
            conn.endheaders(body if body or self.command in ("PUT", "POST") else None)
            resp = conn.getresponse()
            payload = resp.read()
            return resp.status, resp.reason, resp.getheaders(), payload
        finally:
            conn.close()

    def _answer(self, status, reason, headers, payload, cut=False):
        self.send_response_only(status, reason)
        length = None
        for name, value in headers:
            low = name.lower()
            if low == "content-length":
                length = value
            elif low not in HOP_BY_HOP:
                self.send_header(name, value)
        # HEAD: the upstream's Content-Length describes the object, not this (empty) body.
        self.send_header("Content-Length",
                         length if self.command == "HEAD" and length is not None
                         else str(len(payload)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if cut:
            self.wfile.write(payload[:len(payload) // 2])
            self._reset()
            return
        self.wfile.write(payload)

    def _answer_error(self, rule, close=False):
        code = S3_CODES.get(rule.status, "InjectedFault")
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected by fault_proxy</Message><RequestId>fault</RequestId>"
                f"</Error>").encode()
        self.send_response_only(rule.status)
        self.send_header("Content-Type", "application/xml")
        if rule.retry_after is not None:
            ra = rule.retry_after
            self.send_header("Retry-After", ra() if callable(ra) else ra)
        self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self):
        """Closes the connection with a TCP reset (SO_LINGER 0): the client's next read fails
        with ECONNRESET, as when a server or a load balancer in front of it dies."""
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        # The socket closes (and resets) only once the file made from it is closed too; the
        # handler's own flush and close after this go to a stand-in.
        self.rfile.close()
        self.connection.close()
        self.wfile = io.BytesIO()
