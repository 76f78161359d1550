"""Compaction on a real (moto) bucket: a dataset of many small label shards becomes a new
version of few large shards with exactly the same rows and ids and new digests; re-running
publishes nothing; the version before stays readable through the sweep's grace period and
its replaced objects go after it; the trainer sees no new rows; the id index and held-out
split are unchanged; a format-1 or 2 dataset is refused until migrated, then compacts; a
racing publisher is not lost."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from shardline.core import builder as builder_mod
from shardline.core import layout
from shardline.core.builder import commit_version
from shardline.core.errors import ObjectExists, StoreError
from shardline.core.manifest import list_versions, read_manifest
from shardline.core.store import ObjectStore
from shardline.core.version_doc import UnsupportedFormat
from shardline.tasks.compact import compact
from shardline.tasks.id_index import published_mask
from shardline.tasks.migrate import migrate
from shardline.tasks.sweep import sweep
from shardline.trainer.holdout import holdout_mask, id_hash64
from shardline.trainer.plan import NothingToTrain, make_plan
from tests.integration.compact_data import (
    BATCHES,
    ROWS,
    as_format1,
    expected_ids,
    publish_small,
    rows_of,
)
from tests.integration.trainer_data import digits_config, publish_version

CFG = digits_config().dataset


def _keys(store: ObjectStore, folder: str) -> set[str]:
    return {o.key for o in store.list(f"{CFG.prefix}/{folder}")}


def test_compaction_same_rows_fewer_shards_new_digests_and_idempotent(store) -> None:
    ms = publish_small(store, CFG)
    before = ms[-1]
    assert before.totals.shards == BATCHES * 10          # one shard per label per batch
    rows_before = rows_of(store, before)

    r = compact(store, CFG, target_mb=1.0)
    assert r.created and r.version == BATCHES + 1 and r.parent == BATCHES
    m = read_manifest(store, CFG.prefix, r.version)
    # one shard per batch: the batch stays apart (its rows keep their version)
    assert m.totals.shards == len(m.shards) == BATCHES
    assert r.plan["shards_before"] == BATCHES * 10 and r.plan["shards_after"] == BATCHES
    assert rows_of(store, m).equals(rows_before)          # every column, every row
    assert sorted(rows_before.column("id").to_pylist()) == expected_ids()
    assert not {s.sha256 for s in m.shards} & {s.sha256 for s in before.shards}
    assert not {s.path for s in m.shards} & {s.path for s in before.shards}
    for s in m.shards:       # digests, label order, counts and stats as ingest writes them
        data = store.get_bytes(s.path)
        from shardline.core.parts import content_digests
        assert content_digests(data) == (s.sha256, s.xxh3_128) and len(data) == s.bytes
        t = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        labels = t.column("label").to_numpy()
        assert (np.diff(labels) >= 0).all() and t.num_rows == s.rows
        counts = dict(zip(*np.unique(labels, return_counts=True), strict=True))
        assert s.label_counts == {str(k): int(v) for k, v in counts.items()}
        assert s.stats["label"] == {"min": int(labels.min()), "max": int(labels.max())}
        assert "label" not in s.partition and s.partition["batch"] == s.batch
    # the same batches, first published in the same versions, with the same id files
    assert [(b.id, b.version, b.rows, b.ids_path) for b in m.batches] == \
        [(b.id, b.version, b.rows, b.ids_path) for b in before.batches]
    assert m.totals.rows == before.totals.rows and m.totals.batches == BATCHES
    # the version says it adds nothing new
    assert m.new_batch is None and m.new_rows == 0 and m.new() == [] and m.sources == []
    assert m.validation.success and m.validation.suites == ["compaction"]
    assert m.validation.counts["rows_rewritten"] == BATCHES * ROWS
    assert m.quarantine.rows == 0

    again = compact(store, CFG, target_mb=1.0)
    assert not again.created and again.version is None
    assert list_versions(store, CFG.prefix) == list(range(1, BATCHES + 2))
    assert again.plan["groups"] == [] and again.plan["shards_before"] == BATCHES

    # a dry run on a fresh dataset writes nothing
    dry = compact(store, CFG, target_mb=1.0, min_mb=100.0, dry_run=True)
    assert not dry.created and dry.plan["shards_in"] == 0   # already large per batch


def test_dry_run_writes_nothing(store) -> None:
    publish_small(store, CFG, batches=2)
    shards = _keys(store, "shards/")
    r = compact(store, CFG, target_mb=1.0, dry_run=True)
    assert r.dry_run and not r.created and r.plan["shards_in"] == 20
    assert r.plan["shards_out"] == 2
    assert _keys(store, "shards/") == shards and list_versions(store, CFG.prefix) == [1, 2]


def test_older_version_readable_in_grace_period_then_swept(store) -> None:
    # a grace period longer than the sweep window (3 days): within it the window alone would
    # let the replaced objects go
    cfg = dataclasses.replace(CFG, retain_replaced_minutes=2 * CFG.sweep_after_minutes)
    ms = publish_small(store, CFG, batches=3)
    old = ms[-1]
    rows_old = rows_of(store, old)
    old_lists = {r.key for r in old.batch_lists}
    time.sleep(1.5)
    mid = datetime.now(UTC)        # the old objects are older than this; the compaction not
    time.sleep(1.5)
    r = compact(store, cfg, target_mb=1.0)
    new = read_manifest(store, CFG.prefix, r.version)

    # within the grace period: the cut-off falls after every replaced object was written,
    # yet they are kept, because the compaction that replaced them is younger than it
    kept = sweep(store, cfg, now=mid + timedelta(minutes=cfg.sweep_after_minutes))
    assert kept.orphans == 0
    assert rows_of(store, read_manifest(store, CFG.prefix, old.version)).equals(rows_old)

    # after it: exactly the replaced shards and batch lists go; everything named stays
    after = sweep(store, cfg, now=datetime.now(UTC) + timedelta(
        minutes=cfg.retain_replaced_minutes + 1))
    assert after.orphans == len(old.shards) + len(old_lists)
    left = _keys(store, "shards/") | _keys(store, "ids/") | _keys(store, "manifests/")
    assert {s.path for s in new.shards} <= left
    assert {b.ids_path for b in new.batches} <= left
    assert {ref.key for ref in new.batch_lists} <= left
    assert not {s.path for s in old.shards} & left and not old_lists & left
    assert rows_of(store, read_manifest(store, CFG.prefix, r.version)).equals(rows_old)
    with pytest.raises(StoreError):      # the pre-compaction version is gone with its files
        rows_of(store, read_manifest(store, CFG.prefix, old.version))


def test_trainer_sees_no_new_rows_and_the_id_index_and_holdout_hold(store) -> None:
    ms = publish_small(store, CFG, batches=4)
    r = compact(store, CFG, target_mb=1.0)
    m = read_manifest(store, CFG.prefix, r.version)
    # a model trained on the last ingested version: nothing new to train on
    with pytest.raises(NothingToTrain):
        make_plan(m, ms[-1].version, replay_ratio=0.5, holdout_fraction=0.1, seed=0)
    # retraining the compaction version itself: it adds no rows either
    with pytest.raises(NothingToTrain):
        make_plan(m, m.version, replay_ratio=0.5, holdout_fraction=0.1, seed=0)
    # a model trained on v2: exactly batches 3 and 4 are new, as before compaction
    p = make_plan(m, 2, replay_ratio=0.5, holdout_fraction=0.1, seed=0)
    p_old = make_plan(ms[-1], 2, replay_ratio=0.5, holdout_fraction=0.1, seed=0)
    new_rows = sum(s.entry.rows for s in p.shards if s.role == "new")
    assert new_rows == sum(s.entry.rows for s in p_old.shards if s.role == "new") == 2 * ROWS
    assert {s.entry.batch for s in p.shards if s.role == "new"} == \
        {b.id for b in ms[-1].batches[2:]}
    assert sorted(s.dataset_version for s in p.shards) == [1, 2, 3, 4]
    # the next ingest after the compaction is the only new data for that model
    nxt = publish_version(store, CFG, np.arange(4 * ROWS, 5 * ROWS))
    p2 = make_plan(nxt, ms[-1].version, replay_ratio=0.5, holdout_fraction=0.1, seed=0)
    assert sum(s.entry.rows for s in p2.shards if s.role == "new") == ROWS
    # the duplicate check reads the same id files: every published id is found
    ids = rows_of(store, m).column("id").combine_chunks()
    assert published_mask(store, [b.ids_path for b in m.batches], ids).all()
    # held-out rows are a function of the id: the same set before and after
    def held(t: pa.Table) -> set[str]:
        mask = holdout_mask(id_hash64(t.column("id")), 0.1)
        return set(np.asarray(t.column("id").to_pylist())[mask].tolist())
    assert held(rows_of(store, m)) == held(rows_of(store, ms[-1])) != set()


def test_format1_dataset_is_migrated_then_compacted(store) -> None:
    publish_small(store, CFG, batches=3)
    before = read_manifest(store, CFG.prefix, 3)
    rows_before, batches = rows_of(store, before), before.batches
    as_format1(store, CFG.prefix, 3)
    with pytest.raises(UnsupportedFormat, match="format 1; .*`shardline migrate --config F`"):
        compact(store, CFG, target_mb=1.0)
    assert migrate(store, CFG).version == 4
    r = compact(store, CFG, target_mb=1.0)
    m = read_manifest(store, CFG.prefix, r.version)
    assert r.version == 5 and m.totals.shards == len(m.shards) == 3
    assert rows_of(store, m).equals(rows_before)
    assert [(b.id, b.version, b.ids_path) for b in m.batches] == \
        [(b.id, b.version, b.ids_path) for b in batches]
    assert m.schema == before.schema
    # the next ingest continues the fixed dataset
    nxt = publish_version(store, CFG, np.arange(3 * ROWS, 4 * ROWS))
    assert nxt.version == 6 and nxt.totals.shards == 3 + 10
    assert [b.version for b in nxt.batches] == [1, 2, 3, 6]
    assert sorted(rows_of(store, nxt).column("id").to_pylist()) == expected_ids(4)


def test_format2_history_with_a_checkpoint_is_migrated_then_compacted(store) -> None:
    from tests.integration.compact_data import as_format2

    for i in range(12):                      # past CHECKPOINT_EVERY: v11 and v12 use one
        publish_version(store, CFG, np.arange(i * 100, (i + 1) * 100))
    rows_before = rows_of(store, read_manifest(store, CFG.prefix, 12))
    as_format2(store, CFG.prefix)
    doc = json.loads(store.get_bytes(layout.version_key(CFG.prefix, 12)))
    assert doc["format"] == 2 and doc["checkpoint"] is not None
    assert migrate(store, CFG).rewritten == 12
    r = compact(store, CFG, target_mb=1.0)
    m = read_manifest(store, CFG.prefix, r.version)
    assert m.totals.shards == len(m.shards) == 12
    assert rows_of(store, m).equals(rows_before)
    assert all(ref.key.endswith(".arrow") for ref in m.batch_lists)
    assert [b.version for b in m.batches] == list(range(1, 13))
    nxt = publish_version(store, CFG, np.arange(1200, 1300))
    assert nxt.totals.shards == 12 + 10 and nxt.totals.rows == 1300


def test_a_racing_publish_is_not_lost(store, monkeypatch) -> None:
    publish_small(store, CFG, batches=2)
    real = commit_version
    raced: list[int] = []

    def racing_commit(s: ObjectStore, draft):   # an ingest commits the same number first
        if not raced:
            raced.append(publish_version(store, CFG, np.arange(2 * ROWS, 3 * ROWS)).version)
        return real(s, draft)

    monkeypatch.setattr(builder_mod, "commit_version", racing_commit)   # under commit_or_lost
    r = compact(store, CFG, target_mb=1.0)
    assert raced == [3] and r.attempts == 2 and r.version == 4 and r.parent == 3
    m = read_manifest(store, CFG.prefix, 4)
    assert [b.version for b in m.batches] == [1, 2, 3]            # the racer's batch is kept
    assert sorted(rows_of(store, m).column("id").to_pylist()) == expected_ids(3)
    assert m.totals.shards == 3                                  # and compacted on the retry
    # nothing the run wrote is left unreferenced (the lost draft's lists were deleted)
    named = {s.path for s in m.shards} | {ref.key for ref in m.batch_lists}
    mine = {k for k in _keys(store, "shards/") | _keys(store, "manifests/batch=")
            if "compact" in k}
    assert mine <= named and mine


def test_a_lost_commit_reply_counts_as_committed(store, monkeypatch) -> None:
    publish_small(store, CFG, batches=2)
    real = commit_version

    def lost_reply(s: ObjectStore, draft):      # the PUT lands, its reply does not
        real(s, draft)
        raise ObjectExists(draft.key)

    monkeypatch.setattr(builder_mod, "commit_version", lost_reply)
    r = compact(store, CFG, target_mb=1.0)
    assert r.created and r.version == 3 and r.attempts == 1
    m = read_manifest(store, CFG.prefix, 3)
    assert sorted(rows_of(store, m).column("id").to_pylist()) == expected_ids(2)


def test_a_damaged_shard_is_not_compacted(store) -> None:
    ms = publish_small(store, CFG, batches=1)
    victim = ms[-1].shards[3]
    store.put_bytes(victim.path, store.get_bytes(victim.path)[:-8] + b"damaged!")
    with pytest.raises(StoreError, match="digest"):
        compact(store, CFG, target_mb=1.0)
    assert list_versions(store, CFG.prefix) == [1]
    assert not {k for k in _keys(store, "manifests/") | _keys(store, "shards/")
                if "compact" in k}


def test_layout_keys(store) -> None:
    """Output shards live in the batch's folder, named with the run id."""
    ms = publish_small(store, CFG, batches=1)
    r = compact(store, CFG, target_mb=1.0, run_id="compactTEST")
    assert r.outputs == [layout.shard_key(CFG.prefix, ms[0].batches[0].id, None, 0,
                                          "compactTEST")]


