"""Deleting rows by id on a real (moto) bucket: a new version masks them with one deletion
vector per touched shard; no reader (Arrow/pandas API, the trainer's shuffled and fixed-order
loaders, the held-out split) serves a masked row; the version before is unchanged; unknown
ids are refused by name with nothing written; re-running publishes nothing; a later ingest
keeps the masks; compaction applies them; a deletion racing an ingest loses neither.

Versions are published through the builder ingest uses (``bench.digits_data``), not Spark:
the deletion path reads no more than what those versions hold."""

from __future__ import annotations

import functools
import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import shardline
from shardline.core.config import StoreSettings
from shardline.core.errors import ObjectExists
from shardline.core.manifest import Manifest, latest_manifest, read_manifest
from shardline.core.references import referenced
from shardline.core.store import ObjectStore
from shardline.tasks.compact import compact
from shardline.tasks.delete import DeleteRefused, delete_ids
from shardline.tasks.id_index import published_mask
from shardline.tasks.verify import verify
from tests.integration.cli_helpers import EXE, cli_env
from tests.integration.compact_data import rows_of
from tests.integration.trainer_data import (
    config_toml,
    digits,
    digits_config,
    publish_version,
)

CFG = digits_config().dataset
IDS = digits()[0]
PER_BATCH = 200


def ingest_batch(store: ObjectStore, batch: int) -> Manifest:
    """Publish batch ``batch`` (rows ``batch*200 ..``), rebasing on a lost race as ingest
    does."""
    while True:
        try:
            return publish_version(store, CFG, np.arange(batch * PER_BATCH,
                                                         (batch + 1) * PER_BATCH))
        except ObjectExists:
            continue


def _served(ds: shardline.Dataset, tmp: Path, **kw: object) -> list[tuple[int, int]]:
    """(shard ordinal, row) of every sample the API's torch loader serves."""
    with ds.torch_loader(batch_size=64, cache_dir=str(tmp), **kw) as loader:
        return [(int(k) >> 32, int(k) & 0xFFFFFFFF) for b in loader for k in b["key"]]


def _ids_served(ds: shardline.Dataset, tmp: Path, **kw: object) -> list[str]:
    shards = ds.manifest.shards
    ids: dict[int, list[str]] = {}
    out = []
    for o, r in _served(ds, tmp, **kw):
        if o not in ids:
            t = pa.ipc.open_file(pa.py_buffer(ds.store.get_bytes(shards[o].path))).read_all()
            ids[o] = t.column("id").to_pylist()
        out.append(ids[o][r])
    return out


def test_deleted_ids_are_absent_from_every_reader_and_the_version_before_is_unchanged(
        store: ObjectStore, tmp_path: Path) -> None:
    for b in range(3):
        ingest_batch(store, b)
    before = latest_manifest(store, CFG.prefix)
    assert before is not None and before.rows == 600
    gone = [IDS[i] for i in range(5, 600, 12)][:50]          # spread over every batch
    r = delete_ids(store, CFG, gone)
    assert r.created and r.version == 4 and r.rows_deleted == 50
    m = read_manifest(store, CFG.prefix, 4)
    assert m.rows == 550 and m.doc.changes is not None and m.doc.changes.deleted == 50
    assert m.new_rows == 0 and m.new_batch is None
    # one vector per touched shard, referenced by the version (what the sweep keeps)
    assert r.shards_touched == len(m.deletion_refs) <= 30
    assert {x.key for x in m.deletion_refs} <= referenced(m)
    assert sum(len(v) for v in m.masks().values()) == 50

    ds = shardline.open_dataset(CFG, store=store)
    table = ds.to_table()
    assert table.num_rows == 550 and not set(gone) & set(table.column("id").to_pylist())
    assert len(ds.to_pandas()) == 550
    threes = ds.to_table(columns=["id"], filter=pc.field("label") == 3).column("id")
    assert 0 < len(threes) < 100 and not set(gone) & set(threes.to_pylist())
    served = _ids_served(ds, tmp_path / "c1")                 # shuffled, one epoch
    assert len(served) == len(set(served)) == 550 and not set(gone) & set(served)
    fixed = _ids_served(ds, tmp_path / "c2", shuffle=False)   # the fixed-order pass
    assert sorted(fixed) == sorted(served)
    held = _ids_served(ds, tmp_path / "c3", split="holdout", shuffle=False)
    train = _ids_served(ds, tmp_path / "c4", split="train")
    assert len(held) + len(train) == 550 and not set(gone) & (set(held) | set(train))

    old = shardline.open_dataset(CFG, 3, store=store)          # history is immutable
    assert old.to_table().num_rows == 600
    assert verify(store, CFG).sound


