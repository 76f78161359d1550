"""Zarr groups under S3 faults (issue 11, left by the first chaos session: "Zarr reads use
s3fs retries, not max_attempts"). Zarr is read through s3fs, not through the store's boto3
client, so it needs the same retry policy handed to it, and a failure that is the
environment's (S3 answering 5xx past every retry) must fail the task as transient, never
become an ``unreadable_object`` quarantine row for a good group.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits, jsonl_bytes, upload_zarr
from tests.chaos.faults_proxy import FaultProxy
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config, run_pipeline

IN = "incoming/digits/"
FULL = os.environ.get("SHARDLINE_CHAOS_FULL") == "1"
ZARR = r"^(GET|HEAD) /[^/]+/incoming/digits/g\.zarr/"
pytestmark = pytest.mark.chaos
PROXY_SEED = 7


@pytest.mark.skipif(not FULL, reason="make chaos (SHARDLINE_CHAOS_FULL=1): ~90 s")
def test_zarr_reads_retry_like_the_store_and_a_lasting_fault_is_no_quarantine(
        store: ObjectStore, proxy: FaultProxy, spark) -> None:
    from shardline.tasks.driver import environment_failure

    cfg = dataset_config()
    upload_zarr(store, f"{IN}g.zarr", digits(0, 300), chunk_rows=32)
    store.put_bytes(f"{IN}h.jsonl", jsonl_bytes(digits(300, 700)))
    good = [d.id for d in digits(0, 700)]
    via = ObjectStore(dataclasses.replace(store.settings, endpoint_url=proxy.url))

    # 1. every Zarr request fails (2 attempts a call, to keep it short): the ingest fails as
    # the environment's failure; the group is neither quarantined nor struck. Before the
    # fix the group became one unreadable_object row and its 300 rows were never published
    proxy.set_rates(1.0, only=ZARR)
    try:
        with pytest.raises(Exception) as info:  # noqa: B017 - the type crosses Spark
            run_pipeline(ObjectStore(dataclasses.replace(via.settings, max_attempts=2)), cfg,
                        spark)
    finally:
        proxy.set_rates(0.0)
    assert proxy.counts.faults_before > 0, "no Zarr request went through the proxy"
    print(f"chaos-zarr: p=1 on the group: {type(info.value).__name__}: "
          f"{str(info.value)[:300]}")
    assert latest_manifest(store, cfg.prefix) is None, \
        "a group S3 could not serve was published (as quarantine) instead of retried"
    assert environment_failure(info.value), "a lasting 5xx must count as transient"
    # run_pipeline is the driver the flow runs: the environment's failure strikes nothing
    assert not list(store.list(f"{cfg.prefix}/setaside/")), "the group was struck"

    # 2. a third of the group's requests fail: its retries absorb them
    f0 = proxy.counts.faults_before
    proxy._rng.seed(3)
    proxy.set_rates(0.3, only=ZARR)
    try:
        pub = run_pipeline(via, cfg, spark)
    finally:
        proxy.set_rates(0.0)
    print(f"chaos-zarr: p=0.3 on the group: {proxy.counts.faults_before - f0} faults")
    assert proxy.counts.faults_before > f0
    assert pub is not None and pub.created
    m = latest_manifest(store, cfg.prefix)
    assert m is not None and m.version == 1
    assert_exactly_once(store, m, good, [])
