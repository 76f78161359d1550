"""What the loader gathers from a shard and serves in a batch: one ``Column`` per input field
and per stored target other than a class index (``shardline.core.fields`` is the contract).

Every column is handled as rows of bytes: a record batch's column becomes a ``[rows,
nbytes]`` uint8 numpy view of its value buffer (no copy for ``fixed_shape_tensor``, the
legacy ``fixed_size_binary`` image, fixed-size lists and fixed-width scalars; a bool or a
dictionary-encoded string's indexes are converted once per record batch when the shard is
opened; a string scalar without a vocabulary is not served: it is no tensor).
The batch gather copies whole rows of bytes into one ``[B, nbytes]`` region of the batch
buffer per column, and :meth:`Column.view` turns that region into the typed tensor the
model sees, again without a copy: ``dtype`` reinterpreted, reshaped to the stored
per-sample shape, and for an image permuted to ``[B, C, H, W]`` (channels-last memory: a
view of the HWC rows). A class target is not a column: its int64 indexes come from the
shard index (``ShardIndex.labels``) and travel with the picks.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from shardline.core.config import DatasetConfig
from shardline.core.errors import ShardlineError
from shardline.core.fields import DatasetInfo, FieldInfo

if TYPE_CHECKING:   # torch only where a tensor is made: the notebook reader runs without it
    import torch


class ShardFormatError(ShardlineError):
    """A shard file does not have the dataset's published-row schema."""


# numpy dtype names a field or target may declare; torch has a dtype of each name
DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "float16",
               "float32", "float64")


def __getattr__(name: str) -> Any:
    if name == "TORCH_DTYPES":   # numpy dtype name -> torch dtype, built when torch is there
        import torch

        return {n: getattr(torch, n) for n in DTYPE_NAMES}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Column:
    """One gathered column: batch key ``name``, Arrow column ``source``, numpy ``dtype``
    name, per-sample ``stored`` shape (H, W, C for an image), ``image``: served
    ``[B, C, H, W]``."""

    name: str
    source: str
    dtype: str
    stored: tuple[int, ...]
    image: bool = False
    optional: bool = False      # shards older than the field may lack it: served as zeros

    @property
    def nbytes(self) -> int:
        """Bytes of one sample."""
        return math.prod(self.stored) * np.dtype(self.dtype).itemsize

    @property
    def storage(self) -> pa.DataType:
        """The Arrow value type (a bool tensor is stored as uint8 0/1)."""
        return pa.uint8() if self.dtype == "bool" and self.stored else \
            pa.from_numpy_dtype(np.dtype(self.dtype))

    def view(self, raw: torch.Tensor) -> torch.Tensor:
        """``[B, nbytes]`` uint8 rows -> the batch tensor (same memory)."""
        import torch  # loaded already: ``raw`` is a tensor

        t = raw if self.dtype == "uint8" else raw.view(getattr(torch, self.dtype))
        t = t.view(-1, *self.stored)
        return t.permute(0, 3, 1, 2) if self.image else t

    def check(self, schema: pa.Schema, key: str) -> None:
        """Raise :class:`ShardFormatError` unless ``schema`` stores this column as declared."""
        idx = schema.get_field_index(self.source)
        if idx < 0 and self.optional:
            return
        if idx < 0:
            raise ShardFormatError(
                f"shard {key} has no column {self.source!r} for field {self.name!r} "
                f"(columns: {schema.names}); is this a shard of this dataset version?")
        typ = schema.field(idx).type
        if not self._accepts(typ):
            raise ShardFormatError(
                f"shard {key}: column {self.source!r} has type {typ}, field {self.name!r} "
                f"declares {self.dtype} {list(self.stored)} (expected {self.expected()}); "
                "the shard was written for another declaration: train with the config the "
                "dataset was built with")

    def expected(self) -> str:
        if not self.stored:
            return str(self.storage) + (" or dictionary" if self.dtype == "int64" else "")
        text = f"fixed_shape_tensor({self.storage}, {list(self.stored)})"
        return text + (f" or fixed_size_binary({self.nbytes})" if self.dtype == "uint8" else "")

    def _accepts(self, typ: pa.DataType) -> bool:
        want = self.storage
        if isinstance(typ, pa.FixedShapeTensorType):   # row-major only: a view as declared
            perm = typ.permutation
            return typ.value_type == want and tuple(typ.shape) == self.stored and (
                perm is None or list(perm) == list(range(len(self.stored))))
        if pa.types.is_fixed_size_binary(typ):
            return self.dtype == "uint8" and typ.byte_width == self.nbytes
        if pa.types.is_fixed_size_list(typ):
            return typ.value_type == want and typ.list_size == math.prod(self.stored)
        if pa.types.is_dictionary(typ):
            return not self.stored and pa.types.is_integer(typ.index_type) \
                and self.dtype == "int64"
        return not self.stored and typ == want

    def read(self, batch: pa.RecordBatch) -> np.ndarray:
        """``[rows, nbytes]`` uint8 view of this column in ``batch`` (zeros when an
        optional field's column is absent: a shard written before the field was added)."""
        idx = batch.schema.get_field_index(self.source)
        if idx < 0:
            return np.zeros((batch.num_rows, self.nbytes), np.uint8)
        return self.segment(batch.column(idx))

    def segment(self, col: pa.Array) -> np.ndarray:
        """``[rows, nbytes]`` uint8 view of one record batch's column (checked type)."""
        n, width = len(col), self.nbytes
        if isinstance(col, pa.ExtensionArray):
            col = col.storage
        if pa.types.is_dictionary(col.type):
            col = col.indices.cast(pa.int64())
        if pa.types.is_boolean(col.type):
            return col.to_numpy(zero_copy_only=False).astype(np.uint8).reshape(n, width)
        if pa.types.is_fixed_size_list(col.type):
            values = col.values       # (ignores the list array's own offset: added below)
            first = col.offset * col.type.list_size + values.offset
            itemsize = np.dtype(self.dtype).itemsize
            buf, start = values.buffers()[1], first * itemsize
        else:                         # fixed_size_binary or a fixed-width scalar
            buf, start = col.buffers()[1], col.offset * width
        if buf is None:
            return np.zeros((n, width), np.uint8)
        return np.frombuffer(buf, np.uint8, count=n * width, offset=start).reshape(n, width)


