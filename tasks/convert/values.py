"""Row checks of typed values: one raw value of a declared field or target -> the value as
stored, or a :class:`~shardline.tasks.convert.rows.RowError` naming the field, the rule, the
value (an excerpt) and the fix.

Every rule comes from the declaration (``core.field_spec``): presence (``optional``), dtype
(exact for arrays that carry one: NPY, Zarr; a lossless conversion for JSON numbers and
CSV text), shape, finiteness (``allow_nan``), ``min``/``max``, vocabulary and class
membership. Tensors arrive as nested JSON lists, Parquet lists, ndarrays (Zarr), NPY bytes
or raw little-endian bytes (base64 in JSONL/CSV); images are decoded by ``images``.
"""

from __future__ import annotations

import binascii
import io
import json
from typing import Any

import numpy as np

from shardline.core.field_arrow import storage_dtype
from shardline.core.field_spec import FieldSpec, TargetSpec
from shardline.tasks.convert.limits import Limits, excerpt
from shardline.tasks.convert.rows import RowError, b64_payload, label_index

NPY_MAGIC = b"\x93NUMPY"


class Absent:
    """A value whose column the source does not have (not even as null)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = Absent()


def is_missing(value: Any) -> bool:
    """No value at all (a NaN is a value: the finiteness rule judges it)."""
    return value is None or value is ABSENT


def missing(name: str, column: str, optional: bool) -> None:
    if not optional:
        raise RowError("missing_value", f"field {name!r} (column {column!r}) is missing or "
                       "null; give every row a value or declare the field optional = true")


def _bytes_of(value: Any, name: str) -> bytes:
    try:
        return b64_payload(value)
    except (binascii.Error, ValueError) as exc:
        raise RowError("undecodable_value", f"field {name!r}: not valid base64 "
                       f"({excerpt(value, 40)}): {exc}; send a JSON list, NPY or raw bytes "
                       "in base64") from exc


def _from_bytes(data: bytes, dtype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """NPY (by its magic) or raw little-endian bytes of exactly ``shape`` x itemsize."""
    if data.startswith(NPY_MAGIC):
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise RowError("undecodable_value", f"field {name!r}: not a readable NPY array "
                           f"({len(data)} bytes): {exc}") from exc
        if arr.dtype.newbyteorder("=") != np.dtype(dtype).newbyteorder("=") and \
                not (dtype == "bool" and arr.dtype == np.bool_):
            raise RowError("wrong_dtype", f"field {name!r}: the NPY array is {arr.dtype}, the "
                           f"field is {dtype}; convert it before upload")
        return arr.astype(arr.dtype.newbyteorder("="), copy=False)
    want = int(np.prod(shape)) * storage_dtype(dtype).itemsize
    if len(data) != want:
        raise RowError("wrong_shape", f"field {name!r}: {len(data)} raw bytes, expected {want} "
                       f"({dtype} x {list(shape)}, little-endian); or send NPY")
    return np.frombuffer(data, storage_dtype(dtype).newbyteorder("<")).reshape(shape)


def _exact(arr: np.ndarray, dtype: str, name: str) -> np.ndarray:
    """``arr`` as ``dtype`` when no value changes on the way, else ``wrong_dtype``."""
    want = np.dtype(dtype)
    if arr.dtype == want:
        return arr
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise RowError("wrong_dtype", f"field {name!r} holds non-numeric values "
                       f"({excerpt(arr.ravel()[:4].tolist(), 60)}); expected {dtype}")
    if want.kind == "b":
        ok = arr.dtype.kind in "biuf" and bool(np.isin(arr, (0, 1)).all())
    elif want.kind in "iu":
        ok = arr.dtype.kind in "biu" or (arr.dtype.kind == "f" and bool(
            np.isfinite(arr).all()) and bool((arr == np.round(arr)).all()))
        if ok and arr.size:
            info = np.iinfo(want)
            ok = float(arr.min()) >= info.min and float(arr.max()) <= info.max
    else:
        ok = arr.dtype.kind in "biuf"
    if not ok:
        shown = excerpt(arr.ravel()[:4].tolist(), 60)
        raise RowError("wrong_dtype", f"field {name!r}: values ({shown}) are not exactly "
                       f"representable as {dtype}; fix the values or the field's dtype")
    return arr.astype(want)


def check_numbers(arr: np.ndarray, name: str, allow_nan: bool, lo: float | None,
                  hi: float | None) -> None:
    """The finiteness and range rules on a numeric array."""
    if arr.dtype.kind == "f" and not allow_nan:
        bad = ~np.isfinite(arr)
        if bad.any():
            at = np.unravel_index(int(np.argmax(bad)), arr.shape) if arr.ndim else ()
            raise RowError("not_finite", f"field {name!r} holds {int(bad.sum())} NaN/Inf "
                           f"value(s), first {arr[at]!r} at {list(map(int, at))}; fix the "
                           "data or declare allow_nan = true")
    if (lo is None and hi is None) or arr.size == 0:
        return
    vals = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
    if vals.size == 0:
        return
    vmin, vmax = float(vals.min()), float(vals.max())
    if (lo is not None and vmin < lo) or (hi is not None and vmax > hi):
        raise RowError("out_of_range", f"field {name!r} holds values in [{vmin:g}, {vmax:g}], "
                       f"outside the declared [{lo}, {hi}]; fix the data or widen min/max")


def tensor_value(value: Any, dtype: str, shape: tuple[int, ...], name: str,
                 lim: Limits) -> np.ndarray:
    """A tensor of exactly ``dtype`` (stored as ``storage_dtype``) and ``shape``."""
    if isinstance(value, np.ndarray):
        arr = value
        if arr.dtype != np.dtype(dtype) and arr.dtype.kind in "biuf":
            raise RowError("wrong_dtype", f"field {name!r}: the array is {arr.dtype}, the "
                           f"field is {dtype}; convert it or declare dtype = \"{arr.dtype}\"")
    elif isinstance(value, str | bytes | bytearray | memoryview):
        if len(value) > lim.max_row_bytes:
            raise RowError("row_too_large", f"field {name!r} holds {len(value)} bytes; the "
                           f"limit is {lim.max_row_bytes} (limits.max_row_bytes)")
        text = value.strip() if isinstance(value, str) else ""
        if text.startswith("["):            # a JSON list in a CSV cell
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise RowError("undecodable_value", f"field {name!r}: not a JSON list "
                               f"({excerpt(text, 40)}): {exc}") from exc
            arr = np.asarray(value)
        else:
            arr = _from_bytes(_bytes_of(value, name), dtype, shape, name)
    elif isinstance(value, list | tuple | int | float | bool | np.generic):
        try:
            arr = np.asarray(value)
        except ValueError as exc:     # ragged nested lists
            raise RowError("wrong_shape", f"field {name!r}: nested lists of unequal "
                           f"lengths; expected {list(shape)}") from exc
    else:
        raise RowError("wrong_dtype", f"field {name!r} holds {type(value).__name__} "
                       f"{excerpt(value, 40)}; expected {dtype} {list(shape)}")
    if tuple(arr.shape) != tuple(shape):
        raise RowError("wrong_shape", f"field {name!r} is {list(arr.shape)}, expected "
                       f"{list(shape)}")
    arr = _exact(arr, dtype, name)
    return np.ascontiguousarray(arr, dtype=storage_dtype(dtype))


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def scalar_value(value: Any, spec: FieldSpec, name: str) -> Any:
    """A scalar field's value as stored (a vocabulary string as its index)."""
    dt = spec.resolved_dtype
    if dt == "string":
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise RowError("wrong_dtype", f"field {name!r} holds {type(value).__name__} "
                           f"{excerpt(value, 40)}; expected a string")
        text = str(value)
        if spec.vocabulary is None:
            return text
        if text not in spec.vocabulary:
            shown = list(spec.vocabulary[:12])
            raise RowError("unknown_value", f"field {name!r} holds {excerpt(text, 40)}, not one "
                           f"of its vocabulary {shown}; fix the value or append it to the "
                           "vocabulary")
        return spec.vocabulary.index(text)
    if isinstance(value, str):
        text = value.strip().lower()
        if dt == "bool":
            if text in _TRUE + _FALSE:
                return text in _TRUE
            raise RowError("wrong_dtype", f"field {name!r} holds {excerpt(value, 40)}; "
                           "expected true or false")
        try:
            value = int(text) if dt.startswith("int") and text.lstrip("-").isdigit() \
                else float(text)
        except ValueError:
            raise RowError("wrong_dtype", f"field {name!r} holds {excerpt(value, 40)}; "
                           f"expected a number ({dt})") from None
    arr = _exact(np.asarray(value), dt, name)
    if arr.ndim:
        raise RowError("wrong_shape", f"field {name!r} holds a list; a scalar is one value")
    check_numbers(arr, name, spec.allow_nan, spec.min, spec.max)
    return arr.item()


