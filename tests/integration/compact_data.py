"""Datasets with many small shards for the compaction tests: label-partitioned batches of
digits built by the builder ingest uses (``trainer_data``), and the same history rewritten
as format-1 documents (what code before format 2 wrote)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.manifest import Manifest, read_manifest
from shardline.core.store import ObjectStore
from tests.integration.trainer_data import digits, publish_version

BATCHES = 6
ROWS = 250                    # rows per batch: ~25 per label shard, ~2-3 KB a shard


def publish_small(store: ObjectStore, cfg: DatasetConfig, batches: int = BATCHES,
                  start: int = 0) -> list[Manifest]:
    """``batches`` versions of ``ROWS`` digits each, one shard per label per batch."""
    return [publish_version(store, cfg, np.arange((start + i) * ROWS, (start + i + 1) * ROWS))
            for i in range(batches)]


def rows_of(store: ObjectStore, m: Manifest) -> pa.Table:
    """Every row of ``m`` (all columns), ordered by id: equal tables = the same rows."""
    tables = []
    for s in m.shards:
        with ipc.open_file(pa.BufferReader(store.get_bytes(s.path))) as f:
            tables.append(f.read_all())
    t = pa.concat_tables(tables)
    return t.sort_by([("id", "ascending")]).combine_chunks()


def expected_ids(batches: int = BATCHES) -> list[str]:
    ids, _, _ = digits()
    return sorted(ids[: batches * ROWS])


def as_format1(store: ObjectStore, prefix: str, versions: int) -> None:
    """Rewrite versions 1..``versions`` as format-1 documents and drop every format-2/3
    manifest object: the dataset as the old code left it."""
    docs = {}
    for v in range(1, versions + 1):
        m = read_manifest(store, prefix, v)
        q = m.quarantine
        docs[v] = {
            "dataset": m.dataset, "version": m.version, "parent": m.parent,
            "created_at": m.created_at, "schema": m.schema.__dict__,
            "shards": [{k: x for k, x in s.__dict__.items() if k != "label_counts"}
                       for s in m.shards],
            "new_shards": m.new_shards, "batches": [b.__dict__ for b in m.batches],
            "sources": [s.__dict__ for s in m.sources], "validation": m.validation.__dict__,
            "quarantine": {"rows": q.rows, "by_rule": q.by_rule, "total_rows": q.total_rows,
                           "shards": [s.__dict__ for s in q.shards]},
            "code_version": m.code_version, "config": m.config, "format": 1,
        }
    store.delete(o.key for o in store.list(layout.manifests_prefix(prefix)))
    store.delete(layout.version_key(prefix, v) for v in docs)
    for v, doc in docs.items():
        store.put_json(layout.version_key(prefix, v), doc)
