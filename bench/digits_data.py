"""Published digits versions without the Spark pipeline: the learning benchmark's data, and
the trainer tests' (``tests/integration/trainer_data.py`` builds on it).

Real data (scikit-learn's digits: 1797 8x8 images, 10 classes, pixels 0..16 scaled to
0..255) written as real Arrow IPC shards with ``shardline.core.schema.data_schema``,
partitioned by label, uncompressed or LZ4, with the batch's id index; versions are built by
``shardline.core.builder`` (what ingest uses) and committed to a store
(``publish_version``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.builder import NewBatch, VersionDraft, commit_version
from shardline.core.builder import build_version as build_draft
from shardline.core.config import Config, DatasetConfig, ShardSpec, TrainConfig, config_to_dict
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary, content_digests
from shardline.core.schema import data_schema, schema_info
from shardline.core.store import Store

# (ids, labels int16 [N], images uint8 [N, H*W*C]): digits(), or any such rows (bench data)
Rows: TypeAlias = tuple[list[str], np.ndarray, np.ndarray]


@cache
def digits() -> Rows:
    """(ids, labels int16 [N], images uint8 [N, 64]) of the whole digits set."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.clip(np.rint(d.images.reshape(len(d.images), 64) * (255.0 / 16.0)), 0, 255)
    ids = [f"digit-{i:05d}" for i in range(len(images))]
    return ids, d.target.astype(np.int16), images.astype(np.uint8)


def digits_config(name: str = "digits", compression: str = "none", record_batch_rows: int = 64,
                  **train: object) -> Config:
    ds = DatasetConfig(name=name, incoming=f"incoming/{name}/",
                       classes=tuple(str(i) for i in range(10)),
                       shards=ShardSpec(compression=compression,  # type: ignore[arg-type]
                                        record_batch_rows=record_batch_rows))
    defaults: dict[str, object] = dict(width=8, depth=2, epochs=2, batch_size=32, seed=0,
                                       shuffle_window=256)
    defaults.update(train)
    return Config(dataset=ds, train=TrainConfig(**defaults))  # type: ignore[arg-type]


def shard_bytes(cfg: DatasetConfig, rows: np.ndarray, compression: str,
                data: Rows | None = None) -> bytes:
    ids, labels, images = data or digits()
    n = len(rows)
    image = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(cfg.image.nbytes), n, [None, pa.py_buffer(images[rows].tobytes())])
    table = pa.Table.from_arrays(
        [pa.array([ids[i] for i in rows], pa.string()), pa.array(labels[rows], pa.int16()),
         image, pa.array([f"incoming/{cfg.name}/upload.csv"] * n, pa.string()),
         pa.array(rows.astype(np.int64), pa.int64())],
        schema=data_schema(cfg),
    )
    sink = pa.BufferOutputStream()
    opts = ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with ipc.new_file(sink, table.schema, options=opts) as writer:
        writer.write_table(table, max_chunksize=cfg.shards.record_batch_rows)
    return sink.getvalue().to_pybytes()


def ids_bytes(rows: np.ndarray, data: Rows | None = None) -> bytes:
    """The batch's id index (Arrow IPC file of one ``id`` column), as ingest writes it."""
    ids, _, _ = data or digits()
    table = pa.table({"id": pa.array([ids[i] for i in rows], pa.string())})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def draft_version(put: Callable[[str, bytes], None], cfg: DatasetConfig, rows: np.ndarray,
                  previous: Manifest | None, compression: str | None = None,
                  data: Rows | None = None) -> VersionDraft:
    """Write one batch of ``rows`` (indices into digits, or into ``data``) as
    label-partitioned shards plus its id index, and build the next version through the
    builder ingest uses."""
    compression = compression or cfg.shards.compression
    version = 1 if previous is None else previous.version + 1
    ids, labels, _ = data or digits()
    batch = hashlib.sha256(f"{cfg.name}:{version}:{len(rows)}".encode()).hexdigest()[:16]
    run = f"run{version}"
    new: list[ShardEntry] = []
    for label in sorted(set(labels[rows].tolist())):
        part = np.sort(rows[labels[rows] == label])
        blob = shard_bytes(cfg, part, compression, data)
        key = layout.shard_key(cfg.prefix, batch, int(label), 0, run)
        put(key, blob)
        sha, xxh = content_digests(blob)
        new.append(ShardEntry(path=key, rows=len(part), bytes=len(blob), sha256=sha,
                              xxh3_128=xxh, batch=batch,
                              partition={"batch": batch, "label": str(label)},
                              stats={"label": {"min": int(label), "max": int(label)}},
                              compression=compression,
                              label_counts={str(label): len(part)}))
    ids_path = layout.ids_key(cfg.prefix, batch, run)
    put(ids_path, ids_bytes(rows, data))
    upload = f"incoming/{cfg.name}/upload.csv"
    return build_draft(
        cfg.prefix, dataset=cfg.name, schema=schema_info(cfg), config=config_to_dict(cfg),
        parent=previous,
        batch=NewBatch(id=batch, run=run, shards=new, ids_path=ids_path,
                       id_range=(min(ids[i] for i in rows), max(ids[i] for i in rows))
                       if len(rows) else None,
                       sources=[SourceEntry(upload, f"etag-{version}", 0, "csv")]),
        validation=ValidationSummary(success=True, counts={"rows": len(rows), "ok": len(rows),
                                                           "quarantined": 0}))


def publish_version(store: Store, cfg: DatasetConfig, rows: np.ndarray,
                    compression: str | None = None, data: Rows | None = None) -> Manifest:
    """Upload shards of ``rows`` (of digits, or of ``data``) to the bucket and commit the
    next version."""
    previous = latest_manifest(store, cfg.prefix)

    def put(key: str, blob: bytes) -> None:
        store.put_bytes(key, blob)

    draft = draft_version(put, cfg, rows, previous, compression, data)
    return commit_version(store, draft)
