"""Deletions as an upload kind on a real (moto) bucket, through the ingest driver: a file
under ``incoming/<dataset>/deletions/`` with 3 published ids and 1 unknown one is applied by
the next ingest run (the erase code path of ``shardline delete``): the 3 are gone from the
newest version and the applied file from incoming/ (it names them), the unknown one is
quarantined with its reason, a second ingest publishes
nothing; an empty deletion file is claimed with its one-line error and does not block the
next data upload; the event path (pending keys) applies a CSV deletion file.

Convert runs shardline's own task code in-process (as ``test_corrections.py``), not on
Spark: nothing here depends on Spark."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits, jsonl_bytes
from shardline.tasks import deletion_uploads
from shardline.tasks.batch import Batch, Source
from shardline.tasks.convert.converted import Converted
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.stage import assemble
from shardline.tasks.detect import Scope
from shardline.tasks.driver import run_ingest
from shardline.tasks.driver_stages import plain
from tests.integration.ingest_helpers import dataset_config, published_rows


def _ingest(store: ObjectStore, cfg: DatasetConfig, run: str, scope: Scope = Scope()) -> list:
    def convert(batch: Batch, run_id: str) -> Converted:
        meta = pa.Table.from_batches([convert_group(store, cfg, run_id, (Part.of(s),), task=t)
                                      for t, s in enumerate(batch.sources)])
        return assemble(store, cfg, batch, run_id, latest_manifest(store, cfg.prefix), meta)
    return run_ingest(dataclasses.replace(plain(store, cfg, scope=scope), convert=convert), run)


def _put(store: ObjectStore, key: str, data: bytes) -> Source:
    store.put_bytes(key, data)
    info = store.head(key)
    assert info is not None
    return Source(key, info.etag, info.size, "deletions")


def _served(store: ObjectStore, cfg: DatasetConfig) -> list[str]:
    m = latest_manifest(store, cfg.prefix)
    assert m is not None
    return sorted(published_rows(store, m).column("id").to_pylist())


def test_deletion_upload_erases_known_ids_and_quarantines_the_others(
        store: ObjectStore) -> None:
    cfg = dataset_config()
    store.put_bytes(f"{cfg.incoming}a.jsonl", jsonl_bytes(digits(0, 50)))
    assert len(_ingest(store, cfg, "r1")) == 1
    gone = ["d00003", "d00017", "d00042"]
    key = f"{cfg.incoming}deletions/f.txt"
    body = "\n".join([gone[0], gone[1], "nobody", "", gone[2], gone[0]]).encode()
    src = _put(store, key, body)
    assert _ingest(store, cfg, "r2") == []                      # no data batch
    assert store.head(key) is None                              # applied: it named the ids

    m = latest_manifest(store, cfg.prefix)
    assert m is not None and m.version == 2 and m.rows == 47
    assert m.doc.changes is not None and m.doc.changes.deleted == 3
    assert _served(store, cfg) == sorted(d.id for d in digits(0, 50) if d.id not in gone)
    rec = deletion_uploads.record(store, cfg, src)
    assert rec is not None and rec["deleted"] == 3 and rec["version"] == 2
    reasons = {q["line"]: q for q in rec["quarantined"]}
    assert reasons[3]["rule"] == "unknown_id" and reasons[3]["reason"] == (
        f"id 'nobody' in {key} line 3 is not in the dataset (v1); nothing deleted for it")
    assert reasons[6]["rule"] == "repeated_id"
    assert len(reasons) == 2 and 3 + len(reasons) == 5         # every id line exactly once
    assert all(x.encode() not in store.get_bytes(layout.batch_claim_key(
        cfg.prefix, rec["batch"])) for x in gone)              # ids erased: counted only

    assert _ingest(store, cfg, "r3") == []                      # a re-run: nothing twice
    assert latest_manifest(store, cfg.prefix).version == 2      # type: ignore[union-attr]

    # a run killed between the erasure's commit and its claim (the file still there, the
    # claim not written): the next run claims it, with the same records, publishes nothing
    claim = layout.batch_claim_key(cfg.prefix, rec["batch"])
    store.delete([claim])
    assert _put(store, key, body) == src                        # the same object again
    assert _ingest(store, cfg, "r4") == []
    assert latest_manifest(store, cfg.prefix).version == 2      # type: ignore[union-attr]
    assert store.head(key) is None
    again = deletion_uploads.record(store, cfg, src)
    assert again is not None and again["quarantined"] == rec["quarantined"]
    assert (again["deleted"], again["version"]) == (3, 2)


def test_empty_deletion_file_never_blocks_and_events_apply_csv(store: ObjectStore) -> None:
    cfg = dataset_config()
    store.put_bytes(f"{cfg.incoming}a.jsonl", jsonl_bytes(digits(0, 20)))
    assert len(_ingest(store, cfg, "r1")) == 1
    empty = f"{cfg.incoming}deletions/empty.txt"
    src = _put(store, empty, b"\n  \n")
    store.put_bytes(f"{cfg.incoming}b.jsonl", jsonl_bytes(digits(20, 30)))
    assert len(_ingest(store, cfg, "r2")) == 1                  # the data still goes in
    assert store.head(empty) is not None                        # kept: nothing it said is lost
    rec = deletion_uploads.record(store, cfg, src)
    assert rec is not None and rec["deleted"] == 0
    assert rec["error"].startswith(f"deletion upload {empty}: no id in it")
    assert latest_manifest(store, cfg.prefix).version == 2      # type: ignore[union-attr]

    csv_key = f"{cfg.incoming}deletions/2026-11-26/g.csv"
    csv_src = _put(store, csv_key, b"id,why\nd00004,asked\nd00025,asked\n")
    store.put_bytes(layout.pending_key(csv_key, csv_src.etag), b"")
    assert _ingest(store, cfg, "r3", Scope(events=True)) == []
    assert _served(store, cfg) == sorted(d.id for d in digits(0, 30)
                                         if d.id not in ("d00004", "d00025"))
    assert deletion_uploads.record(store, cfg, csv_src)["quarantined"] == []  # type: ignore[index]
    assert store.head(csv_key) is None
    assert not list(store.list(layout.pending_prefix(cfg.incoming)))   # marker consumed
