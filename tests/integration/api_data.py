"""A small dataset for the public API and CLI tests, on the moto server: three versions of
digits built through ``shardline.core.builder`` (what ingest commits), the third with a
quarantined batch of rejected rows, written as ingest writes them."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.builder import NewBatch, commit_version
from shardline.core.builder import build_version as build_draft
from shardline.core.config import Config, config_to_dict
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary, content_digests
from shardline.core.schema import QUARANTINE_SCHEMA, schema_info
from shardline.core.store import ObjectStore
from tests.integration.trainer_data import digits_config, ids_bytes, publish_version, shard_bytes

SPLITS = (np.arange(0, 600), np.arange(600, 1000), np.arange(1000, 1200))
REJECTS = [("incoming/x/bad.jsonl", 3, "bad-3", "unknown_label", b'{"id": "bad-3", "label": 42}'),
           ("incoming/x/bad.jsonl", 7, None, "missing_id", b'{"label": 1, "image": "..."}')]


@dataclass
class Published:
    cfg: Config
    manifests: list[Manifest]


def _quarantine_bytes() -> bytes:
    table = pa.Table.from_pylist(
        [{"source_key": k, "source_row": r, "id": i, "label": None, "rule": rule,
          "message": f"{rule} in {k} row {r}", "raw": raw} for k, r, i, rule, raw in REJECTS],
        schema=QUARANTINE_SCHEMA)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def publish_with_quarantine(store: ObjectStore, cfg: Config, rows: np.ndarray) -> Manifest:
    """The next version: ``rows`` in one shard (all labels), plus two rejected rows."""
    ds = cfg.dataset
    previous = latest_manifest(store, ds.prefix)
    batch = hashlib.sha256(f"{ds.name}:q:{len(rows)}".encode()).hexdigest()[:16]
    run = "runq"
    data = shard_bytes(ds, np.sort(rows), ds.shards.compression)
    key = layout.shard_key(ds.prefix, batch, None, 0, run)
    store.put_bytes(key, data)
    sha, xxh = content_digests(data)
    shard = ShardEntry(path=key, rows=len(rows), bytes=len(data), sha256=sha, xxh3_128=xxh,
                       batch=batch, partition={"batch": batch})
    qdata = _quarantine_bytes()
    qkey = layout.quarantine_key(ds.prefix, batch, 0, run)
    store.put_bytes(qkey, qdata)
    qsha, qxxh = content_digests(qdata)
    qshard = ShardEntry(path=qkey, rows=len(REJECTS), bytes=len(qdata), sha256=qsha,
                        xxh3_128=qxxh, batch=batch, partition={"batch": batch})
    ids_path = layout.ids_key(ds.prefix, batch, run)
    store.put_bytes(ids_path, ids_bytes(rows))
    by_rule = {"unknown_label": 1, "missing_id": 1}
    draft = build_draft(
        ds.prefix, dataset=ds.name, schema=schema_info(ds), config=config_to_dict(ds),
        parent=previous,
        batch=NewBatch(id=batch, run=run, shards=[shard], ids_path=ids_path,
                       quarantine_shards=[qshard], by_rule=by_rule,
                       sources=[SourceEntry("incoming/x/bad.jsonl", "etag-q", 0, "jsonl")]),
        validation=ValidationSummary(success=True, counts={"rows": len(rows) + 2}))
    return commit_version(store, draft)


def publish_three(store: ObjectStore, cache_dir: str) -> Published:
    """Versions 1 and 2 (label-partitioned shards: ``label=K`` folders) and 3 (one shard,
    two quarantined rows) of a uniquely named digits dataset."""
    cfg = digits_config(name=f"d{uuid.uuid4().hex[:8]}", cache_dir=cache_dir)
    m1 = publish_version(store, cfg.dataset, SPLITS[0])
    m2 = publish_version(store, cfg.dataset, SPLITS[1])
    m3 = publish_with_quarantine(store, cfg, SPLITS[2])
    return Published(cfg, [m1, m2, m3])
