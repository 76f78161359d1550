"""The Arrow storage of each declared field and target (the contract: ``core.fields``).

- image / tensor: ``pa.fixed_shape_tensor(value_type, shape)`` (an image's shape is its
  declared [H, W, C]); a bool tensor is stored as uint8 0/1 (Arrow's bool is bit-packed,
  which no numpy view can read without a copy) and its field metadata says ``bool``;
- scalar: the native Arrow type; a string with a vocabulary is ``dictionary(int16, string)``
  whose dictionary is the vocabulary in declared order (so the index is stable);
- target: ``class`` int16, ``multilabel`` ``fixed_shape_tensor(uint8, [K])``, ``regression``
  float32/64 or ``fixed_shape_tensor``, ``mask`` ``fixed_shape_tensor(uint8|int16, [H, W])``.

Each field carries metadata ``shardline.kind`` and ``shardline.dtype``; the schema carries
the declaration of every field (``shardline.fields``: name, kind, dtype, shape, vocabulary;
not the value rules such as min/max, which may widen without a new schema).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from shardline.core.field_spec import FieldSpec, TargetSpec, target_dtype, target_shape

META_FIELDS = b"shardline.fields"
META_KIND = b"shardline.kind"
META_DTYPE = b"shardline.dtype"

_ARROW = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
          "uint8": pa.uint8(), "uint16": pa.uint16(), "float16": pa.float16(),
          "float32": pa.float32(), "float64": pa.float64(), "bool": pa.bool_(),
          "string": pa.string()}


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype a tensor of ``dtype`` is stored as (bool as uint8)."""
    return np.dtype("uint8" if dtype == "bool" else dtype)


def tensor_type(dtype: str, shape: tuple[int, ...]) -> pa.DataType:
    value = pa.uint8() if dtype == "bool" else _ARROW[dtype]
    return pa.fixed_shape_tensor(value, list(shape))


def field_type(spec: FieldSpec) -> pa.DataType:
    """The Arrow type of a declared input field's column."""
    dt = spec.resolved_dtype
    if spec.kind in ("image", "tensor"):
        return tensor_type(dt, tuple(spec.shape))
    if dt == "string" and spec.vocabulary is not None:
        return pa.dictionary(pa.int16(), pa.string())
    return _ARROW[dt]


def target_type(t: TargetSpec, n_classes: int) -> pa.DataType:
    dt, shape = target_dtype(t, n_classes), target_shape(t, n_classes)
    if t.kind == "class":
        return pa.int16()
    if not shape:
        return _ARROW[dt]
    return tensor_type(dt, shape)


def field_meta(kind: str, dtype: str) -> dict[bytes, bytes]:
    return {META_KIND: kind.encode(), META_DTYPE: dtype.encode()}


def declaration(fields: tuple[tuple[str, FieldSpec], ...], t: TargetSpec,
                n_classes: int) -> dict[str, Any]:
    """The storage-relevant declaration (schema metadata ``shardline.fields``)."""
    out: list[dict[str, Any]] = []
    for name, f in fields:
        d: dict[str, Any] = {"name": name, "kind": f.kind, "dtype": f.resolved_dtype,
                             "shape": list(f.shape)}
        if f.vocabulary is not None:
            d["vocabulary"] = list(f.vocabulary)
        out.append(d)
    target = {"name": t.name, "kind": t.kind, "dtype": target_dtype(t, n_classes),
              "shape": list(target_shape(t, n_classes))}
    return {"fields": out, "target": target}


def declaration_json(fields: tuple[tuple[str, FieldSpec], ...], t: TargetSpec,
                     n_classes: int) -> bytes:
    return json.dumps(declaration(fields, t, n_classes), sort_keys=True).encode()
