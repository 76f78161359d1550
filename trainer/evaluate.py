"""Held-out evaluation (the gate that uses it is ``trainer.promote``).

Each row gets the target kind's row score (``trainer.objectives``: 1/0 for a class, higher
is better for every kind), or the user's ``score`` hook's; ``accuracy`` below is the mean
row score (for a class target, the accuracy), and ``metrics`` the kind's full metrics
(accuracy and macro-F1; micro/macro-F1 and mAP; RMSE, MAE and R²) with ``primary`` naming
the one the kind leads with.

The row score is counted per dataset version (the version whose batch added the shard), summed
over ranks, then reported overall, on this run's new data, and on *earlier* data (shards
the parent model had already been trained on): the last one, compared before and after
training, is the forgetting measure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from shardline.core.fields import DatasetInfo, FieldInfo
from shardline.trainer.device import Placement
from shardline.trainer.dist import all_sum
from shardline.trainer.objectives import Objective
from shardline.trainer.plan import TrainPlan
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

    def accuracy_on(self, versions: Iterable[int]) -> float | None:
        """Sample-weighted accuracy over some dataset versions' held-out rows."""
        keys = [str(v) for v in versions if str(v) in self.by_version]
        n = sum(self.samples_by_version.get(k, 0) for k in keys)
        hits = sum(self.by_version[k] * self.samples_by_version.get(k, 0) for k in keys)
        return hits / n if n else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio(correct: float, total: float) -> float | None:
    return float(correct / total) if total else None


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch], plan: TrainPlan, place: Placement,
             objective: Objective, score: Callable[..., Any] | None = None,
             release: Callable[[Batch], None] = lambda b: None) -> EvalResult:
    """Row scores and metrics of ``model`` on the held-out rows ``batches`` yields (all
    ranks' shares); ``score``: the user's hook, replacing the kind's row score."""
    versions = np.array([s.dataset_version for s in plan.shards], np.int64)
    is_new = np.array([s.role == "new" for s in plan.shards], bool)
    top = int(versions.max()) + 1 if len(versions) else 1
    # counts[v] = (correct, total) per version; [top + 0/1] = (earlier, new)
    counts = torch.zeros(top + 2, 2, dtype=torch.float64)
    sums = torch.zeros(objective.sums_size(), dtype=torch.float64, device=place.device)
    names, target = [f.name for f in objective_fields(model)], objective.target.name
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
                    rows = objective.row_score(out, y)
                    sums += objective.sums(out, y)
                else:
                    rows = torch.as_tensor(score(model, on_device)).float().reshape(-1)
            hit = rows.double().cpu().numpy()
            ordinal = (batch["key"].numpy() >> 32).astype(np.int64)
            release(batch)
            v = versions[ordinal]
            counts[:top, 0] += torch.from_numpy(np.bincount(v, hit, minlength=top))
            counts[:top, 1] += torch.from_numpy(np.bincount(v, minlength=top).astype(np.float64))
            g = is_new[ordinal].astype(np.int64)
            counts[top:, 0] += torch.from_numpy(np.bincount(g, hit, minlength=2))
            counts[top:, 1] += torch.from_numpy(np.bincount(g, minlength=2).astype(np.float64))
    finally:
        model.train(was_training)
    counts = all_sum(counts.to(place.device)).cpu()
    sums = all_sum(sums)
    total = counts[:top].sum(0)
    per_version = [(str(v), c, n) for v, (c, n) in enumerate(counts[:top].tolist()) if n]
    earlier = _ratio(*counts[top].tolist()) if plan.since_dataset_version is not None else None
    mean = _ratio(*total.tolist())
    metrics, primary = ({"score": mean}, "score") if score is not None else \
        (objective.metrics(sums), objective.primary)
    return EvalResult(mean, int(total[1]), _ratio(*counts[top + 1].tolist()),
                      earlier, {v: c / n for v, c, n in per_version},
                      {v: int(n) for v, _, n in per_version}, metrics, primary)


def objective_fields(model: nn.Module) -> tuple[FieldInfo, ...]:
    """The input fields of the (possibly compiled / DDP-wrapped) preprocessing wrapper."""
    inner = getattr(model, "module", model)
    inner = getattr(inner, "_orig_mod", inner)
    info = getattr(inner, "info", None)
    if not isinstance(info, DatasetInfo):
        raise TypeError(f"evaluate takes the trainer's Preprocessed model, got "
                        f"{type(inner).__name__}")
    return info.fields
