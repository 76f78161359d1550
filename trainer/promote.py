"""Promotion: the gate's decision, and moving the ``promoted.json`` pointer.

The gate promotes a candidate only if all three hold (``gate``):

1. **Live model**: its held-out accuracy is not worse than the promoted model's, evaluated
   on this run's held-out rows, by more than ``train.promote_tolerance``.
2. **Best promoted (no ratchet)**: for *every* model ever promoted (the pointer keeps the
   list under ``"history"``), its recorded held-out accuracy (``meta.json``) is not above
   the candidate's accuracy on the *same* held-out rows (the same dataset versions' rows:
   the split is a fixed function of each row) by more than ``train.promote_tolerance``. So
   the candidate is held to the best model ever promoted, not only to the last one, and a
   string of promotions each just inside the tolerance cannot drift downwards: the floor is
   ``best - promote_tolerance`` forever.
3. **Forgetting**: on earlier data (held-out rows of the dataset versions up to the one the
   promoted model was trained on) the candidate's accuracy is not below the promoted
   model's by more than ``train.forget_tolerance``.

Moving the pointer is a compare-and-swap (``ModelRegistry.promote``): a promotion decided
against a stale view of the pointer fails, and the decision then says so instead of
overwriting a newer one. Saving the candidate's files is ``trainer.candidate``'s business;
this module only decides and moves the pointer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shardline.core.config import TrainConfig
from shardline.core.errors import ObjectChanged, ObjectExists, StoreError
from shardline.trainer.evaluate import EvalResult
from shardline.trainer.parent import Start
from shardline.trainer.registry import ModelRegistry, Promoted
from shardline.trainer.trust import UntrustedInput

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str


@dataclass(frozen=True)
class Mark:
    """A promoted model's recorded held-out accuracy, and the candidate's on the same rows."""

    number: int
    accuracy: float
    candidate: float | None


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def gate(candidate: float | None, promoted: float | None, tolerance: float, *,
         marks: Sequence[Mark] = (), earlier: tuple[float | None, float | None] = (None, None),
         forget_tolerance: float = 0.01) -> Decision:
    """The decision over plain numbers (see the module docstring for the three rules).

    ``promoted``: the live promoted model's accuracy on this run's held-out rows (None: no
    promoted model, or it cannot be evaluated here). ``marks``: every promoted model's
    recorded accuracy with the candidate's on the same rows. ``earlier``: (candidate,
    promoted) accuracy on earlier data."""
    if candidate is None:
        return Decision(False, "no held-out samples to evaluate the candidate on; keeping the "
                               "promoted model (raise train.holdout_fraction)")
    if promoted is None and not marks:
        return Decision(True, f"first model: held-out accuracy {candidate:.4f}")
    if promoted is not None and candidate + tolerance < promoted:
        return Decision(False, f"held-out accuracy {candidate:.4f} is worse than the promoted "
                               f"model's {promoted:.4f} by more than tolerance {tolerance} "
                               "(train.promote_tolerance); keeping the promoted model")
    worst = max(marks, default=None,
                key=lambda m: m.accuracy - (candidate if m.candidate is None else m.candidate))
    if worst is not None:
        mine = candidate if worst.candidate is None else worst.candidate
        if mine + tolerance < worst.accuracy:
            return Decision(False, f"held-out accuracy {mine:.4f} is worse than the best "
                                   f"promoted model {worst.number}'s {worst.accuracy:.4f} on "
                                   f"the same rows by more than tolerance {tolerance} "
                                   "(train.promote_tolerance); keeping the promoted model")
    mine_e, theirs_e = earlier
    if mine_e is not None and theirs_e is not None and mine_e + forget_tolerance < theirs_e:
        return Decision(False, f"accuracy on earlier data {mine_e:.4f} dropped below the "
                               f"promoted model's {theirs_e:.4f} by more than tolerance "
                               f"{forget_tolerance} (train.forget_tolerance: forgetting); "
                               "keeping the promoted model")
    best = f", best promoted {worst.number}: {worst.accuracy:.4f}" if worst else ""
    return Decision(True, f"held-out accuracy {candidate:.4f} vs promoted {_f(promoted)}"
                          f"{best}, earlier data {_f(mine_e)} vs {_f(theirs_e)} (within "
                          f"tolerances {tolerance} / forgetting {forget_tolerance})")


# -- reading the registry ------------------------------------------------------------------
def history(promoted: Promoted | None) -> list[int]:
    """Model numbers ever promoted, oldest first (a pointer written before the history was
    kept counts its own model only)."""
    if promoted is None:
        return []
    raw = promoted.pointer.get("history")
    past = [n for n in raw if isinstance(n, int) and not isinstance(n, bool) and n > 0] \
        if isinstance(raw, list) else []
    return past if promoted.number in past else [*past, promoted.number]


def _recorded(meta: dict[str, Any]) -> tuple[float, dict[str, float], dict[str, int]] | None:
    after = (meta.get("metrics") or {}).get("after") or {}
    acc = after.get("accuracy")
    if not isinstance(acc, int | float) or isinstance(acc, bool):
        return None
    return float(acc), dict(after.get("by_version") or {}), \
        dict(after.get("samples_by_version") or {})


def marks(registry: ModelRegistry, numbers: Iterable[int], after: EvalResult,
          holdout_fraction: float) -> list[Mark]:
    """A :class:`Mark` per promoted model whose meta.json records a held-out accuracy taken
    with this run's holdout fraction (other fractions hold out other rows: skipped)."""
    out = []
    for n in numbers:
        try:
            meta = registry.meta(n)
        except (StoreError, UntrustedInput) as exc:
            log.warning("gate: promoted model %d has no readable meta.json (%s); skipped", n, exc)
            continue
        frac = ((meta.get("config") or {}).get("train") or {}).get("holdout_fraction")
        rec = _recorded(meta)
        if rec is None or (frac is not None and frac != holdout_fraction):
            continue
        acc, by_version, samples = rec
        mine = (after.accuracy_on(int(v) for v in by_version) if samples
                else after.accuracy)
        out.append(Mark(n, acc, mine))
    return out


