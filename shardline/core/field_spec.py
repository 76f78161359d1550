"""Typed fields of a dataset TOML: ``[dataset.fields.<name>]`` tables and ``[dataset.target]``.

A field is one input column of every published row, with a kind:

- ``image``: encoded PNG/JPEG/TIFF/WebP (or pixels from Zarr) decoded once at ingest to
  ``dtype`` (uint8 or uint16) of ``shape = [H, W, C]`` (any C; multi-band TIFF included);
- ``tensor``: ``dtype`` and a fixed ``shape`` (from Zarr arrays, NPY, raw bytes in base64,
  Parquet lists, nested JSON lists);
- ``scalar``: int, float, bool or string (a string may declare its ``vocabulary``).

The one target (``[dataset.target]``) is ``class`` (one of ``classes``), ``multilabel`` (a
subset of ``classes``), ``regression`` (float, ``shape`` [] or fixed) or ``mask`` (an
integer ``[H, W]`` of class indices). Without ``[dataset.fields]`` the legacy shorthand
(``[dataset.image]`` + ``classes``) holds: one ``image`` field of uint8 pixels and a
``class`` target in the ``label`` column (:func:`shardline.core.fields.dataset_info`).

Every rule a value can break is derived from its declaration (dtype, shape, nulls,
finiteness, ``min``/``max``, class membership) and checked at ingest (row checks, then the
great-expectations suite), so what a field declares is what its column holds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, Strict, model_validator
from pydantic.dataclasses import dataclass

Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
Size = Annotated[int, Strict(), Field(gt=0)]
_TABLE = ConfigDict(extra="forbid")

TENSOR_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                 "float16", "float32", "float64")
IMAGE_DTYPES = ("uint8", "uint16")
SCALAR_DTYPES = ("bool", "int8", "int16", "int32", "int64", "float32", "float64", "string")
REGRESSION_DTYPES = ("float32", "float64")
MASK_DTYPES = ("uint8", "int16")
ImageFormat = Literal["PNG", "JPEG", "TIFF", "WEBP"]
IMAGE_FORMATS: tuple[ImageFormat, ...] = ("PNG", "JPEG", "TIFF", "WEBP")
# Names a field may not take: the bookkeeping columns of every published row.
RESERVED = ("id", "source_key", "source_row")

TensorDtype = Literal["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                      "float16", "float32", "float64", "string"]


@dataclass(frozen=True, config=_TABLE)
class FieldSpec:
    """One input field (``[dataset.fields.<name>]``); the table's name is the column's."""

    kind: Literal["image", "tensor", "scalar"]
    dtype: TensorDtype | None = Field(
        default=None, description="image: uint8 (default) or uint16; tensor: any numeric or "
        "bool; scalar: bool, int8..int64, float32/64 or string")
    shape: tuple[Size, ...] = Field(
        default=(), description="image: [H, W, C]; tensor: the fixed per-sample shape; "
        "scalar: [] (omit)")
    column: Str | None = Field(
        default=None, description="the source's column / JSON key / Zarr array name; "
        "default: the field's name")
    optional: Bool = Field(default=False, description="a missing value is stored as null "
                           "(else the row is quarantined)")
    allow_nan: Bool = Field(default=False, description="NaN/Inf values are published "
                            "(else quarantined as not_finite)")
    min: Float | None = Field(default=None, description="smallest value allowed")
    max: Float | None = Field(default=None, description="largest value allowed")
    vocabulary: tuple[Str, ...] | None = Field(
        default=None, description="string scalar: the values allowed (stored dictionary-"
        "encoded); new values may only be appended")
    formats: tuple[ImageFormat, ...] = Field(
        default=IMAGE_FORMATS, description="image: encodings decoded at ingest")
    sample_axis: Annotated[int, Strict(), Field(ge=0)] = Field(
        default=0, description="Zarr: the axis of the array that indexes samples")
    missing_chunks: Literal["quarantine", "fill_value"] = Field(
        default="quarantine", description="Zarr: a chunk absent from the store quarantines "
        "its rows, or (fill_value) reads as the array's fill value")

    @model_validator(mode="after")
    def _kind_rules(self) -> FieldSpec:
        problem = field_problem(self)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def resolved_dtype(self) -> str:
        """The dtype, with the image default (uint8) filled in."""
        return self.dtype or "uint8"


def field_problem(f: FieldSpec) -> str | None:
    """What is wrong with ``f`` for its kind, or None."""
    dt, shape = f.resolved_dtype, f.shape
    if f.kind == "image":
        if dt not in IMAGE_DTYPES:
            return f"an image's dtype is one of {list(IMAGE_DTYPES)}, got {dt!r}"
        if len(shape) != 3:
            return f"an image's shape is [H, W, C], got {list(shape)}"
    elif f.kind == "tensor":
        if f.dtype is None or f.dtype not in TENSOR_DTYPES:
            return f"a tensor needs dtype, one of {list(TENSOR_DTYPES)}; got {f.dtype!r}"
        if not shape:
            return "a tensor needs a fixed shape (e.g. [13, 32, 32]); a single value is a " \
                   "scalar field"
    else:
        if f.dtype is None or f.dtype not in SCALAR_DTYPES:
            return f"a scalar needs dtype, one of {list(SCALAR_DTYPES)}; got {f.dtype!r}"
        if shape:
            return f"a scalar has no shape, got {list(shape)}: declare a tensor instead"
    if f.vocabulary is not None and (f.kind != "scalar" or f.dtype != "string"):
        return "vocabulary is for string scalars only"
    if f.vocabulary is not None and len(set(f.vocabulary)) != len(f.vocabulary):
        return "vocabulary has duplicates: each value once"
    if (f.min is not None or f.max is not None) and dt in ("string", "bool"):
        return f"min/max do not apply to dtype {dt}"
    if f.min is not None and f.max is not None and f.min > f.max:
        return f"min {f.min} is above max {f.max}"
    return None


@dataclass(frozen=True, config=_TABLE)
class TargetSpec:
    """The dataset's target (``[dataset.target]``)."""

    kind: Literal["class", "multilabel", "regression", "mask"]
    name: Str = Field(default="label", description="the target's column in published rows")
    column: Str | None = Field(
        default=None, description="the source's column / JSON key / Zarr array name; "
        "default: [dataset] label_column")
    dtype: Literal["float32", "float64", "uint8", "int16"] | None = Field(
        default=None, description="regression: float32 (default) or float64; mask: uint8 "
        "(default up to 256 classes) or int16")
    shape: tuple[Size, ...] = Field(
        default=(), description="regression: [] (one value) or a fixed shape; mask: [H, W]")
    allow_nan: Bool = False
    min: Float | None = None
    max: Float | None = None
    sample_axis: Annotated[int, Strict(), Field(ge=0)] = 0
    missing_chunks: Literal["quarantine", "fill_value"] = "quarantine"

    @model_validator(mode="after")
    def _kind_rules(self) -> TargetSpec:
        problem = target_problem(self)
        if problem:
            raise ValueError(problem)
        return self


