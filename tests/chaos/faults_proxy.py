"""A fault-injecting HTTP proxy for S3 tests: put it in front of the moto server and point
the store's ``endpoint_url`` at it.

Each request is read in full; then, with a seeded probability ``p``, the proxy answers
itself with an S3-style error instead of forwarding (``503 SlowDown`` or ``500
InternalError``, alternately chosen by the same RNG), as a throttled or failing S3 would.
With ``p_after`` it forwards the request and *then* answers 500, so the write happened but
the client does not know: the hardest case for a retry (a conditional PUT retried after
it succeeded sees 412). :meth:`FaultProxy.lose_reply_once` does that to the next request
matching a pattern (e.g. the PUT of a version document), deterministically. Everything
else is forwarded byte for byte (path, query, headers, body), so signatures still match.

Body faults (``set_body_faults``), each with its own seeded probability, hit the
response of a forwarded GET (the request reached S3 and was answered): ``truncate`` sends
the full Content-Length but only half the body, then closes; ``flip`` flips one byte of a
body that carries an ``x-amz-checksum-*`` header (one the client can verify: S3 sends no
checksum for a ranged GET, and a flipped byte no checksum covers is undetectable by any
client; TLS rules it out on real links); ``reset`` ends the connection with a TCP RST
(mid-body for a GET, before forwarding for any other request, so no write is half-known);
``stall`` sends half the body and then nothing for ``stall_s`` seconds (set the client's
read timeout below it), then closes.

Loopback only: it listens on 127.0.0.1 and forwards to the one upstream it was given.
Stopped by :meth:`FaultProxy.stop` (or as a context manager); counts what it did.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
        "upgrade"}
_ERRORS = ((503, "SlowDown", "Please reduce your request rate."),
           (500, "InternalError", "We encountered an internal error. Please try again."))


@dataclass
class Counts:
    requests: int = 0
    forwarded: int = 0
    faults_before: int = 0
    faults_after: int = 0
    by_code: dict[int, int] = field(default_factory=dict)
    body: dict[str, int] = field(default_factory=dict)   # body fault kind -> how many

    @property
    def faults(self) -> int:
        """Every fault injected, of every kind."""
        return self.faults_before + self.faults_after + sum(self.body.values())


BODY_FAULTS = ("truncate", "flip", "reset", "stall")


class FaultProxy:
    def __init__(self, upstream: str, p: float = 0.0, p_after: float = 0.0,
                 seed: int = 0) -> None:
        u = urlsplit(upstream)
        if u.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"upstream {upstream!r}: the fault proxy only forwards to "
                             "loopback test servers")
        self.upstream = (u.hostname, u.port or 80)
        self.p, self.p_after = p, p_after
        self._rng = random.Random(seed)
        self._lose_once: re.Pattern[str] | None = None
        self._only: re.Pattern[str] | None = None     # faults only for matching requests
        self._body: dict[str, float] = {}              # body fault kind -> probability
        self.stall_s = 5.0
        self._lock = threading.Lock()
        self.counts = Counts()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:   # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline().strip():
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _error(self, status: int, code: str, message: str) -> None:
                body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>{message}</Message><RequestId>chaos</RequestId>"
                        "</Error>").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def finish(self) -> None:
                with contextlib.suppress(OSError, ValueError):   # reset on purpose
                    super().finish()

            def _reset(self) -> None:
                """End the connection with a TCP RST (SO_LINGER 0), mid-whatever."""
                self.close_connection = True
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()

            def _reply(self, resp: http.client.HTTPResponse, data: bytes) -> None:
                has_sum = any(k.lower().startswith("x-amz-checksum-")
                              for k, _ in resp.getheaders())
                fault = proxy._draw_body(f"{self.command} {self.path}", len(data), has_sum)
                if fault == "flip":
                    i = proxy._pick(len(data))
                    data = data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1:]
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                length = resp.getheader("Content-Length")
                self.send_header("Content-Length",
                                 length if self.command == "HEAD" and length
                                 else str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault in ("truncate", "reset", "stall"):
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if fault == "stall":
                        time.sleep(proxy.stall_s)
                    if fault == "reset":
                        self._reset()
                    self.close_connection = True
                    return
                self.wfile.write(data)

            def _handle(self) -> None:
                body = self._body()
                before, after, err = proxy._draw(f"{self.command} {self.path}")
                if before:
                    self._error(*err)
                    return
                if self.command != "GET" and proxy._draw_body(f"{self.command} {self.path}", 0,
                                                                  False):
                    self._reset()          # before forwarding: the request never ran
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    if after:
                        self._error(*err)
                        return
                    self._reply(resp, data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="fault-proxy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _draw(self, request: str) -> tuple[bool, bool, tuple[int, str, str]]:
        with self._lock:
            c = self.counts
            c.requests += 1
            x = self._rng.random()
            err = _ERRORS[self._rng.randrange(len(_ERRORS))]
            eligible = self._only is None or bool(self._only.search(request))
            before = eligible and x < self.p
            after = eligible and not before and x < self.p + self.p_after
            if self._lose_once is not None and self._lose_once.search(request):
                self._lose_once, before, after, err = None, False, True, _ERRORS[1]
            if before:
                c.faults_before += 1
            elif after:
                c.faults_after += 1
            if not before:
                c.forwarded += 1
            if before or after:
                c.by_code[err[0]] = c.by_code.get(err[0], 0) + 1
            return before, after, err

    def _draw_body(self, request: str, size: int, has_checksum: bool) -> str | None:
        """Which body fault (if any) hits this response. A GET with a body may be cut,
        reset or stalled, and flipped where a checksum covers it; any other request may
        only be reset (``size`` 0: before it is forwarded)."""
        with self._lock:
            if not self._body or (self._only is not None
                                  and not self._only.search(request)):
                return None
            method = request.split(" ", 1)[0]
            x, acc = self._rng.random(), 0.0
            for kind in BODY_FAULTS:
                acc += self._body.get(kind, 0.0)
                if x < acc:
                    ok = (kind == "reset" if method != "GET" else
                          size > 1 and (kind != "flip" or has_checksum))
                    if not ok:
                        return None
                    self.counts.body[kind] = self.counts.body.get(kind, 0) + 1
                    return kind
            return None

    def _pick(self, n: int) -> int:
        with self._lock:
            return self._rng.randrange(n)

    def set_body_faults(self, stall_s: float = 5.0, **rates: float) -> None:
        """Body fault rates from now on, by kind (``truncate``, ``flip``, ``reset``,
        ``stall``; missing: 0); ``stall_s``: how long a stalled body sends nothing."""
        unknown = set(rates) - set(BODY_FAULTS)
        if unknown:
            raise ValueError(f"unknown body faults {sorted(unknown)}; known: {BODY_FAULTS}")
        with self._lock:
            self._body, self.stall_s = {k: v for k, v in rates.items() if v}, stall_s

    def lose_reply_once(self, pattern: str) -> None:
        """Forward the next request whose ``"METHOD /path?query"`` matches ``pattern``, then
        answer 500 as if it had failed."""
        with self._lock:
            self._lose_once = re.compile(pattern)

    def set_rates(self, p: float, p_after: float = 0.0, only: str | None = None) -> None:
        """Fault rates from now on; ``only``: a pattern on ``"METHOD /path?query"`` that
        limits faults to the requests it matches (None: every request)."""
        with self._lock:
            self.p, self.p_after = p, p_after
            self._only = re.compile(only) if only else None

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
