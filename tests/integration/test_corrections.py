"""Corrections on a real (moto) bucket, through the ingest driver (detect, convert,
duplicate check, great-expectations validation, publish): 100 rows uploaded under
``incoming/<dataset>/corrections/`` replace the published rows with the same ids. The newest
version serves the new labels and each id once; unknown ids are quarantined as
``unknown_id`` (every row exactly once); ``diff`` lists the corrected ids with old and new
labels and the deleted ones; the trainer's next plan trains on the corrected rows as new
data, never replays a superseded row, and keeps each corrected row's held-out split.

Convert runs shardline's own task code in-process (``convert_group`` + ``assemble``, as
``tests/unit/test_driver_folder.py``), not on Spark: nothing here depends on Spark."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
from typer.testing import CliRunner

import shardline
from shardline.cli.main import app
from shardline.core.config import Config, DatasetConfig, StoreSettings
from shardline.core.idhash import dataset_fraction, holdout_ids
from shardline.core.manifest import latest_manifest
from shardline.core.parts import HOLDOUT
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits, jsonl_bytes
from shardline.tasks.batch import Batch
from shardline.tasks.convert.converted import Converted
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.stage import assemble
from shardline.tasks.delete import delete_ids
from shardline.tasks.driver import run_ingest
from shardline.tasks.driver_stages import plain
from shardline.trainer.holdout import id_hash64
from shardline.trainer.plan import make_plan
from shardline.trainer.registry_view import with_changes_seen
from shardline.trainer.shard_file import ShardIndex
from tests.integration.cli_helpers import cli_env
from tests.integration.ingest_helpers import dataset_config, quarantined_rows
from tests.integration.trainer_data import config_toml


def _ingest(store: ObjectStore, cfg: DatasetConfig, run: str) -> list:
    def convert(batch: Batch, run_id: str) -> Converted:
        meta = pa.Table.from_batches([convert_group(store, cfg, run_id, (Part.of(s),), task=t)
                                      for t, s in enumerate(batch.sources)])
        return assemble(store, cfg, batch, run_id, latest_manifest(store, cfg.prefix), meta)
    return run_ingest(dataclasses.replace(plain(store, cfg), convert=convert), run)


def _rows(store: ObjectStore, path: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(store.get_bytes(path))).read_all()


def test_corrections_replace_rows_and_the_trainer_follows(
        store: ObjectStore, store_settings: StoreSettings, tmp_path: Path) -> None:
    cfg = dataset_config()
    store.put_bytes(f"{cfg.incoming}a.jsonl", jsonl_bytes(digits(0, 300)))
    assert len(_ingest(store, cfg, "r1")) == 1
    fixed = [dataclasses.replace(d, label=(d.label + 1) % 10) for d in digits(0, 100)]
    strangers = digits(900, 903, prefix="x")
    store.put_bytes(f"{cfg.incoming}corrections/week1.jsonl", jsonl_bytes(fixed + strangers))
    assert len(_ingest(store, cfg, "r2")) == 1

    m = latest_manifest(store, cfg.prefix)
    assert m is not None and m.version == 2 and m.rows == 300
    assert m.doc.changes is not None and m.doc.changes.updated == 100
    q = quarantined_rows(store, m)
    assert Counter(q.column("rule").to_pylist()) == {"unknown_id": 3}
    assert all("not in any published version" in x for x in q.column("message").to_pylist())
    assert m.new_rows == 100                                    # every row exactly once

    table = shardline.open_dataset(cfg, store=store).to_table(columns=["id", "label"])
    got = dict(zip(table.column("id").to_pylist(), table.column("label").to_pylist(),
                   strict=True))
    assert len(got) == table.num_rows == 300                    # each id once
    want = {d.id: d.label for d in digits(100, 300)} | {d.id: d.label for d in fixed}
    assert got == want                                          # the new labels are served

    # the held-out split of a corrected row is what its id hash says
    fraction = dataset_fraction(m, None)
    for s in m.new():
        ids = _rows(store, s.path).column("id")
        held = holdout_ids(ids, fraction)
        assert held.all() if s.split == HOLDOUT else not held.any(), s.path

    # the next training plan: corrected rows are new data, superseded rows never replayed
    plan = make_plan(m, 1, 0.5, None, seed=0)
    seen: dict[str, list[str]] = {"new": [], "replay": []}
    for s in plan.train_shards:
        t = _rows(store, s.entry.path)
        index = ShardIndex(t.column("label").to_numpy().astype(np.int64),
                           id_hash64(t.column("id")))
        ids = t.column("id").to_pylist()
        seen[s.role] += [ids[i] for i in plan.train_rows(s, index)]
    trained = {d.id for d in fixed if not holdout_ids(pa.array([d.id]), fraction)[0]}
    assert set(seen["new"]) == trained and len(trained) > 50
    assert seen["replay"] and not set(seen["replay"]) & {d.id for d in fixed}

    # diff lists corrected ids with old and new labels, then deleted ids
    d = shardline.open_dataset(cfg, 1, store=store).diff(2)
    assert [(c["id"], c["old"], c["new"]) for c in d.labels.changed] == \
        [(f.id, str(o.label), str(f.label)) for f, o in zip(fixed, digits(0, 100), strict=True)]
    assert d.labels.deleted == [] and d.labels.complete
    path = tmp_path / "dataset.toml"
    path.write_text(config_toml(Config(dataset=cfg)))
    out = CliRunner().invoke(app, ["diff", "-c", str(path), "--from", "1", "--to", "2",
                                   "--json"], env=cli_env(store_settings, tmp_path))
    assert out.exit_code == 0, out.output
    assert [c["id"] for c in json.loads(out.output)["changed"]] == [f.id for f in fixed]
    delete_ids(store, cfg, ["d00005", "d00200"])
    d3 = shardline.open_dataset(cfg, 2, store=store).diff(3)
    assert [x["id"] for x in d3.labels.deleted] == ["d00005", "d00200"]
    assert d3.labels.changed == []
    assert d3.labels.deleted[1]["old"] == str(digits(200, 201)[0].label)

    # `shardline models`: what each model learned (a model of v1, then one of v3)
    rows = with_changes_seen(store, cfg.prefix, [
        {"model": 1, "dataset_version": 1, "parent": None},
        {"model": 2, "dataset_version": 3, "parent": 1}])
    assert [(r["corrected"], r["deleted"]) for r in rows] == [(0, 0), (100, 2)]
    assert rows[1]["changes"] == "v2: 100 corrected; v3: 2 deleted"

    # a correction of a deleted id does not bring it back; one of a live id does
    again = [dataclasses.replace(d, label=(d.label + 2) % 10) for d in digits(5, 6)]
    other = [dataclasses.replace(d, label=(d.label + 3) % 10) for d in digits(10, 11)]
    store.put_bytes(f"{cfg.incoming}corrections/week2.jsonl", jsonl_bytes(again + other))
    assert len(_ingest(store, cfg, "r3")) == 1
    m4 = latest_manifest(store, cfg.prefix)
    assert m4 is not None and m4.version == 4 and m4.doc.changes is not None
    assert (m4.doc.changes.updated, m4.doc.changes.deleted) == (1, 1)
    t4 = shardline.open_dataset(cfg, store=store).to_table(columns=["id", "label"])
    now = dict(zip(t4.column("id").to_pylist(), t4.column("label").to_pylist(), strict=True))
    assert "d00005" not in now and now["d00010"] == other[0].label and len(now) == 298
