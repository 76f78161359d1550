"""The per-field great-expectations suite of a dataset with typed fields (``<dataset>.fields``).

Derived from the declaration (``core.field_spec``), one group of expectations per field and
for the target: the column's Arrow type (dtype and shape), non-null (unless optional),
finite (unless ``allow_nan``), within ``min``/``max``, in the vocabulary, class indices and
label sets within ``classes``. It runs over the staged data shards about to be published,
one shard at a time, each reduced to a small frame of per-row summaries (a tensor's min, max
and NaN/Inf count; a scalar as is), so GX judges exactly what publish will commit and the
driver never holds a shard's payload beyond one shard. The row checks at conversion already
quarantined each bad row with its reason; this suite re-checks the published data, so a
conversion bug cannot slip a NaN or an out-of-range value through (as ``.published`` does
for ids and labels).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core.config import DatasetConfig
from shardline.core.field_arrow import field_type, target_type
from shardline.core.store import Store
from shardline.tasks.convert.stage import Converted

SUMMARY_ROWS = 1_000_000     # summary rows per GX run (a few columns each)


def _columns(cfg: DatasetConfig) -> list[tuple[str, pa.DataType, dict[str, Any]]]:
    """(column, declared Arrow type, rules) for the target and every field."""
    t, k = cfg.target_spec, len(cfg.classes)
    rules: dict[str, Any] = {"optional": False, "finite": not t.allow_nan}
    if t.kind == "class":
        rules |= {"min": 0, "max": k - 1}
    elif t.kind == "multilabel":
        rules |= {"min": 0, "max": 1}
    elif t.kind == "mask":
        rules |= {"min": 0, "max": k - 1}
    else:
        rules |= {"min": t.min, "max": t.max}
    out = [(t.name, target_type(t, k), rules)]
    for name, spec in cfg.field_specs:
        out.append((name, field_type(spec), {
            "optional": spec.optional, "finite": not spec.allow_nan, "min": spec.min,
            "max": spec.max, "vocabulary": spec.vocabulary}))
    return out


def field_expectations(cfg: DatasetConfig) -> list[Any]:
    """The suite's expectations, field by field (column names start with the field's)."""
    import great_expectations.expectations as gxe

    out: list[Any] = []
    for name, typ, r in _columns(cfg):
        tensor = isinstance(typ, pa.FixedShapeTensorType)
        out.append(gxe.ExpectColumnValuesToBeInSet(column=f"{name}.type",
                                                   value_set=[str(typ)]))
        if not r["optional"]:
            out.append(gxe.ExpectColumnValuesToBeInSet(column=f"{name}.null",
                                                       value_set=[False]))
        numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ) or tensor
        if not numeric:
            if r.get("vocabulary") is not None:
                out.append(gxe.ExpectColumnValuesToBeInSet(column=name,
                                                           value_set=list(r["vocabulary"])))
            continue
        if r["finite"]:
            out.append(gxe.ExpectColumnValuesToBeBetween(column=f"{name}.nonfinite",
                                                         max_value=0))
        if r["min"] is not None:
            out.append(gxe.ExpectColumnValuesToBeBetween(column=f"{name}.min",
                                                         min_value=r["min"]))
        if r["max"] is not None:
            out.append(gxe.ExpectColumnValuesToBeBetween(column=f"{name}.max",
                                                         max_value=r["max"]))
    return out


def summarize(cfg: DatasetConfig, table: pa.Table) -> pd.DataFrame:
    """One summary row per data row: per field its type, null flag, and for numeric data
    the row's min, max (finite values) and NaN/Inf count; a string as is."""
    n = table.num_rows
    out: dict[str, Any] = {"id": table.column("id").to_numpy(zero_copy_only=False)}
    for name, _, _ in _columns(cfg):
        col = table.column(name).combine_chunks()
        out[f"{name}.type"] = pd.Categorical([str(col.type)] * n)
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        out[f"{name}.null"] = ~valid
        typ = col.type
        if isinstance(typ, pa.FixedShapeTensorType):
            block = col.storage.flatten().to_numpy(zero_copy_only=False).reshape(n, -1)
        elif pa.types.is_integer(typ) or pa.types.is_floating(typ):
            block = col.to_numpy(zero_copy_only=False).reshape(n, -1)
        else:
            out[name] = col.cast(pa.string()).to_pylist() if pa.types.is_dictionary(typ) \
                else col.to_pylist()
            continue
        block = block.astype(np.float64)
        fin = np.isfinite(block)
        masked = np.where(fin, block, np.nan)
        width = block.shape[1]
        has = fin.any(axis=1) & valid
        with np.errstate(all="ignore"):
            out[f"{name}.min"] = np.where(has, np.nanmin(masked, axis=1, initial=np.inf,
                                                          where=fin) if width else np.nan,
                                          np.nan)
            out[f"{name}.max"] = np.where(has, np.nanmax(masked, axis=1, initial=-np.inf,
                                                          where=fin) if width else np.nan,
                                          np.nan)
        out[f"{name}.nonfinite"] = np.where(valid, (~fin).sum(axis=1), 0)
    return pd.DataFrame(out)


def field_frames(cfg: DatasetConfig, conv: Converted, store: Store | None,
                 max_rows: int = SUMMARY_ROWS) -> Iterator[pd.DataFrame]:
    """Summary frames of the data shards to publish, ~``max_rows`` rows each (one empty
    frame when there is none, so every expectation still reports)."""
    st = conv.store if store is None else store
    parts: list[pd.DataFrame] = []
    held = 0
    for s in conv.data_shards:
        with ipc.open_file(pa.BufferReader(st.get_bytes(s.path))) as f:
            frame = summarize(cfg, f.read_all())
        parts.append(frame)
        held += len(frame)
        if held >= max_rows:
            yield pd.concat(parts, ignore_index=True)
            parts, held = [], 0
    if parts:
        yield pd.concat(parts, ignore_index=True)
    elif not conv.data_shards:
        from shardline.core.schema import data_schema
        yield summarize(cfg, data_schema(cfg).empty_table())
