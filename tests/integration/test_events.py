"""Uploads -> Prefect events through each bridge, with real parts only: the moto server (S3
and its SQS, reached over HTTP by boto3) and a real Prefect server (``prefect_harness``).

The webhook tests stand in for MinIO (not installable here): they POST the notification
document MinIO sends, built from a real upload's key, size and ETag.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.infra import services
from shardline.infra.events.model import EventSink, ObjectCreated
from shardline.infra.events.poll import load_cursor, poll_once
from shardline.infra.events.sqs import run_consumer, sqs_client
from shardline.infra.events.stopping import Stopper
from shardline.infra.events.webhook import WebhookReceiver, WebhookSettings

pytestmark = pytest.mark.timeout(120)
TOKEN = "t0ken-for-tests-0123456789"


@pytest.fixture(scope="module")
def api_url(prefect_harness: None) -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


@pytest.fixture
def sink(api_url: str) -> Iterator[EventSink]:
    with EventSink(api_url) as s:
        yield s


def boto(service: str, s3_server: services.Service) -> Any:
    return boto3.client(service, endpoint_url=s3_server.url, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


def upload(store: ObjectStore, key: str, body: bytes) -> ObjectCreated:
    store.put_bytes(key, body)
    head = store.head(key)
    assert head is not None
    return ObjectCreated(store.bucket, key, head.size, head.etag)


def stored_events(api_url: str, expected: list[ObjectCreated],
                  timeout_s: float = 20.0) -> dict[str, dict[str, Any]]:
    """The events the Prefect server stored for ``expected`` ids (its persister flushes every
    few seconds), by id."""
    ids = sorted({str(e.event_id) for e in expected})
    deadline = time.monotonic() + timeout_s
    while True:
        r = httpx.post(f"{api_url}/events/filter",
                       json={"filter": {"id": {"id": ids}}, "limit": 50})
        r.raise_for_status()
        found = {e["id"]: e for e in r.json()["events"]}
        if len(found) == len(ids) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def assert_stored(api_url: str, expected: list[ObjectCreated]) -> None:
    found = stored_events(api_url, expected)
    for e in expected:
        doc = found.get(str(e.event_id))
        assert doc is not None, f"no event for {e.resource_id}"
        assert doc["event"] == "s3.object.created"
        assert doc["resource"]["prefect.resource.id"] == f"s3://{e.bucket}/{e.key}"
        # the label the upload trigger's debounce windows are kept per (prefect.yaml for_each)
        assert doc["resource"]["s3.bucket"] == e.bucket
        assert doc["payload"] == {"bucket": e.bucket, "key": e.key, "size": e.size,
                                  "etag": e.etag}


def queue_depth(sqs: Any, url: str) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return sum(int(v) for v in attrs.values())


def notify_queue(s3_server: services.Service, bucket: str, configs: int = 1) -> str:
    """A fresh queue that ``bucket`` notifies of uploads under incoming/ (``configs`` times)."""
    sqs = boto("sqs", s3_server)
    url = sqs.create_queue(QueueName=f"q-{bucket}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    rule = {"Key": {"FilterRules": [{"Name": "prefix", "Value": "incoming/"}]}}
    boto("s3", s3_server).put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [
            {"Id": f"c{i}", "QueueArn": arn["Attributes"]["QueueArn"],
             "Events": ["s3:ObjectCreated:*"], "Filter": rule} for i in range(configs)]})
    return str(url)


def consume(url: str, sink: EventSink, **kw: Any) -> Any:
    """Run the consumer in this thread, stopped after 30 s whatever happens."""
    stopper = Stopper()
    timer = threading.Timer(30, stopper.stop)
    timer.start()
    try:
        client = sqs_client(url, access_key="testing", secret_key="testing")
        return run_consumer(client, url, sink, stopper=stopper, wait_s=1, **kw)
    finally:
        timer.cancel()


def test_sqs_upload_becomes_an_event_and_the_message_goes(
        s3_server: services.Service, store: ObjectStore, sink: EventSink, api_url: str) -> None:
    url = notify_queue(s3_server, store.bucket)  # S3 puts an s3:TestEvent on the queue
    uploads = [upload(store, "incoming/a b+c.json", b'{"a": 1}\n'),
               upload(store, "incoming/x/y.csv", b"id,label\n1,0\n")]
    store.put_bytes("other/not-watched.json", b"{}")  # outside the notification's prefix
    stats = consume(url, sink, max_events=2)
    assert stats.skipped == 1 and stats.undecodable == 0 and stats.failed_posts == 0
    assert sorted(stats.event_ids) == sorted(str(e.event_id) for e in uploads)
    assert queue_depth(boto("sqs", s3_server), url) == 0  # deleted after acceptance
    assert_stored(api_url, uploads)


def test_sqs_failed_post_leaves_the_message_then_it_is_redelivered(
        s3_server: services.Service, store: ObjectStore, sink: EventSink, api_url: str) -> None:
    url = notify_queue(s3_server, store.bucket)
    e = upload(store, "incoming/retry.json", b"{}")
    dead = EventSink("http://127.0.0.1:9/api", attempts=2, backoff_s=0.05)
    first = consume(url, dead, once=True, visibility_s=1)
    for _ in range(5):  # the test event and the upload may arrive in two receives
        if first.messages >= 2:
            break
        more = consume(url, dead, once=True, visibility_s=1)
        first.messages += more.messages
        first.failed_posts += more.failed_posts
    assert first.failed_posts >= 1 and first.events == 0
    assert queue_depth(boto("sqs", s3_server), url) == 1  # the upload's message stays
    time.sleep(1.2)  # its visibility timeout ends
    second = consume(url, sink, max_events=1)
    assert second.event_ids == [str(e.event_id)]
    assert queue_depth(boto("sqs", s3_server), url) == 0
    assert_stored(api_url, [e])


def test_sqs_same_upload_notified_twice_is_two_deliveries_of_one_event_id(
        s3_server: services.Service, store: ObjectStore, sink: EventSink, api_url: str) -> None:
    url = notify_queue(s3_server, store.bucket, configs=2)  # every upload notifies twice
    e = upload(store, "incoming/twice.json", b"{}")
    stats = consume(url, sink, max_events=2)
    assert stats.event_ids == [str(e.event_id)] * 2
    # The server keeps one event per id: the repeat is recognised as the same event.
    assert len(stored_events(api_url, [e])) == 1


def minio_doc(e: ObjectCreated) -> dict[str, Any]:
    """What MinIO POSTs to a webhook target (keys URL-encoded as in S3 notifications)."""
    from urllib.parse import quote_plus

    record = {"eventVersion": "2.0", "eventSource": "minio:s3", "eventName":
              "s3:ObjectCreated:Put", "s3": {"bucket": {"name": e.bucket}, "object": {
                  "key": quote_plus(e.key), "size": e.size, "eTag": e.etag}}}
    return {"EventName": "s3:ObjectCreated:Put", "Key": f"{e.bucket}/{e.key}",
            "Records": [record]}


@pytest.fixture
def receiver(sink: EventSink) -> Iterator[WebhookReceiver]:
    settings = WebhookSettings(token=TOKEN, port=0, max_bytes=4096)
    rx = WebhookReceiver(settings, sink)
    thread = threading.Thread(target=rx.serve, daemon=True)
    thread.start()
    yield rx
    rx.stop()
    thread.join(10)
    assert not thread.is_alive()


def test_webhook_rejects_without_emitting_and_accepts_a_valid_notification(
        receiver: WebhookReceiver, store: ObjectStore, api_url: str) -> None:
    url = f"http://127.0.0.1:{receiver.port}/minio/events"
    bad = {s: ObjectCreated(store.bucket, f"incoming/rejected-{s}.json", 2, "e" * 32)
           for s in (401, 403, 400)}
    assert httpx.post(url, json=minio_doc(bad[401])).status_code == 401
    assert httpx.post(url, json=minio_doc(bad[401]),
                      headers={"Authorization": "Basic dXNlcjpwYXNz"}).status_code == 401
    assert httpx.post(url, json=minio_doc(bad[403]),
                      headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 403
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(url, content=b"x" * 5000, headers=auth).status_code == 413
    assert httpx.post(url, content=b"{not json", headers=auth).status_code == 400
    assert httpx.post(url, json={"Records": "no"}, headers=auth).status_code == 400
    assert httpx.head(url).status_code == 200  # MinIO's reachability check

    good = upload(store, "incoming/from minio.json", b'{"m": 1}\n')
    r = httpx.post(url, json=minio_doc(good), headers=auth)
    assert r.status_code == 200 and r.json() == {"accepted": 1, "ids": [str(good.event_id)]}
    assert_stored(api_url, [good])
    assert receiver.stats.events == 1
    assert receiver.stats.rejected == {401: 2, 403: 1, 413: 1, 400: 2}
    # Rejected requests emitted nothing (the valid one, sent after them, is stored).
    assert stored_events(api_url, list(bad.values()), timeout_s=0) == {}


def _raw_post(port: int, headers: str, body: bytes) -> bytes:
    """One HTTP/1.1 POST over a plain socket; the whole answer (the server closes)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(f"POST /minio/events HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode()
                     + body)
        answer = b""
        while chunk := conn.recv(65536):  # a server still waiting for the body times out
            answer += chunk
    return answer


