"""Datasets with many small shards for the compaction tests: label-partitioned batches of
digits built by the builder ingest uses (``trainer_data``), and the same history rewritten
as format-1 documents (what code before format 2 wrote; the manifest-format tests use that
too)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.builder import NewBatch, build_version, commit_version
from shardline.core.config import DatasetConfig, config_to_dict
from shardline.core.idhash import holdout_mask, id_hash64
from shardline.core.manifest import Manifest, latest_manifest, read_manifest
from shardline.core.parts import HOLDOUT, TRAIN, ShardEntry, ValidationSummary, content_digests
from shardline.core.schema import schema_info
from shardline.core.store import ObjectStore
from tests.integration.trainer_data import digits, ids_bytes, publish_version, shard_bytes

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


def format1_doc(m: Manifest) -> dict:
    """Version ``m`` as the code before format 2 wrote it: one cumulative document."""
    q = m.quarantine
    return {
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


def as_format1(store: ObjectStore, prefix: str, versions: int) -> None:
    """Rewrite versions 1..``versions`` as format-1 documents and drop every format-2/3
    manifest object: the dataset as the old code left it."""
    docs = {v: format1_doc(read_manifest(store, prefix, v)) for v in range(1, versions + 1)}
    store.delete(o.key for o in store.list(layout.manifests_prefix(prefix)))
    store.delete(layout.version_key(prefix, v) for v in docs)
    for v, doc in docs.items():
        store.put_json(layout.version_key(prefix, v), doc)


def publish_split(store: ObjectStore, cfg: DatasetConfig, rows: np.ndarray,
                  fraction: float = 0.2) -> Manifest:
    """One version whose batch has a train and a held-out shard per label (as ingest writes
    a materialised split, label-partitioned), recording ``fraction``."""
    ids, labels, _ = digits()
    parent = latest_manifest(store, cfg.prefix)
    version = 1 if parent is None else parent.version + 1
    batch, run = f"split{version:04d}", f"run{version}"
    held = holdout_mask(id_hash64(pa.array([ids[i] for i in rows])), fraction)
    shards = []
    for label in sorted(set(labels[rows].tolist())):
        for split, mask in ((TRAIN, ~held), (HOLDOUT, held)):
            part = np.sort(rows[mask & (labels[rows] == label)])
            if not len(part):
                continue
            data = shard_bytes(cfg, part, cfg.shards.compression)
            key = layout.shard_key(cfg.prefix, batch, int(label), 0, run, split)
            store.put_bytes(key, data)
            sha, xxh = content_digests(data)
            shards.append(ShardEntry(
                path=key, rows=len(part), bytes=len(data), sha256=sha, xxh3_128=xxh,
                batch=batch, partition={"batch": batch, "label": str(label)},
                stats={"label": {"min": int(label), "max": int(label)}},
                compression=cfg.shards.compression, label_counts={str(label): len(part)},
                split=split))
    ids_path = layout.ids_key(cfg.prefix, batch, run)
    store.put_bytes(ids_path, ids_bytes(rows))
    draft = build_version(cfg.prefix, dataset=cfg.name, schema=schema_info(cfg),
                          config=config_to_dict(cfg), parent=parent,
                          batch=NewBatch(id=batch, run=run, shards=shards, ids_path=ids_path),
                          validation=ValidationSummary(success=True),
                          holdout_fraction=fraction)
    return commit_version(store, draft)


def as_format2(store: ObjectStore, prefix: str) -> None:
    """Rewrite every version as format 2 wrote it: JSON batch lists under ``.json`` keys,
    checkpoints and documents re-pointed and marked format 2."""
    import json

    from shardline.core.parts import to_dict
    from shardline.core.version_doc import BatchList, digest, encode

    moved: dict[str, tuple[str, str]] = {}
    for o in list(store.list(layout.batch_lists_prefix(prefix))):
        if not o.key.endswith(".arrow"):
            continue
        bl = BatchList.from_bytes(store.get_bytes(o.key), o.key)
        body = encode({**to_dict(bl), "format": 2})
        new = o.key[:-len(".arrow")] + ".json"
        store.put_bytes(new, body)
        store.delete([o.key])
        moved[o.key] = (new, digest(body))

    def repoint(refs: list[dict]) -> None:
        for r in refs:
            if r["key"] in moved:
                r["key"], r["sha256"] = moved[r["key"]]

    ck: dict[str, str] = {}
    for o in list(store.list(layout.manifests_prefix(prefix))):
        if "/checkpoint-" in o.key:
            d = json.loads(store.get_bytes(o.key))
            repoint(d["batch_lists"])
            d["format"] = 2
            body = encode(d)
            store.put_bytes(o.key, body)
            ck[o.key] = digest(body)
    for o in list(store.list(layout.versions_prefix(prefix))):
        if layout.version_of_key(o.key) is None:         # the latest-version hint
            continue
        d = json.loads(store.get_bytes(o.key))
        repoint(d["batch_lists"])
        if d.get("checkpoint"):
            d["checkpoint"]["sha256"] = ck[d["checkpoint"]["key"]]
        d["format"] = 2
        store.put_bytes(o.key, encode(d))
