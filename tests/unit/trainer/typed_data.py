"""Dataset versions of typed fields as real Arrow IPC shards on local disk, written the way
``shardline.core.fields`` stores them (``fixed_shape_tensor`` columns named after their
fields, native scalars), with manifests built by the builder ingest uses.

``TYPED``: a 13-band float32 tile (13x32x32), a uint16 RGB image, a float32 scalar and a
bool flag, with a multi-label target over 4 classes. ``REGRESSION``: a float32 feature
vector and a float32 regression target. Values are a pure function of the row number, so a
test can recompute what any row holds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.builder import NewBatch
from shardline.core.builder import build_version as build_draft
from shardline.core.config import DatasetConfig, ShardSpec, config_to_dict
from shardline.core.fields import DatasetInfo, FieldInfo, TargetInfo
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary, content_digests
from shardline.core.schema import schema_info

TYPED = DatasetInfo(
    fields=(FieldInfo("bands", "tensor", "float32", (13, 32, 32)),
            FieldInfo("rgb16", "image", "uint16", (3, 6, 5)),
            FieldInfo("elevation", "scalar", "float32", ()),
            FieldInfo("cloudy", "scalar", "bool", ())),
    target=TargetInfo("tags", "multilabel", classes=("water", "forest", "urban", "snow"),
                      shape=(4,)))
REGRESSION = DatasetInfo(
    fields=(FieldInfo("x", "tensor", "float32", (10,)),),
    target=TargetInfo("y", "regression"))


def _stored(f: FieldInfo) -> tuple[int, ...]:
    if f.kind == "image":
        c, h, w = f.shape
        return (h, w, c)
    return f.shape


def value(info: DatasetInfo, name: str, rows: np.ndarray) -> np.ndarray:
    """What column ``name`` holds for source rows ``rows`` (stored shape, stored dtype)."""
    rows = np.asarray(rows, np.int64)
    if name == info.target.name:
        t = info.target
        if t.kind == "multilabel":
            return ((rows[:, None] >> np.arange(len(t.classes))) & 1).astype(np.uint8)
        return (rows * 0.5 - 3.0).astype(np.float32)
    f = info.field(name)
    shape = _stored(f)
    n = int(np.prod(shape))
    if f.dtype == "bool":
        return rows % 3 == 0
    base = rows.reshape(-1, *([1] * len(shape))) * 1000
    grid = np.arange(n).reshape(shape) if shape else np.zeros(())
    if f.dtype == "float32":
        return ((base + grid) / 7.0).astype(np.float32)
    return ((base + grid) % 65521).astype(f.dtype)


def _column(info: DatasetInfo, name: str, rows: np.ndarray) -> pa.Array:
    v = value(info, name, rows)
    if v.ndim > 1:
        return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(v))
    return pa.array(v)


def shard_bytes(info: DatasetInfo, name: str, rows: np.ndarray, compression: str,
                record_batch_rows: int) -> bytes:
    cols = {"id": pa.array([f"{name}-{r:05d}" for r in rows], pa.string())}
    for f in info.fields:
        cols[f.name] = _column(info, f.name, rows)
    cols[info.target.name] = _column(info, info.target.name, rows)
    cols["source_key"] = pa.array([f"incoming/{name}/upload.npy"] * len(rows))
    cols["source_row"] = pa.array(rows.astype(np.int64))
    table = pa.table(cols)
    sink = pa.BufferOutputStream()
    opts = ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with ipc.new_file(sink, table.schema, options=opts) as writer:
        writer.write_table(table, max_chunksize=record_batch_rows)
    return sink.getvalue().to_pybytes()


def write_version(root: Path, cfg: DatasetConfig, info: DatasetInfo, rows: np.ndarray,
                  previous: Manifest | None, compression: str, parts: int = 3) -> Manifest:
    """One batch of ``rows`` as ``parts`` shards (rows split by ``row % parts``)."""
    version = 1 if previous is None else previous.version + 1
    batch = hashlib.sha256(f"{cfg.name}:{version}:{len(rows)}".encode()).hexdigest()[:16]
    run = f"run{version}"
    new: list[ShardEntry] = []
    for part in range(parts):
        sel = np.sort(rows[rows % parts == part])
        data = shard_bytes(info, cfg.name, sel, compression, cfg.shards.record_batch_rows)
        key = layout.shard_key(cfg.prefix, batch, part, 0, run)
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
        sha, xxh = content_digests(data)
        new.append(ShardEntry(path=key, rows=len(sel), bytes=len(data), sha256=sha,
                              xxh3_128=xxh, batch=batch, partition={"batch": batch},
                              compression=compression))
    ids_path = layout.ids_key(cfg.prefix, batch, run)
    ids = pa.table({"id": pa.array([f"{cfg.name}-{r:05d}" for r in rows], pa.string())})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, ids.schema) as writer:
        writer.write_table(ids)
    (root / ids_path).parent.mkdir(parents=True, exist_ok=True)
    (root / ids_path).write_bytes(sink.getvalue().to_pybytes())
    return build_draft(
        cfg.prefix, dataset=cfg.name, schema=schema_info(cfg), config=config_to_dict(cfg),
        parent=previous,
        batch=NewBatch(id=batch, run=run, shards=new, ids_path=ids_path,
                       sources=[SourceEntry(f"incoming/{cfg.name}/upload.npy",
                                            f"etag-{version}", 0, "npy")]),
        validation=ValidationSummary(success=True, counts={"rows": len(rows), "ok": len(rows),
                                                           "quarantined": 0})).manifest()


@dataclass
class LocalTyped:
    """Two versions (v1 plain, v2 LZ4) of a typed dataset under ``root``."""

    cfg: DatasetConfig
    info: DatasetInfo
    root: Path
    v1: Manifest
    v2: Manifest


def local_typed(root: Path, info: DatasetInfo, name: str, rows: int = 300,
                record_batch_rows: int = 16) -> LocalTyped:
    # (the config's own image/classes are unused: the layout comes from ``info``)
    cfg = DatasetConfig(name=name, incoming=f"incoming/{name}/", classes=("a",),
                        shards=ShardSpec(record_batch_rows=record_batch_rows))
    order = np.random.default_rng(3).permutation(rows)
    cut = rows * 3 // 5
    v1 = write_version(root, cfg, info, order[:cut], None, "none")
    v2 = write_version(root, cfg, info, order[cut:], v1, "lz4")
    return LocalTyped(cfg, info, root, v1, v2)
