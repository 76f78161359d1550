"""Upload -> event accepted latency for each bridge (SQS consumer, webhook, poller).

Real parts: a moto server (S3 and its SQS) and a real Prefect server, both on loopback.
Each upload is timed from the start of its ``put_object`` (a tiny object) to the moment
the Prefect events API answered 204 for its event (moto queues the notification before it
answers the PUT). The first event of a run also pays the Prefect server's first events
request (~0.6 s). The webhook rows start from a POST made right after the upload, as MinIO
would send it (MinIO's own delivery delay is not part of them). The poller's latency is
dominated by where in its interval an upload lands (uniform in [0, interval]) plus one
listing.

    .venv/bin/python -m shardline.bench.events_latency [--uploads 20] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import boto3
import httpx

from shardline.bench.common import RESULTS
from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.infra import procs, services
from shardline.infra.events.model import EventSink, ObjectCreated
from shardline.infra.events.poll import run_poller
from shardline.infra.events.sqs import run_consumer, sqs_client
from shardline.infra.events.stopping import Stopper
from shardline.infra.events.webhook import WebhookReceiver, WebhookSettings

TOKEN = "bench-token-0123456789abcdef"


class TimedSink(EventSink):
    """An EventSink that notes when each event id was accepted."""

    def __init__(self, api_url: str) -> None:
        super().__init__(api_url)
        self.accepted: dict[str, float] = {}
        self.cv = threading.Condition()

    def post(self, events: Sequence[ObjectCreated]) -> None:
        super().post(events)
        now = time.monotonic()
        with self.cv:
            for e in events:
                self.accepted.setdefault(str(e.event_id), now)
            self.cv.notify_all()

    def wait_for(self, event_id: str, timeout_s: float = 30.0) -> float:
        with self.cv:
            if not self.cv.wait_for(lambda: event_id in self.accepted, timeout_s):
                raise TimeoutError(f"event {event_id} not accepted within {timeout_s}s")
            return self.accepted[event_id]


def measure(store: ObjectStore, sink: TimedSink, source: str, n: int,
            after_upload: Callable[[ObjectCreated], None] = lambda e: None,
            jitter_s: float = 0.0) -> list[float]:
    out = []
    for i in range(n):
        time.sleep(random.uniform(0, jitter_s))
        key = f"incoming/{source}/obj-{i:03d}.json"
        start = time.monotonic()
        etag = store.put_bytes(key, f'{{"i": {i}}}\n'.encode())
        event = ObjectCreated(store.bucket, key, len(f'{{"i": {i}}}\n'), etag)
        after_upload(event)
        out.append(sink.wait_for(str(event.event_id)) - start)
    return out


def new_bucket(s3: services.Service, name: str) -> ObjectStore:
    store = ObjectStore(StoreSettings(name, s3.url, "testing", "testing"))
    store.ensure_bucket()
    return store


def bench_sqs(s3: services.Service, api: str, n: int) -> list[float]:
    store = new_bucket(s3, "bench-sqs")
    kw = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
          "region_name": "us-east-1", "endpoint_url": s3.url}
    sqs = boto3.client("sqs", **kw)
    url = sqs.create_queue(QueueName="bench")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    boto3.client("s3", **kw).put_bucket_notification_configuration(
        Bucket=store.bucket, NotificationConfiguration={"QueueConfigurations": [{
            "QueueArn": arn["Attributes"]["QueueArn"], "Events": ["s3:ObjectCreated:*"]}]})
    sink, stopper = TimedSink(api), Stopper()
    client = sqs_client(url, access_key="testing", secret_key="testing")
    t = threading.Thread(target=run_consumer, args=(client, url, sink),
                         kwargs={"stopper": stopper, "wait_s": 20}, daemon=True)
    t.start()
    try:
        return measure(store, sink, "sqs", n, jitter_s=0.2)
    finally:
        stopper.stop()


def bench_webhook(s3: services.Service, api: str, n: int) -> list[float]:
    store = new_bucket(s3, "bench-webhook")
    sink = TimedSink(api)
    rx = WebhookReceiver(WebhookSettings(token=TOKEN, port=0), sink)
    threading.Thread(target=rx.serve, daemon=True).start()
    http = httpx.Client()

    def minio_posts(e: ObjectCreated) -> None:
        doc = {"EventName": "s3:ObjectCreated:Put", "Records": [{
            "eventName": "s3:ObjectCreated:Put", "s3": {"bucket": {"name": e.bucket},
                                                         "object": {"key": e.key, "size": e.size,
                                                                    "eTag": e.etag}}}]}
        r = http.post(f"http://127.0.0.1:{rx.port}/", json=doc,
                      headers={"Authorization": f"Bearer {TOKEN}"})
        r.raise_for_status()

    try:
        return measure(store, sink, "webhook", n, after_upload=minio_posts, jitter_s=0.2)
    finally:
        rx.stop()


def bench_poll(s3: services.Service, api: str, n: int, interval_s: float) -> list[float]:
    store = new_bucket(s3, "bench-poll")
    sink, stopper = TimedSink(api), Stopper()
    cursor = Path(tempfile.mkdtemp()) / "cursor.json"
    t = threading.Thread(target=run_poller, args=(store, sink, cursor, "incoming/", interval_s),
                         kwargs={"stopper": stopper}, daemon=True)
    t.start()
    try:
        return measure(store, sink, "poll", n, jitter_s=interval_s)
    finally:
        stopper.stop()


def summary(xs: list[float]) -> dict[str, float]:
    ms = sorted(1000 * x for x in xs)
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 1),
            "max_ms": round(ms[-1], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--uploads", type=int, default=20)
    p.add_argument("--interval", type=float, default=1.0, help="poller interval (s)")
    p.add_argument("--out", type=Path, default=RESULTS / "events_latency.json")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="events-bench-"))
    s3 = services.start_moto(procs.free_port(), work)
    prefect = services.start_prefect(procs.free_port(), work / "prefect", work)
    try:
        api = f"{prefect.url}/api"
        results: dict[str, Any] = {
            "sqs": summary(bench_sqs(s3, api, args.uploads)),
            "webhook": summary(bench_webhook(s3, api, args.uploads)),
            f"poll_{args.interval:g}s": summary(bench_poll(s3, api, args.uploads,
                                                           args.interval)),
        }
    finally:
        prefect.stop()
        s3.stop()
    for name, r in results.items():
        print(f"{name:10s} upload -> event accepted: median {r['median_ms']:7.1f} ms  "
              f"p95 {r['p95_ms']:7.1f} ms  max {r['max_ms']:7.1f} ms  (n={r['n']})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
