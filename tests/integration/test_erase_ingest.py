"""A data subject's deletion end to end on moto, through the real ingest (Spark, GX) from
``incoming/``: two ids erased (``shardline delete``'s default), ``expire --keep 1``, then
``vacuum`` after the window by the store's clock. Every object in the bucket (shards, id
files, batch lists, checkpoints, reports, ledger, quarantine, raw uploads) is scanned for
each id's bytes: none holds one, not even the quarantined copy of a repeated
upload or the report naming it. The other rows are all still served, the raw upload that
held no deleted id is still there, and a later upload of a deleted id is ingested as new
(not a ``duplicate_id``)."""

from __future__ import annotations

from datetime import timedelta

from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import csv_bytes, digits, jsonl_bytes
from shardline.tasks.erase import erase_ids
from shardline.tasks.expire import expire
from shardline.tasks.lease import store_now
from shardline.tasks.vacuum import vacuum
from shardline.tasks.verify import verify
from tests.integration.ingest_helpers import dataset_config, published_rows, run_pipeline

IN = "incoming/digits/"


def _holders(store: ObjectStore, needle: bytes) -> list[str]:
    return sorted(o.key for o in store.list("") if needle in store.get_bytes(o.key))


def test_erase_expire_vacuum_leaves_no_object_with_the_ids(store, spark) -> None:
    cfg = dataset_config()
    store.put_bytes(f"{IN}p1.jsonl", jsonl_bytes(digits(0, 200)))
    store.put_bytes(f"{IN}p2.csv", csv_bytes(digits(200, 300)))
    assert run_pipeline(store, cfg, spark).version == 1           # one batch, two uploads
    # p3 repeats d00005: its copy is quarantined as duplicate_id (id and raw bytes)
    store.put_bytes(f"{IN}p3.jsonl", jsonl_bytes(digits(300, 400) + digits(5, 6)))
    v2 = run_pipeline(store, cfg, spark)
    assert (v2.version, v2.rows_quarantined) == (2, 1)
    gone = ["d00005", "d00350"]                                   # in p1 and p3
    assert all(_holders(store, x.encode()) for x in gone)         # the scan finds them

    r = erase_ids(store, cfg, gone)
    assert (r.version, r.rows_deleted, r.id_files_rewritten, r.quarantined_erased) == \
        (3, 2, 2, 1)
    assert r.uploads_removed == [f"{IN}p1.jsonl", f"{IN}p3.jsonl"] and not r.uploads_kept
    assert verify(store, cfg).sound
    expire(store, cfg, keep=1)
    later = store_now(store, cfg.prefix) + timedelta(minutes=cfg.sweep_after_minutes + 1)
    vacuum(store, cfg, now=later)

    for x in gone:
        assert _holders(store, x.encode()) == [], x
    m = latest_manifest(store, cfg.prefix)
    assert m.quarantine.total_rows == 0 and not m.quarantine.shards
    served = published_rows(store, m).column("id").to_pylist()
    assert sorted(served) == sorted(d.id for d in digits(0, 400) if d.id not in gone)
    assert store.head(f"{IN}p2.csv") is not None                  # held no deleted id

    store.put_bytes(f"{IN}p4.jsonl", jsonl_bytes(digits(5, 6)))    # d00005 comes back
    again = run_pipeline(store, cfg, spark)
    assert (again.version, again.rows_published, again.rows_quarantined) == (4, 1, 0)
    assert latest_manifest(store, cfg.prefix).rows == 399
