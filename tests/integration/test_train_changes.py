"""The trainer follows label changes (issue 24), end to end on moto with real training
(CPU): after 50 ids are deleted and 100 labels corrected, the next model's batches hold
every corrected row of the train split with its new label, as new data, and never a deleted
id or a superseded row; its registry row counts the changes it learned.

The correction is published the way ingest publishes a corrections batch (its shards and
id file through the builder, then ``tasks.corrections.with_corrections``), without Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from shardline.core.builder import commit_version
from shardline.core.config import DatasetConfig
from shardline.core.idhash import holdout_ids
from shardline.core.manifest import latest_manifest, read_manifest
from shardline.core.store import ObjectStore
from shardline.tasks.corrections import with_corrections
from shardline.tasks.delete import delete_ids
from shardline.trainer.options import RunOptions
from shardline.trainer.plan import NothingToTrain
from shardline.trainer.registry_view import model_rows, with_changes_seen
from shardline.trainer.run import train
from tests.integration.trainer_data import digits, digits_config, draft_version, publish_version

FAST = RunOptions(log_every=10, checkpoint_every=1000)


def _correct(store: ObjectStore, cfg: DatasetConfig, rows: np.ndarray) -> dict[str, int]:
    ids, labels, images = digits()
    fixed = labels.copy()
    fixed[rows] = (fixed[rows] + 1) % 10
    parent = latest_manifest(store, cfg.prefix)

    def put(key: str, body: bytes) -> None:
        store.put_bytes(key, body)

    draft = draft_version(put, cfg, rows, parent, data=(ids, fixed, images))
    draft = with_corrections(store, draft, parent, pa.array([ids[i] for i in rows]), "fix1")
    m = commit_version(store, draft)
    assert m.doc.changes is not None and m.doc.changes.updated == len(rows)
    return {ids[i]: int(fixed[i]) for i in rows}


def _ids(store: ObjectStore, path: str) -> list[str]:
    return pa.ipc.open_file(pa.py_buffer(store.get_bytes(path))).read_all().column(
        "id").to_pylist()


def test_the_next_model_learns_corrections_and_never_sees_deleted_rows(
        store: ObjectStore, tmp_path: Path) -> None:
    cfg = digits_config(cache_dir=str(tmp_path / "cache"), width=8, epochs=1, batch_size=32)
    ids = digits()[0]
    publish_version(store, cfg.dataset, np.arange(600))
    assert train(cfg, store, options=FAST).promoted
    gone = [ids[i] for i in range(203, 600, 7)][:50]      # none of the corrected rows
    delete_ids(store, cfg.dataset, gone)
    try:
        train(cfg, store, options=FAST)
        raise AssertionError("a deletion alone gave the trainer new rows")
    except NothingToTrain:
        pass
    new = _correct(store, cfg.dataset, np.arange(100, 200))
    m = read_manifest(store, cfg.dataset.prefix, 3)

    served: list[tuple[str, int]] = []
    shards = m.shards
    cache: dict[int, list[str]] = {}

    def on_batch(step: int, batch: dict) -> None:
        for key, label in zip(batch["key"].tolist(), batch["label"].tolist(), strict=True):
            o, r = key >> 32, key & 0xFFFFFFFF
            if o not in cache:
                cache[o] = _ids(store, shards[o].path)
            served.append((cache[o][r], int(label)))

    result = train(cfg, store, options=FAST, on_batch=on_batch)
    assert result.dataset_version == 3 and result.parent_model_version == 1
    seen = dict(served)
    assert not set(gone) & set(seen)                          # no deleted id, ever
    fraction = m.holdout_fraction or cfg.train.holdout_fraction
    trainable = {i for i in new if not holdout_ids(pa.array([i]), fraction)[0]}
    assert trainable and trainable <= set(seen)               # every corrected train row
    assert all(seen[i] == new[i] for i in trainable)          # with its new label only
    assert all(label == new[i] for i, label in served if i in new)

    rows = with_changes_seen(store, cfg.dataset.prefix,
                             model_rows(store, "digits", cfg.train.registry_name))
    last = rows[-1]
    assert (last["corrected"], last["deleted"]) == (100, 50), last
