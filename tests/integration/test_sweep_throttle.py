"""The ingest run's sweep scans for orphans (an O(history) listing) only when the last scan
is ``sweep_after_minutes`` old; stale staging runs go every time. Real moto S3 server;
``now`` moves the clock forward instead of waiting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shardline.core import layout
from shardline.core.store import ObjectStore
from shardline.tasks.sweep import sweep
from tests.integration.ingest_helpers import dataset_config


def _listed(store: ObjectStore) -> list[str]:
    """Prefixes listed from now on (a recorder around the real ``list``)."""
    seen: list[str] = []
    real = store.list

    def spy(prefix: str):  # type: ignore[no-untyped-def]
        seen.append(prefix)
        return real(prefix)

    store.list = spy  # type: ignore[method-assign]
    return seen


def test_orphan_scan_runs_once_per_period_staging_every_time(store: ObjectStore) -> None:
    cfg = dataset_config()
    period = timedelta(minutes=cfg.sweep_after_minutes)
    shards = f"{cfg.prefix}/shards/"
    store.put_bytes(f"{shards}batch=crashed/a.arrow", b"a")     # an orphan (no version)
    t1 = datetime.now(UTC) + period + timedelta(minutes=1)
    first = sweep(store, cfg, now=t1, full=False)
    assert first.scanned and first.orphans == 1
    assert store.get_json(layout.sweep_marker(cfg.prefix))["scanned_at"] == t1.isoformat()

    store.put_bytes(f"{shards}batch=crashed2/b.arrow", b"b")
    store.put_bytes(f"{cfg.prefix}/staging/dead-run/x", b"x")   # a crashed run's staging
    listed = _listed(store)
    soon = sweep(store, cfg, now=t1 + timedelta(minutes=1), full=False)
    assert not soon.scanned and soon.orphans == 0
    assert soon.staging_runs == 1                              # staging: swept every time
    assert not [p for p in listed if p.startswith(shards)]     # no O(history) listing
    assert store.head(f"{shards}batch=crashed2/b.arrow") is not None

    due = sweep(store, cfg, now=t1 + period + timedelta(minutes=2), full=False)
    assert due.scanned and due.orphans == 1
    assert store.head(f"{shards}batch=crashed2/b.arrow") is None
    assert [p for p in listed if p.startswith(shards)]

    # full (the CLI's compact --sweep, and the default) scans regardless
    assert sweep(store, cfg, now=t1 + period + timedelta(minutes=3)).scanned


def test_an_unreadable_marker_means_a_scan(store: ObjectStore) -> None:
    cfg = dataset_config(name="garbled")
    store.put_bytes(layout.sweep_marker(cfg.prefix), b"{not json")
    assert sweep(store, cfg, full=False).scanned
