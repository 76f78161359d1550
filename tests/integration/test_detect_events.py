"""Detect in O(new) on real parts: moto S3 and its SQS (bucket notifications), the SQS
bridge posting to a real Prefect server, Spark Connect and GX through the ingest driver.

An upload's notification reaches the bridge, which records the key as pending before it
posts the event; the upload-triggered run (scope ``events``) then ingests exactly that key
and makes no LIST of incoming/ (requests counted by ``CountingStore``). An upload whose
event was lost is ingested by the next reconciling run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from shardline.core.counting_store import CountingStore
from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.infra import services
from shardline.infra.demo_data import digits, jsonl_bytes
from shardline.infra.events.model import EventSink
from shardline.tasks import pending
from shardline.tasks.batch import Batch, Source, batch_id
from shardline.tasks.detect import Scope
from shardline.tasks.driver import Policy, run_ingest
from shardline.tasks.driver_stages import plain
from shardline.tasks.ledger import write_claim
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config
from tests.integration.test_events import consume, notify_queue

# the first test also starts the session's Spark Connect and Prefect servers (minutes on a
# loaded machine); each test's own call takes ~10-30 s
pytestmark = pytest.mark.timeout(300)
IN = "incoming/digits/"


@pytest.fixture(scope="module")
def api_url(prefect_harness: None) -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


@pytest.fixture
def sink(api_url: str, store: ObjectStore) -> Iterator[EventSink]:
    with EventSink(api_url, pending=store) as s:      # the bridge records pending keys
        yield s


def _history(store: ObjectStore, cfg, n: int) -> None:
    """``n`` old uploads, claimed by synthetic batches (never converted): what a long
    history leaves under incoming/."""
    for i in range(n):
        key = f"{IN}2026-01-01/old-{i:03d}.jsonl"
        src = Source(key, store.put_bytes(key, b"claimed long ago\n"), 17, "jsonl")
        write_claim(store, cfg, Batch(batch_id([src]), (src,)), 0)


def _ingest(store, cfg, spark, scope: Scope) -> list:
    return run_ingest(plain(store, cfg, spark, scope=scope), uuid.uuid4().hex[:12],
                      Policy(max_batches=4))


def _requests(counting: CountingStore, op: str) -> int:
    return sum(v[0] for k, v in counting.counts.ops.get(op, {}).items() if k.startswith(IN))


def test_an_event_run_ingests_its_keys_without_listing_incoming(
        s3_server: services.Service, store: ObjectStore, sink: EventSink, spark) -> None:
    cfg = dataset_config()
    _history(store, cfg, 40)
    url = notify_queue(s3_server, store.bucket)
    new = [f"{IN}2026-11-26/a.jsonl", f"{IN}2026-11-26/b.jsonl"]
    store.put_bytes(new[0], jsonl_bytes(digits(0, 60)))
    store.put_bytes(new[1], jsonl_bytes(digits(60, 100)))
    stats = consume(url, sink, max_events=2)
    assert stats.events == 2 and stats.failed_posts == 0
    assert sorted(pending.markers(store, IN)) == new             # recorded before posting
    counting = CountingStore(store)
    done = _ingest(counting, cfg, spark, Scope(events=True))
    assert [d.pub.version for d in done] == [1] and done[0].pub.created
    m = latest_manifest(store, cfg.prefix)
    assert m is not None and sorted(s.key for s in m.sources) == new
    assert_exactly_once(store, m, [d.id for d in digits(0, 100)], [])
    # exactly the two keys were read: no LIST of incoming/, one HEAD each per detect
    assert _requests(counting, "list") == 0
    assert _requests(counting, "head") == 2 * 2           # the batch's detect and the last
    assert pending.markers(store, IN) == {}               # consumed once claimed


def test_a_reconciling_run_ingests_the_upload_whose_event_was_lost(
        store: ObjectStore, sink: EventSink, spark) -> None:
    cfg = dataset_config(incremental_listing=True)
    lost, seen = f"{IN}2026-11-26/lost.jsonl", f"{IN}2026-11-26/seen.jsonl"
    store.put_bytes(lost, jsonl_bytes(digits(0, 50)))     # its notification never came
    store.put_bytes(seen, jsonl_bytes(digits(50, 80)))
    info = store.head(seen)
    assert info is not None
    from shardline.infra.events.model import ObjectCreated
    sink.post([ObjectCreated(store.bucket, seen, info.size, info.etag)])
    first = _ingest(store, cfg, spark, Scope(events=True))
    assert [[s.key for s in d.batch.sources] for d in first] == [[seen]]
    again = _ingest(store, cfg, spark, Scope())           # the nightly reconciling run
    assert [[s.key for s in d.batch.sources] for d in again] == [[lost]]
    m = latest_manifest(store, cfg.prefix)
    assert m is not None and m.version == 2
    assert_exactly_once(store, m, [d.id for d in digits(0, 80)], [])
    assert _ingest(store, cfg, spark, Scope()) == []       # nothing twice
