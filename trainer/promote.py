"""Promotion: the gate's inputs read from the registry, and moving the ``promoted.json``
pointer.

The decision itself is ``trainer.gate`` (pure, over per-row scores). Here it gets its
evidence, O(held-out rows) per run:

- the candidate's and the live model's per-row scores on this run's held-out rows (both
  evaluated in this run: ``before`` and ``after``);
- the *best* promoted model's stored per-row scores (``trainer.rows``), when it is not the
  live model. The pointer names it (``"best"``): a promoted candidate becomes the best when
  it scored at least as well on the best's rows (``gate.next_best``); a pointer written
  before that names none, and the promoted model with the highest recorded held-out metric
  is taken.

Moving the pointer is a compare-and-swap (``ModelRegistry.promote``): a promotion decided
against a stale view of the pointer fails, and the decision then says so instead of
overwriting a newer one. Saving the candidate's files is ``trainer.candidate``'s business;
this module only decides and moves the pointer.
"""

from __future__ import annotations

import logging
from typing import Any

from shardline.core.config import TrainConfig
from shardline.core.errors import ObjectChanged, ObjectExists, StoreError
from shardline.trainer.evaluate import EvalResult, earlier_upto
from shardline.trainer.gate import Decision, Rules, gate, next_best
from shardline.trainer.parent import Start
from shardline.trainer.registry import ModelRegistry, Promoted
from shardline.trainer.registry import history as history  # read here, kept importable
from shardline.trainer.rows import RowScores, load_rows
from shardline.trainer.trust import UntrustedInput

__all__ = ["Decision", "best_number", "decide", "history", "promote"]

log = logging.getLogger(__name__)


# -- reading the registry ------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _recorded(meta: dict[str, Any]) -> float | None:
    acc = ((meta.get("metrics") or {}).get("after") or {}).get("accuracy")
    return float(acc) if isinstance(acc, int | float) and not isinstance(acc, bool) else None


def best_number(registry: ModelRegistry, promoted: Promoted | None) -> int | None:
    """The promoted model candidates are held to besides the live one (module docstring)."""
    if promoted is None:
        return None
    ever = history(promoted)
    best = promoted.pointer.get("best")
    if _is_number(best) and best in ever:
        return int(best)
    scored = []
    for n in ever:
        try:
            acc = _recorded(registry.meta(n))
        except (StoreError, UntrustedInput) as exc:
            log.warning("gate: promoted model %d has no readable meta.json (%s); skipped", n, exc)
            continue
        if acc is not None:
            scored.append((acc, n))
    return max(scored)[1] if scored else promoted.number


def _stored_rows(registry: ModelRegistry, n: int) -> RowScores | None:
    try:
        return load_rows(registry, n)
    except (StoreError, UntrustedInput) as exc:
        log.warning("gate: per-row results of promoted model %d cannot be read (%s); it is "
                    "not compared", n, exc)
        return None


def rules(train: TrainConfig, metric: str = "accuracy", variance: float | None = None) -> Rules:
    return Rules(alpha=train.gate_alpha, tolerance=train.promote_tolerance,
                 forget_tolerance=train.forget_tolerance, metric=metric, variance=variance)


def decide(registry: ModelRegistry, start: Start, before: EvalResult | None,
           after: EvalResult, train: TrainConfig, dataset_version: int,
           metric: str = "accuracy", variance: float | None = None) -> Decision:
    """The gate for this run's candidate (``after``, trained on ``dataset_version``)
    against the live promoted model (``before``, evaluated on this run's rows) and the best
    promoted model's stored rows. Earlier data: the rows the evaluation counts as such.
    ``variance``: a regression target's recorded variance (``Rules.variance``)."""
    live_n = start.parent_number
    live = (live_n, before.rows) if live_n is not None and before is not None \
        and before.rows is not None else None
    best = best_number(registry, start.promoted)
    others: list[tuple[int, RowScores]] = []
    if best is not None and best != live_n:
        rows = _stored_rows(registry, best)
        if rows is not None:
            others.append((best, rows))
    upto = earlier_upto(start.since_dataset_version, dataset_version)
    decision = gate(after.rows, live, others, upto, rules(train, metric, variance),
                    after.rows_known, start.parent_classes)
    if start.promoted is not None and live is None:
        decision = Decision(decision.promote, f"{_not_scored(start)}; {decision.reason}",
                            decision.evidence)
    return decision


def _not_scored(start: Start) -> str:
    """Why the live model has no scores on this run's rows (the reason's first clause)."""
    n = start.parent_number
    build = (start.parent_meta or {}).get("build")
    factory = build.get("factory") if isinstance(build, dict) else None
    if not start.from_parent:
        return (f"live model {n} (built by {factory or 'a factory it does not record'}) is "
                "not scored on these rows: it was built differently and this run's code does "
                "not rebuild it (code is never imported from the registry)")
    return f"live model {n} could not be scored on these rows"


def promote(registry: ModelRegistry, model_number: int, start: Start, decision: Decision,
            accuracy: float | None, dataset_version: int) -> Decision:
    """Point ``promoted.json`` at ``model_number`` if ``decision`` says so and the pointer
    is still what ``start`` read; returns the final decision (refused on a lost race). The
    pointer carries the list of every model number ever promoted (``"history"``) and the
    best one later candidates are held to (``"best"``, see :func:`gate.next_best`)."""
    if not decision.promote:
        return decision
    best = next_best(decision, model_number, start.parent_number,
                     best_number(registry, start.promoted))
    try:
        registry.promote(model_number, start.promoted,
                         {"accuracy": accuracy, "dataset_version": dataset_version,
                          "history": [*history(start.promoted), model_number], "best": best})
    except (ObjectExists, ObjectChanged) as exc:
        return Decision(False, f"gate passed but another run moved the promoted pointer "
                               f"meanwhile ({exc}); re-run training to compare against the "
                               "new promoted model")
    return decision
