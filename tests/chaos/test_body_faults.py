"""Network faults other than 5xx (issue 23): a body cut short, a flipped byte, a reset
connection, a stalled body. The store reads again what failed on the way (botocore retries
the request, never the body), a Spark task's fault reaches the driver typed and the batch
is run again, never a strike: ingest at p = 0.05 of each publishes exactly what a
fault-free ingest publishes. An object deleted between detect and convert is named as
such and re-detected without it.
"""

from __future__ import annotations

import dataclasses
import os
import uuid

import pytest

from shardline.core.errors import ObjectDeleted, TransientStoreError
from shardline.core.store import ObjectStore
from shardline.tasks.batch import Source
from shardline.tasks.convert.readers import replaced_during_ingest
from tests.chaos import test_s3_faults as s3_faults
from tests.chaos.faults_proxy import BODY_FAULTS, FaultProxy
from tests.chaos.test_s3_faults import FULL, drop, outcome
from tests.integration.ingest_helpers import dataset_config, run_pipeline

pytestmark = pytest.mark.chaos
reference = s3_faults.reference      # the same module-scoped fault-free reference ingest
# a stalled body sends nothing this long; the client gives up after 8 s (not less: on a
# loaded 2-core machine an ordinary 200 KB GET through moto took over 4 s)
STALL_S = 20.0


def _via(settings, px: FaultProxy, **changes) -> ObjectStore:
    return ObjectStore(dataclasses.replace(settings, endpoint_url=px.url,
                                           read_timeout_s=8.0, **changes))


@pytest.mark.parametrize("kind", BODY_FAULTS)
def test_a_body_fault_is_read_again_and_the_bytes_are_exact(store_settings, proxy, kind):
    via = _via(store_settings, proxy)
    payload = os.urandom(200_000)
    ObjectStore(store_settings).put_bytes("x/blob", payload)   # with a CRC32 (botocore)
    before = proxy.counts.body.get(kind, 0)
    proxy._rng.seed(BODY_FAULTS.index(kind))   # not the draws the tests before left
    proxy.set_body_faults(stall_s=STALL_S, **{kind: 0.3})
    try:
        got = [via.get_bytes("x/blob") for _ in range(6)]
    finally:
        proxy.set_body_faults()
    assert proxy.counts.body.get(kind, 0) > before, "no fault was injected"
    assert all(g == payload for g in got)


def test_a_body_that_fails_every_time_names_the_object_the_fault_and_the_attempts(
        store_settings, proxy):
    via = _via(store_settings, proxy, max_attempts=2)
    ObjectStore(store_settings).put_bytes("x/cut", b"0123456789" * 1000)
    proxy.set_body_faults(truncate=1.0)
    try:
        with pytest.raises(TransientStoreError) as err:
            via.get_bytes("x/cut")
    finally:
        proxy.set_body_faults()
    msg = str(err.value)
    assert "x/cut" in msg and "each of 2 attempts" in msg and "not the object" in msg
    assert "IncompleteRead" in msg


def test_an_object_deleted_after_it_was_listed_is_named_as_deleted(store_settings):
    store = ObjectStore(store_settings)
    etag = store.put_bytes("incoming/d/a.jsonl", b'{"id": 1, "label": 1}\n')
    store.delete(["incoming/d/a.jsonl"])
    with pytest.raises(ObjectDeleted) as err:
        store.get_bytes("incoming/d/a.jsonl", if_match=etag)
    named = replaced_during_ingest(Source("incoming/d/a.jsonl", etag, 22, "jsonl"), str(err.value))
    assert "was deleted during ingest" in str(named) and "replaced" not in str(named)


def test_ingest_with_every_body_fault_at_p005_publishes_what_a_fault_free_run_does(
        store_settings, proxy, spark, reference):
    """Truncated, flipped, reset and stalled bodies at p = 0.05 each (and 503/500 at
    0.05), in the driver and in every Spark task: the same rows and the same quarantine."""
    seeds = range(3) if FULL else range(1)
    injected = 0
    for seed in seeds:
        proxy._rng.seed(2300 + seed)
        settings = dataclasses.replace(store_settings, bucket=f"b-{uuid.uuid4().hex[:12]}")
        clean = ObjectStore(settings)
        clean.ensure_bucket()
        drop(clean)
        cfg = dataset_config()
        before = proxy.counts.faults
        proxy.set_rates(0.05)
        proxy.set_body_faults(stall_s=STALL_S, **dict.fromkeys(BODY_FAULTS, 0.05))
        try:
            assert run_pipeline(_via(settings, proxy), cfg, spark) is not None
        finally:
            proxy.set_rates(0.0)
            proxy.set_body_faults()
        n = proxy.counts.faults - before
        injected += n
        print(f"chaos: body faults seed {seed}: {n} faults, by kind {proxy.counts.body}, "
              f"by code {proxy.counts.by_code}")
        assert outcome(clean, cfg) == reference
    assert injected > 0, "no fault was injected: the test proved nothing"
