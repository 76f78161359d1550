"""What a training run returns (and what the CLI prints as JSON).

``model_version`` / ``parent_model_version`` are model numbers (the registry's
``NNNNNN``); the field names are the CLI's and the flow's published JSON keys and keep
their first spelling. ``dataset_version`` is the dataset version trained on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainResult:
    dataset: str
    model: str
    model_version: int                 # the model number of the saved candidate
    dataset_version: int
    parent_model_version: int | None   # the model number trained on from, if any
    samples_seen: int
    new_samples: int                   # per epoch, all ranks
    replay_samples: int                # per epoch, all ranks
    epochs: int
    eval_accuracy: float | None
    accuracy_before: float | None
    promoted: bool
    decision: str
    checkpoint: str
    start: str
    loader_samples_per_s: float
    train_samples_per_s: float
    data_wait_share: float
    resumed_at_step: int | None = None
    eval: dict[str, Any] = field(default_factory=dict)
    eval_before: dict[str, Any] | None = None
    curve_steps: list[dict[str, Any]] = field(default_factory=list)
    curve_epochs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def held_out_primary(after: dict[str, Any] | None, before: dict[str, Any] | None,
                     accuracy_before: float | None, accuracy_after: float | None
                     ) -> tuple[str, float | None, float | None]:
    """(name, live model's value, candidate's value) of the held-out figure a run reports
    (``after``/``before``: a :class:`TrainResult`'s ``eval``/``eval_before``): the accuracy
    for a class target, else the kind's primary metric (``rmse``, ``map``), never the mean
    row score under the accuracy's name."""
    primary = (after or {}).get("primary", "accuracy")
    if primary == "accuracy":
        return "accuracy", accuracy_before, accuracy_after

    def value(ev: dict[str, Any] | None) -> float | None:
        return ((ev or {}).get("metrics") or {}).get(primary)
    return primary, value(before), value(after)
