"""Issue 23's data loss under clock skew, on the real moto S3 server with Spark: a second
ingest host sweeps while a publish is between its copies and its commit. The sweep judges
age by the store's clock and keeps a running run's files (its lease); should it still take
one (a run stalled past the window), the publish's check before the commit finds it and the
batch is converted again. Either way the version names only objects that exist."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shardline.core import layout
from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits, jsonl_bytes
from shardline.tasks import publish as publish_mod
from shardline.tasks.lease import store_now
from shardline.tasks.sweep import SweepResult, sweep
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config, run_pipeline

IN = "incoming/digits/"


def _sweep_before_first_commit(monkeypatch: pytest.MonkeyPatch, store: ObjectStore, cfg,
                               **sweep_args) -> list[SweepResult]:
    """Host B's sweep, run once between host A's copies and its commit (the wrapper is
    fault injection in our code; the store and the sweep are real)."""
    swept: list[SweepResult] = []
    real = publish_mod.commit_version

    def commit(store_, draft, check=None):
        if not swept:
            swept.append(sweep(store, cfg, keep_run="host-b", **sweep_args))
        return real(store_, draft, check=check)

    monkeypatch.setattr(publish_mod, "commit_version", commit)
    return swept


def _assert_whole(store: ObjectStore, cfg, n: int) -> None:
    m = latest_manifest(store, cfg.prefix)
    assert m is not None and m.version == 1
    named = [(s.path, s.bytes) for s in m.shards + m.quarantine.shards]
    assert all(store.head(k) is not None and store.head(k).size == b for k, b in named)
    assert all(store.head(r.key) is not None for r in m.batch_lists)
    assert_exactly_once(store, m, [d.id for d in digits(0, n)], [])   # digests checked too


@pytest.mark.parametrize("ahead", [timedelta(hours=2), timedelta(days=3, hours=2)],
                         ids=["campaign-2h", "past-the-window"])
def test_a_host_whose_clock_runs_ahead_sweeps_nothing_of_a_running_publish(
        store, spark, monkeypatch, caplog, ahead):
    cfg = dataset_config()
    store.put_bytes(f"{IN}p1.jsonl", jsonl_bytes(digits(0, 120)))
    swept = _sweep_before_first_commit(
        monkeypatch, store, cfg, clock=lambda: datetime.now(UTC) + ahead)
    pub = run_pipeline(store, cfg, spark, run_id="host-a")
    assert swept, "host B's sweep ran between host A's copies and its commit"
    assert (swept[0].staging_runs, swept[0].orphans) == (0, 0)
    assert pub is not None and pub.version == 1
    _assert_whole(store, cfg, 120)
    assert "clock is" in caplog.text                       # the skew is reported, not used
    assert not list(store.list(layout.leases_prefix(cfg.prefix)))     # released at the end


def test_a_publish_whose_files_were_swept_converts_again_and_commits_whole(
        store, spark, monkeypatch):
    cfg = dataset_config()
    store.put_bytes(f"{IN}p1.jsonl", jsonl_bytes(digits(0, 120)))
    # the store's clock past the window: host A looks dead (its lease too old) to host B
    later = store_now(store, cfg.prefix) + timedelta(minutes=cfg.sweep_after_minutes + 60)
    swept = _sweep_before_first_commit(monkeypatch, store, cfg, now=later)
    pub = run_pipeline(store, cfg, spark, run_id="host-a")
    assert swept[0].staging_runs == 1 and swept[0].orphans > 0     # the fault happened
    assert pub is not None and pub.version == 1 and pub.created
    _assert_whole(store, cfg, 120)