def test_unknown_ids_are_refused_by_name_and_a_rerun_publishes_nothing(
        store: ObjectStore) -> None:
    ingest_batch(store, 0)
    with pytest.raises(DeleteRefused, match="'no-such-id'"):
        delete_ids(store, CFG, [IDS[3], "no-such-id"])
    assert latest_manifest(store, CFG.prefix).version == 1   # type: ignore[union-attr]
    assert not list(store.list(f"{CFG.prefix}/deletes/"))
    first = delete_ids(store, CFG, [IDS[3], IDS[4]])
    again = delete_ids(store, CFG, [IDS[3], IDS[4]])
    assert first.created and not again.created and again.already_deleted == [IDS[3], IDS[4]]
    assert latest_manifest(store, CFG.prefix).version == 2   # type: ignore[union-attr]


def test_a_later_ingest_keeps_the_masks_and_compaction_applies_them(
        store: ObjectStore) -> None:
    ingest_batch(store, 0)
    ingest_batch(store, 1)
    gone = [IDS[i] for i in (1, 2, 250, 399)]
    delete_ids(store, CFG, gone)
    m = ingest_batch(store, 2)
    assert m.version == 4 and m.rows == 596 and m.doc.deletions is not None
    c = compact(store, CFG, target_mb=1.0)
    assert c.created
    cm = read_manifest(store, CFG.prefix, c.version)     # type: ignore[arg-type]
    assert cm.doc.deletions is None and cm.rows == 596 == cm.totals.rows
    assert sum(b.rows for b in cm.batch_lists) == 596
    ids = rows_of(store, cm).column("id").to_pylist()
    assert len(ids) == 596 and not set(gone) & set(ids)    # the files hold no deleted row
    # nor the id index: a deleted id may come again (and the id ranges that held one go)
    probe = pa.array(gone + [IDS[0], IDS[300]])
    held = published_mask(store, [b.ids_path for b in cm.batches], probe)
    assert held.tolist() == [False] * 4 + [True, True]
    touched = {b.id for b in m.batches if b.version in (1, 2)}
    assert all(r.id_min is None for r in cm.batch_lists if r.batch in touched)
    assert verify(store, CFG).sound


def race(store: ObjectStore, batch: int, name: str,
         remove: Callable[[], object]) -> dict[str, object]:
    """An ingest of ``batch`` (as ``ingest``) and ``remove`` (as ``name``), started
    together; their results (or the exception each raised). test_erase_race uses it too."""
    start = threading.Barrier(2)
    out: dict[str, object] = {}

    def run(name: str, fn: Callable[[], object]) -> None:
        start.wait()
        try:
            out[name] = fn()
        except Exception as exc:         # noqa: BLE001 - reported by the assertion below
            out[name] = exc

    jobs = {"ingest": lambda: ingest_batch(store, batch), name: remove}
    threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_a_deletion_racing_an_ingest_loses_neither(store: ObjectStore) -> None:
    ingest_batch(store, 0)
    every: set[str] = set()
    for rnd in range(3):
        gone = [IDS[i] for i in range(rnd * 10, rnd * 10 + 5)]
        every.update(gone)
        out = race(store, rnd + 1, "delete", functools.partial(delete_ids, store, CFG, gone))
        assert isinstance(out["ingest"], Manifest), out
        assert getattr(out["delete"], "rows_deleted", None) == 5, out
        m = latest_manifest(store, CFG.prefix)
        assert m is not None and m.version == 1 + 2 * (rnd + 1)   # both landed, once each
        assert len(m.batches) == rnd + 2
        assert m.rows == PER_BATCH * (rnd + 2) - 5 * (rnd + 1)
        ids = shardline.open_dataset(CFG, store=store).to_table().column("id").to_pylist()
        assert len(ids) == m.rows and not every & set(ids)


def test_the_cli_deletes_and_refuses_an_unknown_id_in_one_line(
        store: ObjectStore, store_settings: StoreSettings, tmp_path: Path) -> None:
    ingest_batch(store, 0)
    path = tmp_path / "dataset.toml"
    path.write_text(config_toml(digits_config()))
    env = cli_env(store_settings, tmp_path)

    def run(ids: list[str], *args: str) -> subprocess.CompletedProcess[str]:
        f = tmp_path / "ids.txt"
        f.write_text("\n".join(ids) + "\n\n")
        return subprocess.run([EXE, "delete", "-c", str(path), "--ids", str(f), *args],
                              env=env, capture_output=True, text=True, timeout=180)

    bad = run([IDS[1], "nope-7"])
    assert bad.returncode == 1 and "'nope-7'" in bad.stderr + bad.stdout
    assert len((bad.stderr + bad.stdout).strip().splitlines()) == 1
    ok = run([IDS[1], IDS[2]], "--json")
    assert ok.returncode == 0, ok.stderr
    got = json.loads(ok.stdout)
    assert got["created"] and got["version"] == 2 and got["rows_deleted"] == 2
    assert latest_manifest(store, CFG.prefix).rows == PER_BATCH - 2   # type: ignore[union-attr]