def test_webhook_answers_oversized_and_deeply_nested_bodies_without_dropping_them(
        receiver: WebhookReceiver) -> None:
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    # A declared 10 GB body with 10 bytes sent: 413 from the header, no wait for the rest.
    answer = _raw_post(receiver.port, f"{auth}Content-Length: 10000000000\r\n", b"0123456789")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"10000000000 bytes is larger than the 4096 allowed" in answer
    # JSON nested 1,000 deep (well under max_bytes): a clear 400, not a dropped connection.
    nested = b"[" * 1000 + b"]" * 1000
    answer = _raw_post(receiver.port, f"{auth}Content-Length: {len(nested)}\r\n", nested)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"more than 32 deep" in answer
    url = f"http://127.0.0.1:{receiver.port}/minio/events"
    r = httpx.post(url, content=b'{"Records": [[[["]]]]]]"]]]]}',
                   headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 400 and "deep" not in r.json()["error"]  # brackets in a string
    assert receiver.stats.rejected == {413: 1, 400: 2} and receiver.stats.events == 0
    assert httpx.get(f"http://127.0.0.1:{receiver.port}/health").status_code == 200


def test_poller_emits_each_object_once_and_its_cursor_survives_a_restart(
        store: ObjectStore, store_settings: StoreSettings, sink: EventSink, api_url: str,
        tmp_path: Path) -> None:
    cursor = tmp_path / "home" / "events" / "poll.json"
    a = upload(store, "incoming/a.json", b"a")
    store.put_bytes("incoming/sub/", b"")  # a folder marker is no upload
    assert poll_once(store, sink, cursor, "incoming/") == [a]
    assert poll_once(store, sink, cursor, "incoming/") == []
    b = upload(store, "incoming/b.json", b"b")
    # A restart: a new process (the CLI) reads the cursor file and sees only b.
    env = {**os.environ, "SHARDLINE_BUCKET": store.bucket, "PREFECT_API_URL": api_url,
           "SHARDLINE_S3_ENDPOINT_URL": store_settings.endpoint_url or "",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "SHARDLINE_HOME": str(tmp_path / "no-stack")}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "shardline"), "watch", "--poll", "0.2", "--once",
         "--cursor", str(cursor), "--json"], env=env, capture_output=True, text=True,
        timeout=60)
    assert run.returncode == 0, run.stderr
    assert '"event_ids": ["' + str(b.event_id) + '"]' in run.stdout, run.stdout
    a2 = upload(store, "incoming/a.json", b"a, changed")  # re-upload: new ETag
    assert poll_once(store, sink, cursor, "incoming/") == [a2]
    assert poll_once(store, sink, cursor, "incoming/") == []
    loaded = load_cursor(cursor, store.bucket, "incoming/")
    assert loaded is not None and dict(loaded.seen) == {"incoming/a.json": a2.etag,
                                                        "incoming/b.json": b.etag}
    assert_stored(api_url, [a, b, a2])


