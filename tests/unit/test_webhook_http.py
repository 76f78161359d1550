"""The webhook receiver over real sockets: methods it refuses, and its connection cap.

No Prefect server is needed: none of these requests reaches the events API (the sink points
at a closed port, so a request that did would fail loudly).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from shardline.infra.events.model import EventSink
from shardline.infra.events.webhook import WebhookReceiver, WebhookSettings

TOKEN = "t" * 32


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    settings = WebhookSettings(token=TOKEN, port=0, max_connections=2)
    rx = WebhookReceiver(settings, EventSink("http://127.0.0.1:9/api", attempts=1))
    thread = threading.Thread(target=rx.serve, daemon=True)
    thread.start()
    yield rx
    rx.stop()
    thread.join(10)
    assert not thread.is_alive()


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_other_methods_are_405_with_allow(receiver: WebhookReceiver, method: str) -> None:
    r = httpx.request(method, f"http://127.0.0.1:{receiver.port}/minio/events", content=b"{}")
    assert r.status_code == 405
    assert r.headers["Allow"] == "GET, HEAD, POST"
    assert method in r.json()["error"]
    assert receiver.stats.rejected == {405: 1}
    assert receiver.stats.events == 0


def test_stalled_clients_hold_at_most_max_connections(receiver: WebhookReceiver) -> None:
    url = f"http://127.0.0.1:{receiver.port}/health"
    # Two clients send half a request line and stall: each holds a handler thread.
    stalled = [socket.create_connection(("127.0.0.1", receiver.port), timeout=5)
               for _ in range(2)]
    try:
        for conn in stalled:
            conn.sendall(b"POST /minio/ev")
        # Give the server a moment to hand both to their threads (the answer below proves it:
        # it is only 503 while both slots are taken).
        for _ in range(50):
            r = httpx.get(url, timeout=5)
            if r.status_code == 503:
                break
            threading.Event().wait(0.05)
        assert r.status_code == 503
        assert r.headers["Retry-After"] == "1"
        assert "too many requests" in r.json()["error"]
    finally:
        for conn in stalled:
            conn.close()
    # The stalled connections closed: their slots come back and requests are served again.
    for _ in range(100):
        if httpx.get(url, timeout=5).status_code == 200:
            break
        threading.Event().wait(0.05)
    else:
        pytest.fail("slots never came back after the stalled clients closed")
    assert receiver.stats.rejected.get(503, 0) >= 1
