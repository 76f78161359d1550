"""The scale bench's data: uploads of N rows over C classes, and synthetic histories.

- ``upload``: a new batch as Parquet objects (id, label, 8x8 PNG from scikit-learn's digits,
  reused; labels cycle over the C classes), what the real stages convert.
- ``extend_history``: versions added without Spark, the way a long-lived dataset got them:
  for each, a (claimed) upload object, the batch's bucketed id file
  (``tasks.id_index.encode_ids``), one shard entry of the batch's rows, the version built
  and committed by the one builder (``core.builder``) and the ledger claim
  (``tasks.ledger.write_claim``). No shard bytes: the stages that need them (evaluation)
  stand in a real shard of the measured batch.
- ``plan_history``: a 100k-shard / 200-batch history into a local folder (manifests only),
  through the same builder.
"""

from __future__ import annotations

import hashlib
import io
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardline.core import layout
from shardline.core.builder import NewBatch, build_version, commit_version
from shardline.core.config import DatasetConfig, config_to_dict, parse_config
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary
from shardline.core.schema import schema_info
from shardline.core.store import ObjectStore
from shardline.tasks.batch import Batch, Source, batch_id
from shardline.tasks.id_index import encode_ids
from shardline.tasks.ledger import write_claim

ROWS_PER_OBJECT = 125_000


def config(name: str, classes: int) -> DatasetConfig:
    return parse_config({"dataset": {
        "name": name, "incoming": f"incoming/{name}/", "root": "lake",
        "classes": [f"c{i}" for i in range(classes)], "image": {"shape": [8, 8, 1]},
        "validation": {"max_quarantine_fraction": 0.5},
    }}).dataset


