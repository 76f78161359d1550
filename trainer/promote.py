"""Promotion: the gate's decision, and moving the ``promoted.json`` pointer.

The gate promotes a candidate unless its held-out accuracy is worse than the promoted
model's by more than ``train.promote_tolerance``. Moving the pointer is a compare-and-swap
(``ModelRegistry.promote``): a promotion decided against a stale view of the pointer fails,
and the decision then says so instead of overwriting a newer one. Saving the candidate's
files is ``trainer.candidate``'s business; this module only decides and moves the pointer.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardline.core.errors import ObjectChanged, ObjectExists
from shardline.trainer.evaluate import EvalResult
from shardline.trainer.parent import Start
from shardline.trainer.registry import ModelRegistry


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str


def gate(candidate: float | None, promoted: float | None, tolerance: float) -> Decision:
    """Promote unless the candidate is worse than the promoted model beyond ``tolerance``."""
    if candidate is None:
        return Decision(False, "no held-out samples to evaluate the candidate on; keeping the "
                               "promoted model (raise train.holdout_fraction)")
    if promoted is None:
        return Decision(True, f"first model: held-out accuracy {candidate:.4f}")
    if candidate + tolerance >= promoted:
        return Decision(True, f"held-out accuracy {candidate:.4f} vs promoted {promoted:.4f} "
                              f"(within tolerance {tolerance})")
    return Decision(False, f"held-out accuracy {candidate:.4f} is worse than the promoted "
                           f"model's {promoted:.4f} by more than tolerance {tolerance}; "
                           "keeping the promoted model")


def decide(start: Start, before: EvalResult | None, after: EvalResult,
           tolerance: float) -> Decision:
    """The gate for this run's candidate (``after``) against the promoted model (``before``).

    A promoted model that could not be evaluated on this data (other input shape or classes)
    does not block: the candidate is promoted when it has an accuracy at all."""
    if start.promoted is not None and before is None:
        ok = after.accuracy is not None
        return Decision(ok, f"promoted model {start.parent_number} cannot be evaluated on "
                            f"this data (other input shape or classes); candidate accuracy "
                            f"{after.accuracy}" + ("" if ok else ": nothing to evaluate"))
    return gate(after.accuracy, before.accuracy if before else None, tolerance)


def promote(registry: ModelRegistry, model_number: int, start: Start, decision: Decision,
            accuracy: float | None, dataset_version: int) -> Decision:
    """Point ``promoted.json`` at ``model_number`` if ``decision`` says so and the pointer
    is still what ``start`` read; returns the final decision (refused on a lost race)."""
    if not decision.promote:
        return decision
    try:
        registry.promote(model_number, start.promoted,
                         {"accuracy": accuracy, "dataset_version": dataset_version})
    except (ObjectExists, ObjectChanged) as exc:
        return Decision(False, f"gate passed but another run moved the promoted pointer "
                               f"meanwhile ({exc}); re-run training to compare against the "
                               "new promoted model")
    return decision
