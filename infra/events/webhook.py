"""An HTTP receiver for MinIO-style bucket notifications (``notify_webhook`` targets).

MinIO POSTs one notification per request (``Records`` as in S3, plus ``EventName`` and
``Key``) with ``Authorization: Bearer <auth_token>``. Every request is checked before its
events exist, in this order, and a rejected request never emits anything:

- ``Authorization`` missing or not Bearer -> 401; wrong token -> 403 (constant-time compare)
- no ``Content-Length`` -> 411; larger than ``max_bytes`` -> 413, answered at once from the
  header (the body is never waited for: a client declaring 10 GB and sending 10 bytes gets
  its 413 immediately; what it did send is drained for at most ``_DRAIN_S``)
- body not JSON, or JSON nested deeper than ``max_depth`` (checked before parsing, so no
  RecursionError ever drops the connection) -> 400; JSON but not a bucket notification -> 400

A valid request answers 200 with the accepted event ids once the Prefect events API took
them, or 502 when it did not, so MinIO keeps the notification and sends it again (its
``queue_dir`` makes that durable). ``HEAD`` and ``GET /health`` answer 200 without a token
(MinIO checks the target is reachable) and reveal nothing. ``PUT``, ``DELETE`` and ``PATCH``
answer 405 with ``Allow: GET, HEAD, POST``.

At most ``max_connections`` requests are handled at once (one thread each): a connection
over the cap is answered 503 with ``Retry-After`` at once, on the accepting thread, and
closed, so slow or stalled clients can hold at most that many threads.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from shardline.core.errors import ShardlineError
from shardline.core.json_depth import json_depth_exceeds
from shardline.infra.events.model import EventPostError, EventSink
from shardline.infra.events.notifications import NotificationError, parse_notification
from shardline.infra.events.stopping import Stopper

log = logging.getLogger(__name__)
MIN_TOKEN_CHARS = 16
# After a 413, bytes already sent are read and dropped (at most this many, for at most
# _DRAIN_S seconds) so that closing the socket does not reset it before the client reads
# the answer; nothing is waited for beyond that.
_DRAIN_LIMIT = 1 << 20
_DRAIN_S = 0.5


@dataclass(frozen=True)
class WebhookSettings:
    """Where to listen, the shared secret, and the largest body accepted."""

    token: str = field(repr=False)
    host: str = "127.0.0.1"
    port: int = 9320
    max_bytes: int = 256 * 1024
    max_depth: int = 32  # a MinIO notification nests 6 deep
    max_connections: int = 64  # requests handled at once; more are answered 503

    def __post_init__(self) -> None:
        if len(self.token) < MIN_TOKEN_CHARS:
            raise ShardlineError(
                f"the webhook token must have at least {MIN_TOKEN_CHARS} characters, got "
                f"{len(self.token)}; generate one with `python -c \"import secrets; "
                "print(secrets.token_urlsafe(32))\"`")


@dataclass
class WebhookStats:
    requests: int = 0
    rejected: dict[int, int] = field(default_factory=dict)
    events: int = 0
    event_ids: list[str] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 15  # seconds a client may stall mid-request
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        # One request per connection: stopping then waits only for requests in flight.
        data = json.dumps(body).encode()
        if status >= 400:     # counted before the reply: a client that has it sees the count
            self.server.count_rejected(status)
            log.warning("rejected %s %s from %s: %d %s", self.command, self.path,
                        self.client_address[0], status, body.get("error"))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="shardline"')
        if status == 405:
            self.send_header("Allow", "GET, HEAD, POST")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/health":
            self._answer(200, {"ok": True})
        else:
            self._answer(404, {"error": "not found; POST bucket notifications here"})

    def _not_allowed(self) -> None:
        self._answer(405, {"error": f"{self.command} is not allowed; POST bucket "
                                    "notifications here"})

    do_PUT = do_DELETE = do_PATCH = _not_allowed  # noqa: N815 - stdlib names

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            self._answer(401, {"error": "missing bearer token: send Authorization: Bearer "
                                        "<token>"})
            return False
        if not hmac.compare_digest(token.strip().encode(), self.server.token):
            self._answer(403, {"error": "wrong token"})
            return False
        return True

    def _body(self) -> bytes | None:
        raw = self.headers.get("Content-Length")
        if raw is None or not raw.strip().isdigit():
            self._answer(411, {"error": "a Content-Length header is required"})
            return None
        length = int(raw)
        if length > self.server.settings.max_bytes:
            self._answer(413, {"error": f"body of {length} bytes is larger than the "
                                        f"{self.server.settings.max_bytes} allowed"})
            self._drain(length)
            return None
        return self.rfile.read(length)

    def _drain(self, length: int) -> None:
        """Drop what the client already sent (bounded in bytes and time), after answering."""
        deadline = time.monotonic() + _DRAIN_S
        left = min(length, _DRAIN_LIMIT)
        try:
            while left > 0 and (wait := deadline - time.monotonic()) > 0:
                self.connection.settimeout(wait)
                chunk = self.rfile.read1(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:  # timed out or reset: the answer is out, the connection closes
            pass

    def do_POST(self) -> None:  # noqa: N802
        self.server.count_request()
        if not self._authorized():
            return
        body = self._body()
        if body is None:
            return
        limit = self.server.settings.max_depth
        if nesting_exceeds(body, limit):
            self._answer(400, {"error": f"body nests JSON arrays/objects more than {limit} "
                                        "deep; a bucket notification nests 6 deep"})
            return
        try:
            events = parse_notification(json.loads(body), f"webhook POST {self.path}")
        except (ValueError, RecursionError) as exc:
            self._answer(400, {"error": f"body is not JSON: {exc}"})
            return
        except NotificationError as exc:
            self._answer(400, {"error": str(exc)})
            return
        try:
            self.server.sink.post(events)
        except EventPostError as exc:
            self._answer(502, {"error": f"not accepted by the events API, send again: {exc}"})
            return
        ids = [str(e.event_id) for e in events]
        self.server.count_events(ids)
        self._answer(200, {"accepted": len(ids), "ids": ids})


def nesting_exceeds(body: bytes, limit: int) -> bool:
    """Does ``body`` open more than ``limit`` JSON arrays/objects inside each other?"""
    return json_depth_exceeds(body, limit)


class _Server(ThreadingHTTPServer):
    # Non-daemon handler threads: server_close() waits for requests in flight, so an event
    # the API accepted is also answered 200 (or, if cut off, sent again by the client).
    daemon_threads = False
    block_on_close = True

    def __init__(self, settings: WebhookSettings, sink: EventSink, stopper: Stopper,
                 max_events: int | None) -> None:
        super().__init__((settings.host, settings.port), _Handler)
        self.settings, self.sink, self.stopper = settings, sink, stopper
        self.token = settings.token.encode()
        self.max_events = max_events
        self.stats = WebhookStats()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(settings.max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per request, at most ``max_connections`` at once; over the cap the
        client is answered 503 here, without a thread, and the connection closed."""
        if not self._slots.acquire(blocking=False):
            self.count_rejected(503)
            log.warning("rejected a connection from %s: %d requests in progress",
                        client_address[0], self.settings.max_connections)
            body = b'{"error": "too many requests in progress; send again later"}'
            try:
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                                b"Content-Type: application/json\r\nConnection: close\r\n"
                                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                                + body)
                request.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def count_request(self) -> None:
        with self._lock:
            self.stats.requests += 1

    def count_rejected(self, status: int) -> None:
        with self._lock:
            self.stats.rejected[status] = self.stats.rejected.get(status, 0) + 1

    def count_events(self, ids: list[str]) -> None:
        with self._lock:
            self.stats.events += len(ids)
            self.stats.event_ids.extend(ids)
            if self.max_events is not None and self.stats.events >= self.max_events:
                self.stopper.stop()


class WebhookReceiver:
    """The receiver; :meth:`serve` blocks until stopped (signal, ``max_events``, ``stop``).

    The port is bound on construction (``port=0`` picks a free one: see :attr:`port`).

    Raises:
        ShardlineError: the address cannot be bound.
    """

    def __init__(self, settings: WebhookSettings, sink: EventSink, *,
                 stopper: Stopper | None = None, max_events: int | None = None) -> None:
        self.stopper = stopper or Stopper()
        try:
            self._server = _Server(settings, sink, self.stopper, max_events)
        except OSError as exc:
            raise ShardlineError(f"cannot listen on {settings.host}:{settings.port} ({exc}); "
                                 "choose another --port or stop what listens there") from exc

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def stats(self) -> WebhookStats:
        return self._server.stats

    def serve(self) -> WebhookStats:
        """Serve requests until stopped, then close the socket."""
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                  name="webhook", daemon=True)
        thread.start()
        log.info("receiving bucket notifications on http://%s:%d/", *self._server.server_address)
        try:
            while not self.stopper.event.wait(0.5):
                pass
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(5)
        return self.stats

    def stop(self) -> None:
        self.stopper.stop()