def decide(registry: ModelRegistry, start: Start, before: EvalResult | None,
           after: EvalResult, train: TrainConfig) -> Decision:
    """The gate for this run's candidate (``after``) against the live promoted model
    (``before``, evaluated on this run's rows), every promoted model's record, and earlier
    data. A promoted model that could not be evaluated on this data (other input shape or
    classes) is compared through its record only."""
    ms = marks(registry, history(start.promoted), after, train.holdout_fraction)
    earlier: tuple[float | None, float | None] = (None, None)
    if before is not None:
        since = (start.parent_meta or {}).get("dataset_version")
        if isinstance(since, int) and not isinstance(since, bool):
            old = [v for v in range(1, since + 1)]
            earlier = (after.accuracy_on(old), before.accuracy_on(old))
    decision = gate(after.accuracy, before.accuracy if before else None,
                    train.promote_tolerance, marks=ms, earlier=earlier,
                    forget_tolerance=train.forget_tolerance)
    if start.promoted is not None and before is None:
        decision = Decision(decision.promote, f"promoted model {start.parent_number} cannot "
                            "be evaluated on this data (other input shape or classes); "
                            + decision.reason)
    return decision


def promote(registry: ModelRegistry, model_number: int, start: Start, decision: Decision,
            accuracy: float | None, dataset_version: int) -> Decision:
    """Point ``promoted.json`` at ``model_number`` if ``decision`` says so and the pointer
    is still what ``start`` read; returns the final decision (refused on a lost race). The
    pointer carries the list of every model number ever promoted (``"history"``)."""
    if not decision.promote:
        return decision
    try:
        registry.promote(model_number, start.promoted,
                         {"accuracy": accuracy, "dataset_version": dataset_version,
                          "history": [*history(start.promoted), model_number]})
    except (ObjectExists, ObjectChanged) as exc:
        return Decision(False, f"gate passed but another run moved the promoted pointer "
                               f"meanwhile ({exc}); re-run training to compare against the "
                               "new promoted model")
    return decision
