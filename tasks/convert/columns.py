"""Arrow columns (and their statistics) from checked typed rows, for the shard writer.

Tensors and images become ``fixed_shape_tensor`` columns built from one contiguous numpy
buffer (``np.stack``), so writing a shard copies each value once. An optional field's null
is a zero-filled slot under a validity bit. Statistics per shard (``stats``): per numeric
field and regression target, per channel (an image's C, a tensor's axis 0, one for a scalar):
count, sum, sum of squares, min, max and the NaN/Inf count; per class or multilabel target,
rows per class. They merge by addition (``core.field_stats``), so a batch's or a version's
statistics cost O(shards) or O(batches), never a pass over the rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from shardline.core.config import DatasetConfig
from shardline.core.field_arrow import field_type, storage_dtype, target_type
from shardline.core.field_spec import target_dtype
from shardline.core.field_stats import array_stats
from shardline.tasks.convert.typed_rows import TypedRow


def _tensor_column(typ: pa.DataType, arrays: list[np.ndarray | None],
                   dtype: np.dtype, shape: tuple[int, ...]) -> pa.Array:
    nulls = [a is None for a in arrays]
    zero = np.zeros(shape, dtype)
    block = np.stack([zero if a is None else a for a in arrays]) if arrays else \
        np.zeros((0, *shape), dtype)
    flat = pa.array(block.reshape(-1))
    mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
    storage = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape)), mask=mask)
    return pa.ExtensionArray.from_storage(typ, storage)


def typed_columns(cfg: DatasetConfig, rows: list[TypedRow]) -> list[pa.Array]:
    """The target's and each field's column (declared order) for ``rows``."""
    t = cfg.target_spec
    k = len(cfg.classes)
    cols: list[pa.Array] = []
    ttype = target_type(t, k)
    targets = [r.target for r in rows]
    if isinstance(ttype, pa.FixedShapeTensorType):
        cols.append(_tensor_column(ttype, targets, np.dtype(target_dtype(t, k)),
                                   tuple(ttype.shape)))
    else:
        cols.append(pa.array(np.asarray(targets, dtype=np.dtype(target_dtype(t, k))), ttype))
    for i, (_, spec) in enumerate(cfg.field_specs):
        values = [r.values[i] for r in rows]
        typ = field_type(spec)
        if isinstance(typ, pa.FixedShapeTensorType):
            cols.append(_tensor_column(typ, values, storage_dtype(spec.resolved_dtype),
                                       tuple(spec.shape)))
        elif isinstance(typ, pa.DictionaryType):
            idx = pa.array(values, pa.int16())
            cols.append(pa.DictionaryArray.from_arrays(idx, pa.array(spec.vocabulary or (),
                                                                      pa.string())))
        else:
            cols.append(pa.array(values, typ))
    return cols


def column_block(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The non-null values of a numeric or tensor column as numpy, rows first."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count:
        arr = arr.filter(arr.is_valid())
    if isinstance(arr.type, pa.FixedShapeTensorType):
        shape = tuple(arr.type.shape)
        values = arr.storage.flatten().to_numpy(zero_copy_only=False)
        return values.reshape((len(arr), *shape))
    return arr.to_numpy(zero_copy_only=False)


def table_stats(cfg: DatasetConfig, table: pa.Table) -> dict[str, Any]:
    """A shard's statistics by field name (see the module docstring)."""
    t = cfg.target_spec
    stats: dict[str, Any] = {}
    if t.kind == "multilabel":
        block = column_block(table.column(t.name))
        sums = block.sum(axis=0, dtype=np.int64)
        stats[t.name] = {"label_counts": {str(i): int(n) for i, n in enumerate(sums) if n},
                         "rows": int(block.shape[0])}
    elif t.kind == "class":
        vals = column_block(table.column(t.name))
        idx, n = np.unique(vals, return_counts=True)
        stats[t.name] = {"label_counts": {str(int(i)): int(c) for i, c in zip(idx, n,
                                                                               strict=True)},
                         "rows": int(vals.shape[0])}
    elif t.kind == "regression":
        block = column_block(table.column(t.name))
        stats[t.name] = array_stats(block, channel_axis=1 if block.ndim > 1 else None)
    for name, spec in cfg.field_specs:
        if spec.resolved_dtype == "string" or (spec.kind == "scalar" and
                                                spec.resolved_dtype == "bool"):
            continue
        block = column_block(table.column(name))
        axis = (3 if spec.kind == "image" else 1) if block.ndim > 1 else None
        stats[name] = array_stats(block, channel_axis=axis)
    return stats