@cache
def _pngs() -> list[bytes]:
    from PIL import Image
    from sklearn.datasets import load_digits

    images = np.clip(load_digits().images * 16, 0, 255).astype(np.uint8)
    out = []
    for img in images:
        buf = io.BytesIO()
        Image.fromarray(img, mode="L").save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def upload(store: ObjectStore, cfg: DatasetConfig, rows: int, tag: str) -> dict[str, Any]:
    """Put ``rows`` new rows under the dataset's incoming prefix (ids ``<tag>-<n>``)."""
    pngs = _pngs()
    classes = len(cfg.classes)
    objects = max(1, -(-rows // ROWS_PER_OBJECT))
    step = -(-rows // objects)
    total = 0
    for o, lo in enumerate(range(0, rows, step)):
        n = np.arange(lo, min(rows, lo + step))
        table = pa.table({
            "id": pa.array([f"{tag}-{i:08d}" for i in n.tolist()], pa.string()),
            "label": pa.array(n % classes, pa.int64()),
            "image": pa.array([pngs[i % len(pngs)] for i in n.tolist()], pa.binary()),
        })
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, row_group_size=25_000)
        body = sink.getvalue().to_pybytes()
        store.put_bytes(f"{cfg.incoming}{tag}-{o:03d}.parquet", body)
        total += len(body)
    return {"rows": rows, "objects": objects, "bytes": total}


def _hex(*parts: object, n: int = 64) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:n]


def synthetic_shard(prefix: str, bid: str, run: str, part: int, rows: int, classes: int,
                    split: str | None = None) -> ShardEntry:
    counts = {str(k): rows // classes + (1 if k < rows % classes else 0)
              for k in range(min(rows, classes))}
    return ShardEntry(
        path=layout.shard_key(prefix, bid, None, part, run, split=split), rows=rows,
        bytes=rows * 100 + 512, sha256=_hex(bid, part, split), batch=bid,
        partition={"batch": bid}, stats={"label": {"min": 0, "max": len(counts) - 1}},
        xxh3_128=_hex(bid, part, split, n=32), label_counts=counts, split=split)


def split_shards(prefix: str, bid: str, run: str, rows: int, classes: int, fraction: float,
                 train_parts: int = 1) -> list[ShardEntry]:
    """A batch as ingest writes it: ``train_parts`` train shards and one held-out shard
    (``fraction`` of the rows)."""
    held = max(1, round(rows * fraction))
    per = (rows - held) // train_parts
    return [*(synthetic_shard(prefix, bid, run, p, per, classes, "train")
              for p in range(train_parts)),
            synthetic_shard(prefix, bid, run, 0, held, classes, "holdout")]


def extend_history(store: ObjectStore, cfg: DatasetConfig, upto: int, rows: int,
                   shards_per_batch: int = 1, uploads: int = 1) -> Manifest | None:
    """Add synthetic versions after the latest until version ``upto``, each from
    ``uploads`` claimed upload objects (they stay under incoming/, as uploads do)."""
    prefix = cfg.prefix
    parent = latest_manifest(store, prefix)
    schema, conf = schema_info(cfg), config_to_dict(cfg)
    first = (parent.version if parent else 0) + 1
    for v in range(first, upto + 1):
        srcs = []
        for j in range(uploads):
            key = f"{cfg.incoming}hist-{v:06d}{f'-{j:03d}' if j else ''}.parquet"
            etag = store.put_bytes(key, b"synthetic: claimed, never converted")
            srcs.append(Source(key, etag, 35, "parquet"))
        bid, run = batch_id(srcs), f"hist{v:06d}"
        ids = pa.array([f"h{v:06d}-{i:08d}" for i in range(rows)], pa.string())
        ids_path = layout.ids_key(prefix, bid, run)
        store.put_bytes(ids_path, encode_ids(ids))
        shards = split_shards(prefix, bid, run, rows, len(cfg.classes), cfg.holdout_fraction,
                              shards_per_batch)
        nb = NewBatch(id=bid, run=run, shards=shards, ids_path=ids_path,
                      id_range=(ids[0].as_py(), ids[-1].as_py()) if rows else None,
                      sources=[SourceEntry(s.key, s.etag, 35, "parquet") for s in srcs])
        draft = build_version(prefix, dataset=cfg.name, schema=schema, config=conf,
                              parent=parent, batch=nb, holdout_fraction=cfg.holdout_fraction,
                              validation=ValidationSummary(success=True,
                                                           suites=[f"{cfg.name}.batch"]))
        parent = commit_version(store, draft)
        write_claim(store, cfg, Batch(bid, tuple(srcs)), v)
    return parent


def plan_history(root: Path, batches: int, per_batch: int, classes: int = 10) -> dict[str, int]:
    """A ``batches`` x ``per_batch`` shard history in ``root`` (built once); returns the
    version document sizes."""
    from shardline.core.folder_store import FolderStore

    cfg = config("plan", classes)
    prefix, done = cfg.prefix, root / ".done"
    folder = FolderStore(root)
    if not done.exists():
        parent: Manifest | None = None
        schema, conf = schema_info(cfg), config_to_dict(cfg)
        for v in range(1, batches + 1):
            bid, run = f"b{v:015d}", f"run{v:06d}"
            nb = NewBatch(id=bid, run=run, ids_path=layout.ids_key(prefix, bid, run),
                          shards=split_shards(prefix, bid, run, per_batch * 1000, classes,
                                              cfg.holdout_fraction, per_batch - 1),
                          sources=[SourceEntry(f"{cfg.incoming}{v}.parquet", f"e{v}", 10**6,
                                               "parquet")])
            draft = build_version(prefix, dataset=cfg.name, schema=schema, config=conf,
                                  parent=parent, batch=nb, holdout_fraction=cfg.holdout_fraction,
                                  validation=ValidationSummary(success=True),
                                  created_at="2026-11-23T00:00:00+00:00", code="bench")
            for k, body in draft.objects.items():
                if not (root / k).exists():
                    folder.put_bytes(k, body)
            folder.put_bytes(draft.key, draft.body)
            parent = draft.manifest(folder.get_bytes)
        done.touch()
    return {str(v): (root / layout.version_key(prefix, v)).stat().st_size
            for v in range(1, batches + 1)}