def test_train_and_holdout_shards_never_merge(store) -> None:
    from shardline.core.idhash import holdout_mask as held_out
    from tests.integration.compact_data import publish_split

    publish_small(store, CFG, batches=1)                        # older mixed shards
    for i in (1, 2):
        publish_split(store, CFG, np.arange(i * ROWS, (i + 1) * ROWS), fraction=0.2)
    before = read_manifest(store, CFG.prefix, 3)
    r = compact(store, CFG, target_mb=1.0)
    m = read_manifest(store, CFG.prefix, r.version)
    assert m.holdout_fraction == before.holdout_fraction == 0.2
    # per batch: one mixed shard (batch 1), or one train and one held-out shard
    assert sorted((s.batch, str(s.split)) for s in m.shards) == sorted(
        [(m.batches[0].id, "None")] + [(b.id, sp) for b in m.batches[1:]
                                       for sp in ("train", "holdout")])
    assert rows_of(store, m).equals(rows_of(store, before))
    for s in m.shards:
        t = pa.ipc.open_file(pa.BufferReader(store.get_bytes(s.path))).read_all()
        mask = held_out(id_hash64(t.column("id")), 0.2)
        if s.split == "holdout":
            assert mask.all() and "/split=holdout/" in s.path
        elif s.split == "train":
            assert not mask.any()
    # the trainer's view: the same train rows are new for a model of version 1
    p_new = make_plan(m, 1, replay_ratio=0.5, holdout_fraction=None, seed=0)
    p_old = make_plan(before, 1, replay_ratio=0.5, holdout_fraction=None, seed=0)
    def new_train(p) -> int:
        return sum(s.entry.rows for s in p.shards if s.role == "new" and
                   s.entry.split != "holdout")
    assert new_train(p_new) == new_train(p_old) > 0


def test_a_run_longer_than_the_grace_period_commits_nothing(store) -> None:
    publish_small(store, CFG, batches=1)
    # a config file may not go under a day (the floor); set past it so the check fires
    hasty = copy.copy(CFG)
    object.__setattr__(hasty, "sweep_after_minutes", 0.0001)          # 6 ms
    with pytest.raises(StoreError, match="sweep_after_minutes"):
        compact(store, hasty, target_mb=1.0)
    assert list_versions(store, CFG.prefix) == [1]
    assert not {k for k in _keys(store, "shards/") if "compact" in k}
