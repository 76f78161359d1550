"""Held-out evaluation (the gate that uses it is ``trainer.gate`` / ``trainer.promote``).

Each row gets the target kind's row score (``trainer.objectives``: 1/0 for a class, higher
is better for every kind), or the user's ``score`` hook's; ``accuracy`` below is the mean
row score (for a class target, the accuracy), and ``metrics`` the kind's full metrics
(accuracy and macro-F1; micro/macro-F1 and mAP; RMSE, MAE and R²) with ``primary`` naming
the one the kind leads with.

Every row's score is kept with its id hash, dataset version and label
(``trainer.rows.RowScores``, gathered from all ranks) so two models can be compared on the
same rows. The summary comes from those rows: overall, on this run's new data, on
*earlier* data (the plan's replay versions: the forgetting measure), per dataset version,
and, when the class list grew since the parent, on the parent's classes and on the new ones
apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist
from torch import nn

from shardline.core.fields import DatasetInfo, FieldInfo
from shardline.trainer.device import Placement
from shardline.trainer.dist import all_sum
from shardline.trainer.objectives import Objective
from shardline.trainer.plan import TrainPlan
from shardline.trainer.rows import RowScores
from shardline.trainer.stream import Batch


@dataclass(frozen=True)
class EvalResult:
    accuracy: float | None
    samples: int
    new_accuracy: float | None          # shards new in this run
    earlier_accuracy: float | None      # shards the parent had seen (None from scratch)
    by_version: dict[str, float]        # dataset version -> accuracy
    samples_by_version: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)   # the kind's metrics
    primary: str = "accuracy"           # the metric the kind leads with (objectives)
    # class list grown since the parent: accuracy on rows of the parent's classes / new ones
    old_classes_accuracy: float | None = None
    new_classes_accuracy: float | None = None
    # per-row outcomes (not in to_dict: stored beside the weights, ``trainer.rows``)
    rows: RowScores | None = field(default=None, repr=False, compare=False)
    # class list grown: the same rows scored on the parent's classes only (the forgetting
    # check asks the candidate the parent's question); not in to_dict either
    rows_known: RowScores | None = field(default=None, repr=False, compare=False)
    # class targets: the classes whose accuracy fell most from the live model's on the same
    # rows (``fallen_classes``); set before the gate (``candidate.finish``); None when not
    # known (no live model, or a resumed run's live evaluation kept no per-row results)
    fallen_classes: list[dict[str, Any]] | None = None

    def accuracy_on(self, versions: Iterable[int]) -> float | None:
        """Sample-weighted accuracy over some dataset versions' held-out rows."""
        keys = [str(v) for v in versions if str(v) in self.by_version]
        n = sum(self.samples_by_version.get(k, 0) for k in keys)
        hits = sum(self.by_version[k] * self.samples_by_version.get(k, 0) for k in keys)
        return hits / n if n else None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("rows", "rows_known")}


FALLEN_TOP = 5          # classes listed
FALLEN_MIN_ROWS = 10    # a class with fewer held-out rows is not listed (one row is 10 points)


def fallen_classes(before: RowScores | None, after: RowScores | None,
                   names: Sequence[str] = (), top: int = FALLEN_TOP,
                   min_rows: int = FALLEN_MIN_ROWS) -> list[dict[str, Any]]:
    """The classes whose held-out accuracy fell most from ``before`` (the live model) to
    ``after`` (the candidate), on the rows both were scored on: up to ``top``, the largest
    drop first, each ``{"class", "name", "before", "after", "rows"}`` (``name`` from
    ``names``, the target's class list); only classes with at least
    ``min_rows`` rows and a drop. With 1,000 classes an overall figure hides the one class an
    update forgot; this names it, at a bounded size (the per-row results stay the record)."""
    if before is None or after is None or not len(after) or not len(before):
        return []
    _, ia, ib = np.intersect1d(after.ids, before.ids, return_indices=True)
    labels = after.labels[ia]
    keep = labels >= 0
    if not keep.any():
        return []
    labels, ia, ib = labels[keep], ia[keep], ib[keep]
    k = int(labels.max()) + 1
    n = np.bincount(labels, minlength=k)
    acc_after = np.bincount(labels, after.scores[ia].astype(np.float64), k) / np.maximum(n, 1)
    acc_before = np.bincount(labels, before.scores[ib].astype(np.float64), k) / np.maximum(n, 1)
    drop = acc_before - acc_after
    listed = np.flatnonzero((n >= min_rows) & (drop > 0))
    order = listed[np.argsort(-drop[listed], kind="stable")][:top]
    return [{"class": int(c), "name": names[c] if c < len(names) else str(c),
             "before": float(acc_before[c]), "after": float(acc_after[c]), "rows": int(n[c])}
            for c in order]


