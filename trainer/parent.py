"""Where a run starts: the promoted model (weights + optimizer state) or scratch.

The parent is the model the ``promoted.json`` pointer names. Its weights and AdamW state are
resumed when its architecture equals this run's; otherwise the run trains from scratch on
every shard (and says why), while the promoted model is still evaluated for the gate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from shardline.trainer.accel import optimizer_kwargs
from shardline.trainer.checkpoint import CheckpointError, load_model_tensors, load_optimizer_parts
from shardline.trainer.model import arch_problem, build_model
from shardline.trainer.registry import ModelRegistry, Promoted
from shardline.trainer.trust import UntrustedInput

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Start:
    promoted: Promoted | None
    parent_meta: dict[str, Any] | None
    from_parent: bool               # weights + optimizer state come from the parent
    since_dataset_version: int | None  # dataset version the start point was trained on
    reason: str

    @property
    def parent_number(self) -> int | None:
        return self.promoted.number if self.promoted else None


def resolve_start(registry: ModelRegistry, spec: dict[str, Any]) -> Start:
    promoted = registry.promoted()
    if promoted is None:
        return Start(None, None, False, None, "no promoted model yet: training from scratch")
    meta = registry.meta(promoted.number)
    if meta.get("arch") != spec:
        return Start(promoted, meta, False, None,
                     f"promoted model {promoted.number} has architecture {meta.get('arch')}, "
                     f"this run {spec}: training from scratch on all data")
    since = meta.get("dataset_version")
    if isinstance(since, bool) or not isinstance(since, int) or since <= 0:
        raise UntrustedInput(
            f"{registry.uri(promoted.number)}meta.json: dataset_version = {since!r} is not a "
            f"positive integer (model {promoted.number}); restore meta.json or point "
            "promoted.json at another model number")
    return Start(promoted, meta, True, since,
                 f"continuing from promoted model {promoted.number} (trained on dataset "
                 f"v{meta['dataset_version']})")


def make_optimizer(model: nn.Module, lr: float, weight_decay: float,
                   impl: str = "for-loop") -> torch.optim.Optimizer:
    """AdamW over ``model``'s parameters (already on their device), implemented by ``impl``
    (``fused`` / ``foreach`` / ``for-loop``, see ``trainer.accel``)."""
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay,
                             **optimizer_kwargs(impl))


def load_parent(model: nn.Module, opt: torch.optim.Optimizer, registry: ModelRegistry,
                start: Start) -> None:
    """Parent weights and optimizer state into a freshly built model/optimizer."""
    if start.promoted is None or start.parent_meta is None:
        raise ValueError("load_parent needs a start with a promoted parent")
    v = start.promoted.number
    load_model_tensors(model, registry.weights(v), registry.uri(v))
    try:
        load_optimizer_parts(opt, registry.optimizer(v), start.parent_meta["optimizer_state"],
                             registry.uri(v))
    except (CheckpointError, KeyError) as exc:
        log.warning("optimizer state of model %d not resumed (%s); starting AdamW fresh", v, exc)


def promoted_model(registry: ModelRegistry, start: Start,
                   spec: dict[str, Any]) -> nn.Module | None:
    """The promoted model on its own architecture (for the before/gate evaluation); None if
    there is none or it takes other inputs/classes than this dataset now has."""
    if start.promoted is None or start.parent_meta is None:
        return None
    theirs = start.parent_meta.get("arch")
    if not isinstance(theirs, dict):
        theirs = {}
    if (theirs.get("shape"), theirs.get("classes")) != (spec["shape"], spec["classes"]):
        log.warning("promoted model %d takes %s images / %s classes, the dataset now has %s / "
                    "%s: it cannot be compared", start.promoted.number, theirs.get("shape"),
                    theirs.get("classes"), spec["shape"], spec["classes"])
        return None
    problem = arch_problem(theirs)
    if problem:
        raise UntrustedInput(f"{registry.uri(start.promoted.number)}meta.json: arch of model "
                             f"{start.promoted.number} is refused: {problem}; restore "
                             "meta.json or point promoted.json at another model number")
    model = build_model(theirs)
    try:
        load_model_tensors(model, registry.weights(start.promoted.number),
                           registry.uri(start.promoted.number))
    except CheckpointError as exc:
        log.warning("promoted model %d cannot be evaluated: %s", start.promoted.number, exc)
        return None
    return model
