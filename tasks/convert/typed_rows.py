"""Row checks for a dataset with typed fields (``[dataset.fields]``, ``[dataset.target]``):
a raw record (id, target value, one raw value per field) -> a :class:`TypedRow` as stored,
or a :class:`~shardline.tasks.convert.rows.RowError` for the first rule it breaks (id, then
the target, then the fields in declared order). The shorthand's rows keep their own, faster
path (``rows.Normaliser``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardline.core.config import DatasetConfig
from shardline.core.field_spec import FieldSpec
from shardline.tasks.convert.images import image_value, mask_value
from shardline.tasks.convert.limits import Limits, limits_for
from shardline.tasks.convert.rows import RowError, label_index, normalise_id
from shardline.tasks.convert.values import (
    ABSENT,
    check_numbers,
    is_missing,
    missing,
    multilabel_value,
    regression_value,
    scalar_value,
    tensor_value,
)


@dataclass(frozen=True)
class TypedRow:
    id: str
    group: int             # the class index (class targets), else 0: shard order, counts
    target: Any
    values: tuple[Any, ...]   # one per field, declared order; None: an optional field's null


class TypedNormaliser:
    """Per-dataset state for the typed row checks."""

    def __init__(self, cfg: DatasetConfig, limits: Limits | None = None) -> None:
        self.cfg = cfg
        self.lim = limits or limits_for(cfg)
        self.specs: tuple[tuple[str, FieldSpec], ...] = cfg.field_specs
        self.target = cfg.target_spec
        self.columns = {n: cfg.source_column(n) for n, _ in self.specs}

    def normalise(self, rid: Any, label: Any, values: dict[str, Any]) -> TypedRow:
        cfg, lim = self.cfg, self.lim
        sid = normalise_id(rid, cfg.id_column, lim.max_id_chars)
        target, group = self._target(label)
        out: list[Any] = []
        for name, spec in self.specs:
            v = values.get(name, ABSENT)
            if is_missing(v) or (isinstance(v, str) and not v and spec.resolved_dtype != "string"):
                missing(name, self.columns[name], spec.optional)
                out.append(None)
                continue
            out.append(self._field(name, spec, v))
        return TypedRow(sid, group, target, tuple(out))

    def _field(self, name: str, spec: FieldSpec, v: Any) -> Any:
        lim = self.lim
        if spec.kind == "image":
            return image_value(v, spec, name, lim)
        if spec.kind == "tensor":
            arr = tensor_value(v, spec.resolved_dtype, tuple(spec.shape), name, lim)
            check_numbers(arr, name, spec.allow_nan, spec.min, spec.max)
            return arr
        return scalar_value(v, spec, name)

    def _target(self, label: Any) -> tuple[Any, int]:
        t, cfg, lim = self.target, self.cfg, self.lim
        column = cfg.source_column(t.name)
        if is_missing(label) or (isinstance(label, str) and not label.strip()
                                 and t.kind != "multilabel"):
            raise RowError("missing_label", f"target {t.name!r} (column {column!r}) is "
                           "missing or null")
        if t.kind == "class":
            idx = label_index(label, cfg.classes, column, lim.max_label_chars)
            return idx, idx
        if t.kind == "multilabel":
            return multilabel_value(label, cfg.classes, t.name, lim.max_label_chars,
                                    column), 0
        if t.kind == "mask":
            return mask_value(label, t, cfg.classes, t.name, lim), 0
        return regression_value(label, t, t.name, lim), 0