def _start_watch(args: list[str], env: dict[str, str], ready: str) -> subprocess.Popen[str]:
    """``shardline watch ARGS`` in a child process, returned once its log says ``ready``."""
    proc = subprocess.Popen([str(Path(sys.executable).parent / "shardline"), "watch", *args,
                             "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if ready in line:
            return proc
    raise AssertionError(f"`watch {' '.join(args)}` exited before '{ready}': {''.join(seen)}")


def test_watch_commands_stop_cleanly_on_sigint_and_sigterm(
        s3_server: services.Service, store: ObjectStore, api_url: str, tmp_path: Path) -> None:
    import json
    import signal

    url = notify_queue(s3_server, store.bucket)
    env = {**os.environ, "PREFECT_API_URL": api_url, "SHARDLINE_WEBHOOK_TOKEN": TOKEN,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "SHARDLINE_HOME": str(tmp_path)}
    consumer = _start_watch(["--sqs", url], env, "consuming")  # long polls of 20 s
    webhook = _start_watch(["--webhook", "--port", "0"], env, "receiving bucket notifications")
    t0 = time.monotonic()
    consumer.send_signal(signal.SIGINT)
    webhook.send_signal(signal.SIGTERM)
    for proc, source in ((consumer, "sqs"), (webhook, "webhook")):
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert json.loads(out)["source"] == source
    assert time.monotonic() - t0 < 5  # the long poll was cut short, not waited out