def earlier_upto(since: int | None, dataset_version: int) -> int | None:
    """Rows of dataset versions up to this one are *earlier data* (the plan's replay
    shards): the parent's version, or the one before when retraining the parent's own."""
    return None if since is None else min(since, dataset_version - 1)


def summarise(rows: RowScores, plan: TrainPlan, known: int | None = None,
              metrics: dict[str, float | None] | None = None,
              primary: str = "accuracy") -> EvalResult:
    """The figures of :class:`EvalResult`, all from the same per-row scores."""
    def mean(mask: np.ndarray) -> float | None:
        # float64 sums: float32 row scores (0/1 for a class target) averaged in float32 put
        # 80/89 at 0.8988764286 instead of 0.8988764045
        return float(rows.scores[mask].mean(dtype=np.float64)) if mask.any() else None

    since = earlier_upto(plan.since_dataset_version, plan.dataset_version)
    earlier = rows.versions <= since if since is not None else np.zeros(len(rows), bool)
    by_version, counts = {}, {}
    for v in np.unique(rows.versions).tolist():
        m = rows.versions == v
        by_version[str(v)] = float(rows.scores[m].mean(dtype=np.float64))
        counts[str(v)] = int(m.sum())
    grown = known is not None and bool((rows.labels >= known).any())
    old = mean(rows.labels < known) if grown and known is not None else None
    new = mean(rows.labels >= known) if grown and known is not None else None
    return EvalResult(mean(np.ones(len(rows), bool)), len(rows), mean(~earlier),
                      mean(earlier) if since is not None else None, by_version, counts,
                      metrics or {}, primary, old, new, rows)


def _gather(part: RowScores) -> RowScores:
    if not (tdist.is_initialized() and tdist.get_world_size() > 1):
        return part
    out: list[Any] = [None] * tdist.get_world_size()
    tdist.all_gather_object(out, part)
    return RowScores.concat(out)


def _row_ids(key: np.ndarray, hashes: Callable[[int], np.ndarray]) -> np.ndarray:
    ordinal, row = key >> 32, key & 0xFFFFFFFF
    ids = np.empty(len(key), np.uint64)
    for o in np.unique(ordinal).tolist():
        m = ordinal == o
        ids[m] = hashes(int(o))[row[m]]
    return ids


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch], plan: TrainPlan, place: Placement,
             objective: Objective, score: Callable[..., Any] | None = None,
             release: Callable[[Batch], None] = lambda b: None, *,
             hashes: Callable[[int], np.ndarray], known: int | None = None,
             parent_classes: int | None = None) -> EvalResult:
    """Row scores and metrics of ``model`` on the held-out rows ``batches`` yields (all
    ranks' shares); ``score``: the user's hook, replacing the kind's row score.

    ``hashes(ordinal)``: the id hashes of the plan's shard at that ordinal (row identity).
    ``known``: score only the first ``known`` outputs (the parent inside a grown head).
    ``parent_classes``: the parent's class count, to report old and new classes apart."""
    versions = np.array([s.dataset_version for s in plan.shards], np.int64)
    sums = torch.zeros(objective.sums_size(), dtype=torch.float64, device=place.device)
    names, target = [f.name for f in objective_fields(model)], objective.target.name
    parts: list[RowScores] = []
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            on_device = {k: place.to_device(v) if isinstance(v, torch.Tensor) else v
                         for k, v in batch.items()}
            y = on_device[target]
            with place.autocast():
                if score is None:
                    out = model({n: on_device[n] for n in names}).float()
                    if known is not None:
                        out = out[:, :known]
                    rows = objective.row_score(out, y)
                    if known is None:
                        sums += objective.sums(out, y)
                else:
                    rows = torch.as_tensor(score(model, on_device)).float().reshape(-1)
            key = batch["key"].numpy()
            labels = batch[target].numpy() if objective.kind == "class" else \
                np.full(len(key), -1)
            parts.append(RowScores(_row_ids(key, hashes), rows.float().cpu().numpy(),
                                   versions[key >> 32].astype(np.int32),
                                   labels.astype(np.int64)))
            release(batch)
    finally:
        model.train(was_training)
    sums = all_sum(sums)
    got = _gather(RowScores.concat(parts))
    mean = got.mean()
    metrics, primary = ({"score": mean}, "score") if score is not None or known is not None \
        else (objective.metrics(sums), objective.primary)
    return summarise(got, plan, parent_classes, metrics, primary)


def objective_fields(model: nn.Module) -> tuple[FieldInfo, ...]:
    """The input fields of the (possibly compiled / DDP-wrapped) preprocessing wrapper."""
    inner = getattr(model, "module", model)
    inner = getattr(inner, "_orig_mod", inner)
    info = getattr(inner, "info", None)
    if not isinstance(info, DatasetInfo):
        raise TypeError(f"evaluate takes the trainer's Preprocessed model, got "
                        f"{type(inner).__name__}")
    return info.fields
