"""Where a run starts: the promoted model (weights + optimizer state) or scratch.

The parent is the model the ``promoted.json`` pointer names. Its weights and AdamW state are
resumed when it was built the way this run builds its model (``trainer.factory``: the same
factory, args, fields and target kind); otherwise the warm start is refused with one line
naming what differs, and the run trains from scratch on every shard, while the promoted
model is still evaluated for the gate where this run's code can build it.

Classes that grow: when the dataset's class list extends the parent's (classes appended at
the end; the build records' ``target.classes``), the parent is resumed into a wider head
(``trainer.grow``); a class removed or reordered is refused (``ClassListChanged``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from shardline.core.errors import ConfigError
from shardline.core.fields import DatasetInfo
from shardline.trainer.accel import optimizer_kwargs
from shardline.trainer.checkpoint import CheckpointError, load_model_tensors, load_optimizer_parts
from shardline.trainer.factory import BUILTIN, build_with, differences, resolve
from shardline.trainer.grow import class_growth, grow_moments, grow_tensors
from shardline.trainer.preprocess import Preprocessed
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
    parent_classes: int | None = None  # the parent's class count when the head grows

    @property
    def parent_number(self) -> int | None:
        return self.promoted.number if self.promoted else None


def resolve_start(registry: ModelRegistry, spec: dict[str, Any]) -> Start:
    """Warm start from the promoted model if it was built like ``spec`` (this run's
    ``factory.build_record``), else scratch with the reason (one line); into a wider head
    when classes were appended.

    Raises:
        ClassListChanged: this run's classes do not extend the parent's.
        UntrustedInput: the parent's meta.json breaks the rules."""
    promoted = registry.promoted()
    if promoted is None:
        return Start(None, None, False, None, "no promoted model yet: training from scratch")
    meta = registry.meta(promoted.number)
    grown = class_growth(meta.get("build"), spec, f"{registry.uri(promoted.number)}meta.json")
    differ = differences(meta.get("build"), spec)
    if differ:
        return Start(promoted, meta, False, None,
                     f"warm start from promoted model {promoted.number} refused: it was built "
                     f"differently ({'; '.join(differ)}); training from scratch on all data")
    since = meta.get("dataset_version")
    if isinstance(since, bool) or not isinstance(since, int) or since <= 0:
        raise UntrustedInput(
            f"{registry.uri(promoted.number)}meta.json: dataset_version = {since!r} is not a "
            f"positive integer (model {promoted.number}); restore meta.json or point "
            "promoted.json at another model number")
    how = "" if grown is None else (
        f", growing its head from {grown[0]} to {len(grown[1])} classes (new: "
        f"{', '.join(repr(c) for c in grown[1][grown[0]:])})")
    return Start(promoted, meta, True, since,
                 f"continuing from promoted model {promoted.number} (trained on dataset "
                 f"v{since}){how}", None if grown is None else grown[0])


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
    tensors = registry.weights(v)
    if start.parent_classes is not None:
        tensors = grow_tensors(model, tensors, start.parent_classes, registry.uri(v))
    load_model_tensors(model, tensors, registry.uri(v))
    try:
        moments, rest = registry.optimizer(v), start.parent_meta["optimizer_state"]
        if start.parent_classes is not None:
            moments = grow_moments(opt, moments, rest, start.parent_classes)
        load_optimizer_parts(opt, moments, rest, registry.uri(v))
    except (CheckpointError, KeyError) as exc:
        log.warning("optimizer state of model %d not resumed (%s); starting AdamW fresh", v, exc)


def promoted_model(registry: ModelRegistry, start: Start, spec: dict[str, Any],
                   info: DatasetInfo) -> nn.Module | None:
    """The promoted model on its own args (for the before/gate evaluation), built by *this
    run's* factory: None if there is none, another factory built it (its code is never
    imported from the registry), it takes other fields or another target, or a user
    factory would need other args (only a built-in's args, bounded, are read back)."""
    if start.promoted is None or start.parent_meta is None:
        return None
    n = start.promoted.number
    theirs = start.parent_meta.get("build")
    if not isinstance(theirs, dict):
        theirs = {}
    same_data = differences(theirs, {**spec, "args": theirs.get("args")}) == []
    args = theirs.get("args")
    if not same_data or not isinstance(args, dict) or (
            args != spec["args"] and not spec["factory"].startswith(BUILTIN + ":")):
        log.warning("promoted model %d cannot be rebuilt by this run's code (%s); it is "
                    "compared through its record only", n,
                    "; ".join(differences(theirs, spec)) or "no build record")
        return None
    try:
        net = build_with(resolve(spec["factory"]), spec["factory"], args, info)
    except ConfigError as exc:
        raise UntrustedInput(f"{registry.uri(n)}meta.json: the build args of model {n} are "
                             f"refused: {exc}; restore meta.json or point promoted.json at "
                             "another model number") from exc
    model = Preprocessed(net, info)
    try:
        load_model_tensors(model, registry.weights(n), registry.uri(n))
    except CheckpointError as exc:
        log.warning("promoted model %d cannot be evaluated: %s", n, exc)
        return None
    return model