def target_problem(t: TargetSpec) -> str | None:
    if t.kind == "regression":
        if t.dtype is not None and t.dtype not in REGRESSION_DTYPES:
            return f"a regression target's dtype is one of {list(REGRESSION_DTYPES)}"
    elif t.kind == "mask":
        if t.dtype is not None and t.dtype not in MASK_DTYPES:
            return f"a mask's dtype is one of {list(MASK_DTYPES)}"
        if len(t.shape) != 2:
            return f"a mask's shape is [H, W], got {list(t.shape)}"
    else:
        if t.dtype is not None or t.shape:
            return f"a {t.kind} target has no dtype or shape (it is over classes)"
    if t.kind != "regression" and (t.min is not None or t.max is not None or t.allow_nan):
        return "min, max and allow_nan are for regression targets"
    if t.min is not None and t.max is not None and t.min > t.max:
        return f"min {t.min} is above max {t.max}"
    return None


def target_dtype(t: TargetSpec, n_classes: int) -> str:
    """The numpy dtype of the target's stored values."""
    if t.kind == "class":
        return "int16"
    if t.kind == "multilabel":
        return "uint8"
    if t.kind == "regression":
        return t.dtype or "float32"
    return t.dtype or ("uint8" if n_classes <= 256 else "int16")


def target_shape(t: TargetSpec, n_classes: int) -> tuple[int, ...]:
    """The per-sample shape of the target's stored values."""
    if t.kind == "multilabel":
        return (n_classes,)
    return tuple(t.shape)
