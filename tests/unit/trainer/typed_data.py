"""Dataset versions of typed fields as real Arrow IPC shards on local disk, in the published
schema of their config (``core.schema.data_schema``: ``fixed_shape_tensor`` columns named
after their fields, native scalars, dictionary strings), with manifests built by the
builder ingest uses. Values are a pure function of the row number, so a test can
recompute what any row holds (:func:`value`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.builder import NewBatch, VersionDraft
from shardline.core.builder import build_version as build_draft
from shardline.core.config import DatasetConfig, ShardSpec, config_to_dict
from shardline.core.field_spec import FieldSpec, TargetSpec
from shardline.core.field_stats import merge_stats
from shardline.core.fields import DatasetInfo, FieldInfo, dataset_info
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary, content_digests
from shardline.core.schema import data_schema, schema_info
from shardline.tasks.convert.columns import table_stats


def _config(name: str, fields: dict[str, FieldSpec], target: TargetSpec,
            classes: tuple[str, ...] = (), record_batch_rows: int = 16) -> DatasetConfig:
    return DatasetConfig(name=name, incoming=f"incoming/{name}/", classes=classes,
                         fields=fields, target=target,
                         shards=ShardSpec(record_batch_rows=record_batch_rows))


def typed_config(record_batch_rows: int = 16) -> DatasetConfig:
    """13-band float32 tiles, a uint16 image, a bool mask tensor, float/bool/vocabulary
    scalars, and a multi-label target over 4 classes."""
    return _config("tiles", {
        "bands": FieldSpec(kind="tensor", dtype="float32", shape=(13, 32, 32)),
        "rgb16": FieldSpec(kind="image", dtype="uint16", shape=(6, 5, 3)),
        "valid": FieldSpec(kind="tensor", dtype="bool", shape=(4, 4)),
        "elevation": FieldSpec(kind="scalar", dtype="float32"),
        "cloudy": FieldSpec(kind="scalar", dtype="bool"),
        "landuse": FieldSpec(kind="scalar", dtype="string", vocabulary=VOCAB),
        "note": FieldSpec(kind="scalar", dtype="string"),      # free text: not served
    }, TargetSpec(kind="multilabel", name="tags"), ("water", "forest", "urban", "snow"),
        record_batch_rows)


def regression_config(record_batch_rows: int = 16) -> DatasetConfig:
    """A float32 feature vector and a float32 regression target."""
    return _config("diab", {"x": FieldSpec(kind="tensor", dtype="float32", shape=(10,))},
                   TargetSpec(kind="regression", name="y"),
                   record_batch_rows=record_batch_rows)


def mask_config(record_batch_rows: int = 16) -> DatasetConfig:
    """A uint8 RGB image and a segmentation mask target (uint8 class indices, [6, 5]) over
    3 classes."""
    return _config("seg", {"img": FieldSpec(kind="image", dtype="uint8", shape=(6, 5, 3))},
                   TargetSpec(kind="mask", name="mask", shape=(6, 5)),
                   ("background", "road", "building"), record_batch_rows)


VOCAB = ("crop", "grass", "bare")


def _stored(f: FieldInfo) -> tuple[int, ...]:
    if f.kind == "image":
        c, h, w = f.shape
        return (h, w, c)
    return f.shape


def value(info: DatasetInfo, name: str, rows: np.ndarray) -> np.ndarray:
    """What field or target ``name`` holds for source rows ``rows`` as the loader serves
    it (stored shape; a vocabulary string as its index)."""
    rows = np.asarray(rows, np.int64)
    if name == info.target.name:
        t = info.target
        if t.kind == "multilabel":
            # learnable from the fields: ranges of the row number (what ``bands`` and
            # ``elevation`` grow with) and its remainder mod 3 (``cloudy``, ``landuse``)
            x = rows % 400
            return np.stack([x < 200, (x >= 100) & (x < 300), x >= 250, rows % 3 == 0],
                            axis=1).astype(np.uint8)
        if t.kind == "mask":     # every class index appears, different per row
            grid = np.arange(int(np.prod(t.shape))).reshape(t.shape)
            return ((rows[:, None, None] + grid) % len(t.classes)).astype(np.uint8)
        return (rows * 0.5 - 3.0).astype(np.float32)
    f = info.field(name)
    shape = _stored(f)
    if f.dtype == "string":
        return rows % len(VOCAB)
    if f.dtype == "bool":
        grid = np.arange(int(np.prod(shape))).reshape(shape) if shape else np.zeros((), int)
        return (rows.reshape(-1, *([1] * len(shape))) + grid) % 3 == 0
    base = rows.reshape(-1, *([1] * len(shape))) * 1000
    grid = np.arange(int(np.prod(shape))).reshape(shape) if shape else np.zeros(())
    if f.dtype == "float32":
        return ((base + grid) / 7.0).astype(np.float32)
    return ((base + grid) % 65521).astype(f.dtype)


def _column(info: DatasetInfo, name: str, rows: np.ndarray, typ: pa.DataType) -> pa.Array:
    if name == "note":
        return pa.array([f"row {r}" for r in rows], typ)
    v = value(info, name, rows)
    if isinstance(typ, pa.FixedShapeTensorType):
        flat = pa.array(v.astype(typ.value_type.to_pandas_dtype()).reshape(-1))
        storage = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(typ.shape)))
        return pa.ExtensionArray.from_storage(typ, storage)
    if pa.types.is_dictionary(typ):
        return pa.DictionaryArray.from_arrays(pa.array(v, typ.index_type), pa.array(VOCAB))
    return pa.array(v, typ)


def shard_table(cfg: DatasetConfig, rows: np.ndarray) -> pa.Table:
    """Rows of ``cfg``'s published schema (``core.schema.data_schema``)."""
    info, schema = dataset_info(cfg), data_schema(cfg)
    cols: list[pa.Array] = []
    for f in schema:
        if f.name == "id":
            cols.append(pa.array([f"{cfg.name}-{r:05d}" for r in rows], pa.string()))
        elif f.name == "source_key":
            cols.append(pa.array([f"incoming/{cfg.name}/upload.npy"] * len(rows)))
        elif f.name == "source_row":
            cols.append(pa.array(rows.astype(np.int64)))
        else:
            cols.append(_column(info, f.name, rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def shard_bytes(cfg: DatasetConfig, rows: np.ndarray, compression: str) -> bytes:
    """Rows of ``cfg``'s published schema as an IPC file."""
    table = shard_table(cfg, rows)
    sink = pa.BufferOutputStream()
    opts = ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with ipc.new_file(sink, table.schema, options=opts) as writer:
        writer.write_table(table, max_chunksize=cfg.shards.record_batch_rows)
    return sink.getvalue().to_pybytes()


def draft_version(put: Callable[[str, bytes], None], cfg: DatasetConfig, rows: np.ndarray,
                  previous: Manifest | None, compression: str, parts: int = 3,
                  stats: bool = False) -> VersionDraft:
    """One batch of ``rows`` as ``parts`` shards (rows split by ``row % parts``) and its id
    index, written through ``put``; the next version as the builder ingest uses drafts it
    (``stats``: with the per-field statistics ingest records, merged over the shards)."""
    batch_stats: dict[str, Any] | None = None
    version = 1 if previous is None else previous.version + 1
    batch = hashlib.sha256(f"{cfg.name}:{version}:{len(rows)}".encode()).hexdigest()[:16]
    run = f"run{version}"
    new: list[ShardEntry] = []
    for part in range(parts):
        sel = np.sort(rows[rows % parts == part])
        if stats:
            batch_stats = merge_stats(batch_stats, table_stats(cfg, shard_table(cfg, sel)))
        data = shard_bytes(cfg, sel, compression)
        key = layout.shard_key(cfg.prefix, batch, part, 0, run)
        put(key, data)
        sha, xxh = content_digests(data)
        new.append(ShardEntry(path=key, rows=len(sel), bytes=len(data), sha256=sha,
                              xxh3_128=xxh, batch=batch, partition={"batch": batch},
                              compression=compression))
    ids_path = layout.ids_key(cfg.prefix, batch, run)
    ids = pa.table({"id": pa.array([f"{cfg.name}-{r:05d}" for r in rows], pa.string())})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, ids.schema) as writer:
        writer.write_table(ids)
    put(ids_path, sink.getvalue().to_pybytes())
    return build_draft(
        cfg.prefix, dataset=cfg.name, schema=schema_info(cfg), config=config_to_dict(cfg),
        parent=previous,
        batch=NewBatch(id=batch, run=run, shards=new, ids_path=ids_path,
                       sources=[SourceEntry(f"incoming/{cfg.name}/upload.npy",
                                            f"etag-{version}", 0, "npy")], stats=batch_stats),
        validation=ValidationSummary(success=True, counts={"rows": len(rows), "ok": len(rows),
                                                           "quarantined": 0}))


def write_version(root: Path, cfg: DatasetConfig, rows: np.ndarray,
                  previous: Manifest | None, compression: str) -> Manifest:
    """The same shards as files under ``root`` (manifest kept in memory)."""
    def put(key: str, data: bytes) -> None:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)

    return draft_version(put, cfg, rows, previous, compression).manifest()


@dataclass
class LocalTyped:
    """Two versions (v1 plain, v2 LZ4) of a typed dataset under ``root``."""

    cfg: DatasetConfig
    root: Path
    v1: Manifest
    v2: Manifest

    @property
    def info(self) -> DatasetInfo:
        return dataset_info(self.cfg)


def local_typed(root: Path, cfg: DatasetConfig, rows: int = 300) -> LocalTyped:
    order = np.random.default_rng(3).permutation(rows)
    cut = rows * 3 // 5
    v1 = write_version(root, cfg, order[:cut], None, "none")
    v2 = write_version(root, cfg, order[cut:], v1, "lz4")
    return LocalTyped(cfg, root, v1, v2)
