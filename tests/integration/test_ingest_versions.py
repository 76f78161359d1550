"""Versions: idempotent re-runs, incremental versions, the validation gate, racing
publishers, crash safety and sweeping. Real moto S3 server, Spark Connect, GX."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shardline.core import layout
from shardline.core.builder import write_objects
from shardline.core.errors import ValidationFailed
from shardline.core.manifest import latest_manifest, list_versions, read_manifest
from shardline.core.schema import staging_prefix
from shardline.infra.demo_data import bad_jsonl_lines, csv_bytes, digits, jsonl_bytes
from shardline.tasks import publish as publish_mod
from shardline.tasks.driver_stages import plain
from shardline.tasks.sweep import sweep
from tests.integration.ingest_helpers import (
    assert_exactly_once,
    dataset_config,
    published_rows,
    run_pipeline,
)

IN = "incoming/digits/"


def _staged(store, cfg, spark, latest=None):
    """The driver's stages up to publish, converted against ``latest`` (a racer's view)."""
    stages = plain(store, cfg, spark, latest=lambda: latest)
    conv = stages.convert(stages.detect(), uuid.uuid4().hex[:12])
    return conv, stages.validate(conv)


def test_rerun_publishes_nothing_and_a_second_upload_makes_version_2(store, spark):
    cfg = dataset_config()
    store.put_bytes(f"{IN}p1.jsonl", jsonl_bytes(digits(0, 200)))
    v1 = run_pipeline(store, cfg, spark)
    assert (v1.version, v1.created, v1.rows_published) == (1, True, 200)
    assert run_pipeline(store, cfg, spark) is None          # nothing new: no version
    assert list_versions(store, cfg.prefix) == [1]

    # part 2 repeats one id of part 1: it is quarantined as a duplicate of a published row
    store.put_bytes(f"{IN}p2.csv", csv_bytes(digits(200, 300) + digits(3, 4)))
    v2 = run_pipeline(store, cfg, spark)
    assert (v2.version, v2.rows_published, v2.rows_quarantined) == (2, 100, 1)
    m1, m2 = read_manifest(store, cfg.prefix, 1), read_manifest(store, cfg.prefix, 2)
    assert m2.parent == 1 and [b.id for b in m2.batches][:1] == [m1.batches[0].id]
    assert {s.path for s in m1.shards} <= {s.path for s in m2.shards}
    assert set(m2.new_shards) == {s.path for s in m2.shards} - {s.path for s in m1.shards}
    assert all(s.batch == m2.batches[-1].id for s in m2.new())
    assert m2.new_rows == 100 and m2.rows == 300
    assert_exactly_once(store, m2, [d.id for d in digits(0, 300)],
                        [("d00003", "duplicate_id")])
    assert [s.key for s in m2.sources] == [f"{IN}p2.csv"]
    assert m2.validation.success and m2.schema.shape == [8, 8, 1]
    assert run_pipeline(store, cfg, spark) is None
    # the claim ledger knows both batches
    assert len(list(store.list(f"{cfg.prefix}/batches/"))) == 2


def test_a_failing_suite_publishes_nothing_and_says_why(store, spark):
    cfg = dataset_config(validation={"max_quarantine_fraction": 0.05})
    lines = [line for line, _ in bad_jsonl_lines()]
    store.put_bytes(f"{IN}bad.jsonl", jsonl_bytes(digits(0, 20)) + "\n".join(lines).encode())
    with pytest.raises(ValidationFailed) as e:
        run_pipeline(store, cfg, spark)
    msg = str(e.value)
    assert "expect_column_values_to_be_in_set(status)" in msg
    assert "10 quarantined" in msg and "limit 5.0%" in msg and "unknown_label" in msg
    assert "nothing was published" in msg
    assert list_versions(store, cfg.prefix) == []
    assert not list(store.list(f"{cfg.prefix}/shards/"))
    reports = [o.key for o in store.list(f"{cfg.prefix}/reports/")]
    assert len(reports) == 1
    doc = store.get_json(reports[0])
    assert doc["success"] is False and doc["counts"]["quarantined"] == 10
    assert {r["rule"] for r in doc["quarantined_examples"]} >= {"unknown_label", "missing_id"}


def test_two_ingests_racing_for_the_same_batch_make_one_version(store, spark):
    cfg = dataset_config()
    store.put_bytes(f"{IN}p1.jsonl", jsonl_bytes(digits(0, 150)))
    a, b = _staged(store, cfg, spark), _staged(store, cfg, spark)
    assert a[0].batch.id == b[0].batch.id and a[0].run_id != b[0].run_id
    results, errors = [], []
    barrier = threading.Barrier(2)

    def go(conv, report):
        barrier.wait()
        try:
            results.append(publish_mod.publish(store, cfg, conv, report))
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=x) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert list_versions(store, cfg.prefix) == [1]
    assert sorted(r.created for r in results) == [False, True]
    assert {r.version for r in results} == {1}
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [d.id for d in digits(0, 150)], [])
    # the loser cleaned up: only the winner's shards exist under shards/
    on_disk = {o.key for o in store.list(f"{cfg.prefix}/shards/")}
    assert on_disk == {s.path for s in m.shards}
    assert not list(store.list(staging_prefix(cfg.prefix)))


def test_racing_publishers_of_different_batches_get_distinct_versions(store, spark):
    cfg = dataset_config()
    store.put_bytes(f"{IN}p1.jsonl", jsonl_bytes(digits(0, 100)))
    a = _staged(store, cfg, spark)
    store.put_bytes(f"{IN}p2.jsonl", jsonl_bytes(digits(100, 180)))
    # b's batch is p1+p2 (nothing published yet); make it only p2 by claiming p1 first
    from shardline.tasks.ledger import write_claim
    write_claim(store, cfg, a[0].batch, 0)
    b = _staged(store, cfg, spark)
    store.delete([f"{cfg.prefix}/batches/{a[0].batch.id}.json"])
    barrier = threading.Barrier(2)
    out = []

    def go(conv, report):
        barrier.wait()
        out.append(publish_mod.publish(store, cfg, conv, report))

    threads = [threading.Thread(target=go, args=x) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p.version for p in out) == [1, 2] and all(p.created for p in out)
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [d.id for d in digits(0, 180)], [])


def test_a_reader_never_sees_a_version_whose_shards_are_missing(store, spark, monkeypatch):
    cfg = dataset_config()
    store.put_bytes(f"{IN}p1.jsonl", jsonl_bytes(digits(0, 100)))
    conv, report = _staged(store, cfg, spark)

    # Crash after the shards are copied and the batch list written, before the version
    # document (fault injection in our own code; the S3 server is real): no version may
    # appear.
    def crash(store_, draft, check=None):
        write_objects(store_, draft)
        raise RuntimeError("simulated crash before commit")

    monkeypatch.setattr(publish_mod, "commit_version", crash)
    with pytest.raises(RuntimeError):
        publish_mod.publish(store, cfg, conv, report)
    monkeypatch.undo()
    assert list_versions(store, cfg.prefix) == []
    assert list(store.list(f"{cfg.prefix}/shards/")), "the crash left copied shards behind"
    assert list(store.list(layout.batch_lists_prefix(cfg.prefix))), "and its batch list"

    # A reader polls while a real publish runs: every version it sees is complete.
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            for v in list_versions(store, cfg.prefix):
                m = read_manifest(store, cfg.prefix, v)
                missing = [s.path for s in m.shards if store.head(s.path) is None]
                seen.append((v, missing))

    t = threading.Thread(target=reader)
    t.start()
    try:
        pub = run_pipeline(store, cfg, spark)
    finally:
        stop.set()
        t.join()
    assert pub.version == 1
    assert all(missing == [] for _, missing in seen)

    # The crashed run's copies and staging are swept once old enough; live files stay.
    later = datetime.now(UTC) + timedelta(minutes=cfg.sweep_after_minutes + 1)
    result = sweep(store, cfg, now=later)
    assert result.orphans > 0 and result.staging_runs == 1
    m = latest_manifest(store, cfg.prefix)
    assert {o.key for o in store.list(f"{cfg.prefix}/shards/")} == {s.path for s in m.shards}
    assert {o.key for o in store.list(layout.batch_lists_prefix(cfg.prefix))} == \
        {r.key for r in m.batch_lists}
    assert published_rows(store, m).num_rows == 100
    assert sweep(store, cfg, now=later).orphans == 0
