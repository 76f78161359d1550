"""Ingest through a Spark standalone cluster (a master and 2 workers on loopback), not local
mode: the stack's Spark Connect server is the cluster's driver and every conversion task
runs in an executor that a worker launched. The accounting must be exactly that of local
mode: every row published or quarantined once.

Real parts: the embedded stack (moto, PostgreSQL, Prefect, Spark master, 2 workers, Spark
Connect), great-expectations, Arrow.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shardline.core.config import SparkSettings, StoreSettings
from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.infra import procs, spark_cluster, stack
from shardline.infra.demo_data import bad_jsonl_lines, digits, jsonl_bytes
from shardline.infra.stack_state import ACCESS_KEY, REGION, SECRET_KEY, StackConfig
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config, run_pipeline

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cluster_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.StackState]:
    ports = {n: procs.free_port() for n in ("s3", "prefect", "spark")}
    cfg = StackConfig.resolve(tmp_path_factory.mktemp("cluster"), ports, spark_workers=2,
                              env={})
    try:
        yield stack.up(cfg).state
    finally:
        from shardline.tasks.convert.spark import close_sessions

        state = stack.load_state(cfg.home)
        if state is not None and "spark" in state.services:
            close_sessions(state.spark_remote)
        stack.down(cfg.home, discard=True)
        for pid in (state.services.values() if state else ()):
            assert not procs.alive(pid.pid) and not procs.group_members(pid.pid), pid.name


def test_ingest_through_a_two_worker_cluster_is_exact(cluster_stack: stack.StackState) -> None:
    state = cluster_stack
    names = set(state.services)
    assert {"spark-master", "spark-worker-1", "spark-worker-2", "spark"} <= names
    master = state.services["spark-master"]
    ui = int((master.health_url or "").rsplit(":", 1)[1].split("/")[0])
    assert len(spark_cluster.alive_workers(ui)) == 2

    store = ObjectStore(StoreSettings(bucket=state.bucket, endpoint_url=state.s3_endpoint,
                                      access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                                      region=REGION))
    cfg = dataset_config()
    good = digits(0, 150)
    bad = bad_jsonl_lines()[:3]
    # Several objects, so the conversion has tasks for both executors.
    for i in range(0, 150, 30):
        store.put_bytes(f"{cfg.incoming}part-{i:03d}.jsonl", jsonl_bytes(good[i:i + 30]))
    store.put_bytes(f"{cfg.incoming}bad.jsonl",
                    ("\n".join(line for line, _ in bad) + "\n").encode())

    pub = run_pipeline(store, cfg, SparkSettings(remote=state.spark_remote))
    assert pub is not None and (pub.version, pub.rows_published) == (1, 150)
    m = latest_manifest(store, cfg.prefix)
    assert m is not None
    assert_exactly_once(store, m, [d.id for d in good],
                        [(ident, rule) for (_, rule), ident in
                         zip(bad, ("bad-label", "no-label", "bad.jsonl"), strict=True)])

    # Not local mode: the driver's master is the standalone master, and each worker ran an
    # executor of the Connect server's application (its work dir has the app's folder).
    from pyspark.sql import SparkSession

    # create(), not getOrCreate(): the latter hands back whatever default session this
    # process already has (another test's local-mode server), whatever the URL
    spark = SparkSession.builder.remote(state.spark_remote).create()
    try:
        assert spark.conf.get("spark.master") == master.url
    finally:
        spark.stop()   # before the server stops (an open client retries at exit)
    data = spark_cluster.cluster_json(ui) or {}
    assert [a["cores"] for a in data.get("activeapps", [])] == [2]
    work = Path(state.home) / "spark" / "cluster"
    for i in (1, 2):
        assert list((work / f"worker-{i}").glob("app-*/*")), f"worker {i} ran no executor"