def _field_column(f: FieldInfo, optional: bool) -> Column | None:
    if f.dtype == "string":              # a vocabulary's indexes; free text is no tensor
        return Column(f.name, f.name, "int64", (), optional=optional) if f.vocabulary \
            else None
    if f.kind == "image":
        c, h, w = f.shape
        return Column(f.name, f.name, f.dtype, (h, w, c), image=True, optional=optional)
    return Column(f.name, f.name, f.dtype, tuple(f.shape), optional=optional)


@dataclass(frozen=True)
class Layout:
    """The columns a dataset's batches gather, and where its class target and ids live."""

    columns: tuple[Column, ...]
    target: str                   # the target's batch key
    label_source: str | None      # Arrow column of a class target (None: gathered column)
    id_source: str = "id"

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(c.nbytes for c in self.columns)

    @property
    def row_bytes(self) -> int:
        return sum(self.widths)


def layout_for(info: DatasetInfo, optional: Collection[str] = ()) -> Layout:
    """The loader's layout of a dataset: its fields in declared order (a string scalar
    without a vocabulary left out), then the target (gathered unless a class index). Every
    column of a published shard is named after its field or target; ``optional``: fields
    whose column older shards may lack (added later; served as zeros there)."""
    cols = [c for c in (_field_column(f, f.name in optional) for f in info.fields)
            if c is not None]
    t = info.target
    if t.kind == "class":
        return Layout(tuple(cols), t.name, t.name)
    cols.append(Column(t.name, t.name, t.dtype, tuple(t.shape)))
    return Layout(tuple(cols), t.name, None)


def optional_fields(cfg: DatasetConfig) -> set[str]:
    """The fields ``cfg`` declares optional."""
    return {name for name, spec in cfg.field_specs if spec.optional}
