"""What a published row holds, as the trainer and a model factory see it.

The contract between the data side (config -> Arrow schema -> loader batches) and the model
side (a factory that builds an ``nn.Module`` for the dataset, the loss, the metrics and the
gate). A loader batch is a dict with one tensor per field (``batch[field.name]``), the
target (``batch[target.name]``) and bookkeeping (``key``: the row's id hash, int64).

Shapes are per sample, as the loader serves them: an image field is ``(C, H, W)`` (the
loader hands it over channels-first; a model may ask for channels-last memory), a tensor
field its declared shape, a scalar ``()``.

Today's configs (``[dataset.image]`` + ``classes``) describe one ``image`` field of uint8
pixels and a ``class`` target in the ``label`` column: :func:`dataset_info` builds that.

Storage (the Arrow columns of a shard; one column per field, named after it):
- image / tensor: ``pa.fixed_shape_tensor(value_type, shape)`` (images stored H, W, C; the
  loader serves C, H, W), so a memory-mapped shard reaches numpy/torch without a copy. The
  legacy shorthand's ``image`` stays ``fixed_size_binary(H*W*C)`` of uint8 HWC pixels, so
  existing datasets keep their schema fingerprint; readers accept both. A bool tensor is
  stored as uint8 0/1 (the field's metadata ``shardline.dtype`` says ``bool``).
- scalar: the native Arrow type (int64, float32/64, bool; string, dictionary-encoded when
  the field declares a vocabulary).
- target ``class``: int16 index into ``classes`` (the legacy ``label`` column);
  ``multilabel``: ``fixed_shape_tensor(uint8, [K])`` 0/1 over ``classes``; ``regression``:
  float32, or ``fixed_shape_tensor(float32, shape)``; ``mask``: ``fixed_shape_tensor(uint8
  or int16, [H, W])`` of class indices.
Declared in TOML as ``[dataset.fields.<name>]`` and ``[dataset.target]``
(``core.field_spec``); the Arrow types are built by ``core.field_arrow``; the schema's
metadata ``shardline.fields`` holds the declaration (name, kind, dtype, shape per field).
Bookkeeping columns stay: ``id`` (string), ``source_key``, ``source_row``.

Calling a model: the trainer passes the single field's tensor when the dataset has one input
field, else a dict ``{name: tensor}``; normalisation (``FieldStats``, or ``/ 255`` for uint8
pixels without statistics) is applied by the trainer's wrapper around the model, so a loaded
model takes raw fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from shardline.core.config_model import DatasetConfig
from shardline.core.field_spec import target_dtype, target_shape
from shardline.core.field_stats import mean_std

FieldKind = Literal["image", "tensor", "scalar"]
TargetKind = Literal["class", "multilabel", "regression", "mask"]


@dataclass(frozen=True)
class FieldStats:
    """Dataset-level statistics of a numeric field, per channel (axis 0 of the served
    shape; one entry for a scalar). The trainer normalises with ``mean`` and ``std``.
    Built from a version's recorded statistics (``Manifest.stats``, merged per batch at
    ingest: ``core.field_stats``) by :func:`dataset_info`; NaN/Inf values are left out."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    min: tuple[float, ...] = ()
    max: tuple[float, ...] = ()


@dataclass(frozen=True)
class FieldInfo:
    """One input field: its column name, kind, numpy dtype name and per-sample shape."""

    name: str
    kind: FieldKind
    dtype: str
    shape: tuple[int, ...]
    stats: FieldStats | None = None
    vocabulary: tuple[str, ...] = ()   # a string scalar's declared values (else empty)


@dataclass(frozen=True)
class TargetInfo:
    """The dataset's one target. ``classes`` for class / multilabel / mask targets; ``shape``
    is ``()`` for a class index or a scalar regression target, ``(K,)`` for multilabel (a
    0/1 vector over ``classes``) or a vector target, ``(H, W)`` for a mask."""

    name: str
    kind: TargetKind
    classes: tuple[str, ...] = ()
    shape: tuple[int, ...] = ()
    dtype: str = "int16"     # numpy dtype of the stored target (int16 class index, uint8
                             # multilabel 0/1, float32/64 regression, uint8/int16 mask)
    stats: FieldStats | None = None   # regression: the recorded mean/std (per value)

    @property
    def num_outputs(self) -> int:
        """Width of a model's output layer for this target (one logit per class, or the
        number of regression values)."""
        if self.kind in ("class", "multilabel", "mask"):
            return len(self.classes)
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class DatasetInfo:
    """Everything a model factory is told about the data it will be trained on."""

    fields: tuple[FieldInfo, ...]
    target: TargetInfo
    extra: dict[str, str] = field(default_factory=dict)

    def field(self, name: str) -> FieldInfo:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"no field {name!r}; fields: {', '.join(f.name for f in self.fields)}")

    @property
    def images(self) -> tuple[FieldInfo, ...]:
        return tuple(f for f in self.fields if f.kind == "image")


def field_stats(entry: Mapping[str, Any] | None) -> FieldStats | None:
    """A version's statistics entry of one field (``core.field_stats``) as
    :class:`FieldStats` (None: not a numeric entry, or none recorded)."""
    if not entry or "count" not in entry:
        return None
    mean, std = mean_std(dict(entry))
    nan = float("nan")
    return FieldStats(mean=mean, std=std,
                      min=tuple(nan if v is None else float(v) for v in entry["min"]),
                      max=tuple(nan if v is None else float(v) for v in entry["max"]))


def dataset_info(cfg: DatasetConfig, stats: Mapping[str, Any] | None = None) -> DatasetInfo:
    """The fields and target a dataset's configuration declares; with a version's recorded
    statistics (``Manifest.stats``), each numeric field's and a regression target's
    :class:`FieldStats` (per channel) for the trainer to normalise with."""
    stats = stats or {}
    fields = []
    for name, spec in cfg.field_specs:
        shape = tuple(spec.shape)
        if spec.kind == "image":
            h, w, c = shape
            shape = (c, h, w)
        dtype = spec.resolved_dtype
        vocab = tuple(spec.vocabulary or ())
        fields.append(FieldInfo(name=name, kind=spec.kind, dtype=dtype, shape=shape,
                                vocabulary=vocab, stats=field_stats(stats.get(name))))
    t = cfg.target_spec
    k = len(cfg.classes)
    target = TargetInfo(name=t.name, kind=t.kind,
                        classes=tuple(cfg.classes) if t.kind != "regression" else (),
                        shape=target_shape(t, k), dtype=target_dtype(t, k),
                        stats=field_stats(stats.get(t.name)))
    return DatasetInfo(fields=tuple(fields), target=target)