def multilabel_value(value: Any, classes: tuple[str, ...], name: str,
                     max_chars: int, column: str | None = None) -> np.ndarray:
    """A label set (a list of class names or indices; a ``|``-separated or JSON-list string
    in CSV; a 0/1 vector of length K as an ndarray) as a uint8 0/1 vector over classes
    (``column``: the source's column, named by an entry that is no class)."""
    k = len(classes)
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "biu":
        if value.shape != (k,) or not np.isin(value, (0, 1)).all():
            raise RowError("unknown_label", f"target {name!r}: a 0/1 vector over {k} classes "
                           f"was expected, got {excerpt(value.tolist(), 60)}")
        return value.astype(np.uint8)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise RowError("unknown_label", f"target {name!r}: not a JSON list "
                               f"({excerpt(text, 40)})") from exc
        else:
            value = [v for v in text.split("|") if v.strip()] if text else []
    if not isinstance(value, list | tuple | np.ndarray):
        raise RowError("unknown_label", f"target {name!r} holds {excerpt(value, 40)}; expected "
                       "a list of class names or indices")
    out = np.zeros(k, np.uint8)
    for v in list(value):
        out[label_index(v.item() if isinstance(v, np.generic) else v, classes,
                        column or name, max_chars)] = 1
    return out


def regression_value(value: Any, t: TargetSpec, name: str, lim: Limits) -> Any:
    dt = t.dtype or "float32"
    if not t.shape:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise RowError("wrong_dtype", f"target {name!r} holds {excerpt(value, 40)}; "
                               "expected a number") from None
        arr = _exact(np.asarray(value), dt, name) if not isinstance(value, bool) else None
        if arr is None or arr.ndim:
            raise RowError("wrong_dtype", f"target {name!r} holds {excerpt(value, 40)}; "
                           "expected one number")
    else:
        arr = tensor_value(value, dt, tuple(t.shape), name, lim)
    check_numbers(arr, name, t.allow_nan, t.min, t.max)
    return arr if t.shape else arr.astype(dt)[()]
