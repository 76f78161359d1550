"""What the readers do differently for typed fields: take each declared field's column
(``values``), and refuse a source that lacks a declared column once, as a whole
(``missing_field``, naming the field and the columns found), rather than once per row.
"""

from __future__ import annotations

import io
import json
import posixpath
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from shardline.core.config import DatasetConfig
from shardline.tasks.batch import Source
from shardline.tasks.convert.limits import excerpt
from shardline.tasks.convert.records import Problem, Record, Unreadable
from shardline.tasks.convert.values import ABSENT


def field_values(cfg: DatasetConfig, get: Callable[[str], Any]) -> dict[str, Any]:
    """Field name -> its raw value, read with ``get(source column)``."""
    return {name: get(cfg.source_column(name)) for name, _ in cfg.field_specs}


def typed_columns(cfg: DatasetConfig) -> list[str]:
    """The source columns a typed dataset reads: the target's, then each field's."""
    return [cfg.source_column(cfg.target_spec.name),
            *(cfg.source_column(n) for n, _ in cfg.field_specs)]


def require_columns(cfg: DatasetConfig, found: Iterable[str], what: str) -> None:
    """Raise :class:`Unreadable` (``missing_field``) when a required field's or the
    target's column is not among ``found``."""
    have = set(found)
    need = [(cfg.target_spec.name, "target")] + \
        [(n, "field") for n, s in cfg.field_specs if not s.optional]
    for name, kind in need:
        col = cfg.source_column(name)
        if col not in have:
            shown = excerpt(", ".join(sorted(have)) or "(none)", 300)
            raise Unreadable("missing_field",
                             f"{kind} {name!r} (column {col!r}) is not in this source; "
                             f"{what} found: {shown}. Add it, rename it with "
                             f"[dataset.fields.{name}] column = \"...\", or declare it "
                             "optional = true" if kind == "field" else
                             f"{kind} {name!r} (column {col!r}) is not in this source; "
                             f"{what} found: {shown}. Add it or set [dataset.target] column")


def require_shorthand_columns(cfg: DatasetConfig, found: Iterable[str]) -> None:
    """The shorthand (``label_column``, ``[dataset.image] column``, ``id_column``): raise
    :class:`Unreadable` (``missing_column``) once for a source none of whose rows can have
    a required column, naming the columns found and the setting that renames it."""
    have = set(found)
    for col, setting in ((cfg.label_column, "label_column"), (cfg.image.column,
                         "[dataset.image] column"), (cfg.id_column, "id_column")):
        if col not in have:
            shown = excerpt(", ".join(sorted(have)) or "(none)", 300)
            raise Unreadable("missing_column", f"no column {json.dumps(col)}; columns found: "
                             f"{shown}; set {setting} (or add the column)")


def typed_parquet_records(table: pa.Table, cfg: DatasetConfig, first_row: int = 0
                          ) -> Iterator[Record | Problem]:
    names = set(table.column_names)

    def values(name: str) -> list[Any]:
        if name in names:
            return table.column(name).to_pylist()
        return [ABSENT] * table.num_rows

    ids = values(cfg.id_column)
    labels = values(cfg.source_column(cfg.target_spec.name))
    cols = {n: values(cfg.source_column(n)) for n, _ in cfg.field_specs}
    for i in range(table.num_rows):
        yield Record(first_row + i, ids[i], labels[i], None,
                     values={n: v[i] for n, v in cols.items()})


def image_file_record(cfg: DatasetConfig, stem: str, label: Any, data: bytes) -> Record:
    """An ImageFolder file (``<class>/<stem>.png``) for a typed dataset: its bytes are the
    first image field; any other required field cannot be in it (``missing_field``)."""
    image = next((n for n, s in cfg.field_specs if s.kind == "image"), None)
    if image is None:
        raise Unreadable("missing_field", "an image file, and the dataset declares no image "
                         f"field (fields: {', '.join(n for n, _ in cfg.field_specs)})")
    require_columns(cfg, [cfg.source_column(image), cfg.source_column(cfg.target_spec.name)],
                    "an image file holds only")
    return Record(0, stem, label, None, values={image: data})


def read_npy(data: bytes, src: Source, cfg: DatasetConfig) -> Iterator[Record | Problem]:
    """An ``.npy`` object in the ImageFolder layout (``<prefix>/<class>/<stem>.npy``) filling
    the dataset's first tensor (or image) field: one sample of the field's shape (id
    ``<stem>``), or ``N`` samples stacked on axis 0 (ids ``<stem>-<i>``, rows ``i``)."""
    name = next((n for n, s in cfg.field_specs if s.kind in ("tensor", "image")), None)
    if not cfg.typed or name is None:
        raise Unreadable("unreadable_object", "an .npy object needs a dataset with a tensor "
                         "or image field ([dataset.fields.<name>] kind = \"tensor\")")
    spec = dict(cfg.field_specs)[name]
    parts = src.key.split("/")
    label = parts[-2] if len(parts) >= 2 else None
    stem = posixpath.splitext(parts[-1])[0]
    require_columns(cfg, [cfg.source_column(name), cfg.source_column(cfg.target_spec.name)],
                    "an .npy object holds only")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise Unreadable("unreadable_object", f"not a readable .npy array: {exc}") from exc
    shape = tuple(spec.shape)
    if arr.shape == shape:
        yield Record(0, stem, label, None, values={name: arr})
    elif arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
        for i in range(arr.shape[0]):
            yield Record(i, f"{stem}-{i:06d}", label, None, values={name: arr[i]})
    else:
        raise Unreadable("wrong_shape", f"the array is {arr.dtype}{list(arr.shape)}; field "
                         f"{name!r} declares {list(shape)} per sample (one sample, or N "
                         "samples on axis 0)")
