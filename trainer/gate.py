"""The gate's decision over per-row evidence: pure, no registry, no model.

A candidate is compared with the models it would replace *on the same held-out rows*
(``trainer.paired``: McNemar mid-p for correct/incorrect rows, a paired bootstrap for any
other per-row score) and refused only for a drop the rows show with confidence to be at
least the tolerance (the smallest drop that matters): one-sided p below ``alpha`` and the
upper end of the ``1 - 2 alpha`` interval at least the tolerance below zero:

1. **Live model**, on this run's whole held-out set (old and new data): ``tolerance``.
2. **Earlier promoted models** (no ratchet), each on the rows it was scored on when it was
   promoted (its stored per-row results): ``tolerance``, at ``alpha / k`` for ``k`` such
   models (Bonferroni: holding the candidate to the best of many models must not make a
   false refusal more likely). The reason names the one closest to refusing.
3. **Forgetting**: the live model on earlier data (rows of the dataset versions the live
   model was trained on): ``forget_tolerance``. When the class list grew, the live model
   could only answer among its own classes; the candidate is then asked the same question
   on those rows (its outputs for the parent's classes only), so a harder question (more
   classes to choose from) is not mistaken for forgetting.

So a candidate that is better on the data as it is now is not vetoed by a drop within
noise on old rows, and a string of small, individually insignificant losses still meets
rule 2 once the rows show it. Quantities carry the names the registry's table uses
("held-out accuracy", "earlier data accuracy"), in percent for an accuracy.

What is compared is the kind's per-row score (``objectives.Objective.row_score``), the only
score every row has on its own: accuracy for a class target (its primary metric), the
row's F1 for multilabel (mAP, the primary, ranks all rows per class and has no per-row
share), and for regression minus the row's squared error divided by the target's recorded
variance (``Rules.variance``, from the dataset version's statistics), plus one: a row's
share of R², so the tolerances are R² points whatever the target's units (0.01: a rise of
the MSE by 1 % of the variance). Without a recorded variance the squared error is compared
as it is ("negative MSE", tolerances in squared target units).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from shardline.trainer.paired import Paired, compare
from shardline.trainer.rows import RowScores


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    evidence: list[dict[str, Any]] = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class Rules:
    alpha: float = 0.05
    tolerance: float = 0.01          # smallest drop that matters on the held-out set
    forget_tolerance: float = 0.01   # ... on earlier data
    metric: str = "accuracy"         # the per-row score's name (``score_name``)
    variance: float | None = None    # regression: the target's recorded variance; rows are
                                     # compared as 1 - squared error / variance (R² shares)


@dataclass(frozen=True)
class Check:
    against: str          # "live model 4", "promoted model 2"
    scope: str            # "held-out" or "earlier data"
    result: Paired
    alpha: float
    tolerance: float

    @property
    def refuses(self) -> bool:
        return self.result.worse(self.alpha, self.tolerance)


# the mean of a kind's per-row score (``Objective.row_score``), by the name the gate uses
SCORE_NAMES = {"class": "accuracy", "mask": "pixel accuracy", "multilabel": "row F1",
               "regression": "negative MSE"}
SCALED = "R² (recorded variance)"    # regression rows over the target's variance
_FRACTIONS = ("accuracy", "pixel accuracy", "row F1", SCALED)


def score_name(kind: str, variance: float | None = None) -> str:
    """The gate's name for the mean of a kind's row score (``variance``: the regression
    target's recorded variance, when the rows are compared over it)."""
    if kind == "regression" and variance is not None:
        return SCALED
    return SCORE_NAMES.get(kind, "row score")


def on_scale(rows: RowScores, variance: float | None) -> RowScores:
    """Regression rows (minus the squared error) as shares of R²: ``1 + score / variance``
    (``variance`` None: as they are). One variance for every model compared, so the
    difference between two models is their MSE difference over the variance."""
    if variance is None:
        return rows
    return replace(rows, scores=1.0 + rows.scores.astype(np.float64) / variance)


def is_fraction(metric: str) -> bool:
    """The score (by its gate name) lies in 0..1 and is shown in percent."""
    return metric in _FRACTIONS


def _value(x: float, metric: str) -> str:
    return f"{100 * x:.2f} %" if metric in _FRACTIONS else f"{x:.4g}"


def _diff(x: float, metric: str) -> str:
    return f"{100 * x:+.2f} points" if metric in _FRACTIONS else f"{x:+.4g}"


def describe(c: Check, metric: str) -> str:
    """One clause: the quantity by its table name, both values, the difference, its
    interval, the test's p and the rows compared."""
    r = c.result
    level = round(100 * (1 - 2 * c.alpha))
    return (f"{c.scope} {metric} {_value(r.candidate, metric)} vs {c.against}'s "
            f"{_value(r.reference, metric)} on the same {r.rows:,} rows: "
            f"{_diff(r.diff, metric)} ({level} % interval {_diff(r.low, metric)} to "
            f"{_diff(r.high, metric)}, {r.test} p={r.p_worse:.3g} for a drop)")


def _evidence(c: Check) -> dict[str, Any]:
    return {"against": c.against, "scope": c.scope, "alpha": c.alpha,
            "tolerance": c.tolerance, **asdict(c.result)}


def checks(candidate: RowScores, live: tuple[int, RowScores] | None,
           earlier_promoted: Sequence[tuple[int, RowScores]], since: int | None,
           rules: Rules, known: RowScores | None = None,
           known_classes: int | None = None) -> list[Check]:
    """Every paired comparison the gate makes (see the module docstring). ``known``: the
    candidate's scores on its first ``known_classes`` outputs (a grown head), used for the
    forgetting check, where the live model could only answer among those classes."""
    out: list[Check] = []
    if live is not None:
        n, rows = live
        got = compare(*candidate.paired(rows), rules.alpha)
        if got is not None:
            out.append(Check(f"live model {n}", "held-out", got, rules.alpha, rules.tolerance))
        if since is not None:
            mine = candidate if known is None else known
            got = compare(*mine.up_to(since).paired(rows.up_to(since)), rules.alpha)
            who = f"live model {n}" if known is None else \
                f"live model {n} (both answering among its {known_classes} classes)"
            if got is not None:
                out.append(Check(who, "earlier data", got, rules.alpha,
                                 rules.forget_tolerance))
    k = max(len(earlier_promoted), 1)
    for n, rows in earlier_promoted:
        got = compare(*candidate.paired(rows), rules.alpha / k)
        if got is not None:
            out.append(Check(f"promoted model {n}", "held-out", got, rules.alpha / k,
                             rules.tolerance))
    return out


def gate(candidate: RowScores | None, live: tuple[int, RowScores] | None,
         earlier_promoted: Sequence[tuple[int, RowScores]] = (), since: int | None = None,
         rules: Rules = Rules(), known: RowScores | None = None,
         known_classes: int | None = None) -> Decision:
    """Promote or not, and why, from per-row scores (higher is better).

    ``live``: (model number, its scores on this run's held-out rows), None when there is no
    live model or it could not be evaluated here. ``earlier_promoted``: (number, stored
    scores) of every other model ever promoted that kept per-row results. ``since``: the
    dataset version the live model was trained on (its rows up to it are earlier data)."""
    if candidate is None or not len(candidate):
        return Decision(False, "no held-out rows to evaluate the candidate on; keeping the "
                               "promoted model (raise train.holdout_fraction)")
    v = rules.variance
    candidate = on_scale(candidate, v)
    live = None if live is None else (live[0], on_scale(live[1], v))
    earlier_promoted = [(n, on_scale(r, v)) for n, r in earlier_promoted]
    known = None if known is None else on_scale(known, v)
    found = checks(candidate, live, earlier_promoted, since, rules, known, known_classes)
    evidence = [_evidence(c) for c in found]
    mean = candidate.mean()
    assert mean is not None
    if not found:
        what = "first model" if live is None and not earlier_promoted else \
            "no promoted model could be compared on the same rows"
        return Decision(True, f"{what}: held-out {rules.metric} {_value(mean, rules.metric)} "
                              f"on {len(candidate):,} rows", evidence)
    refusing = [c for c in found if c.refuses]
    if refusing:
        worst = min(refusing, key=lambda c: c.result.p_worse)
        rule = "train.forget_tolerance" if worst.scope == "earlier data" else \
            "train.promote_tolerance"
        return Decision(False, f"{describe(worst, rules.metric)}: a drop of at least "
                               f"{_diff(-worst.tolerance, rules.metric).lstrip('-')} "
                               f"({rule}) shown at alpha {worst.alpha:.3g} "
                               f"(train.gate_alpha); keeping the promoted model", evidence)
    clauses = [describe(c, rules.metric) for c in found
               if c.against.startswith("live") or c is _closest(found)]
    return Decision(True, "; ".join(clauses) + f"; no drop that matters (at least "
                    f"train.promote_tolerance / forget_tolerance) shown at alpha "
                    f"{rules.alpha:.3g} (train.gate_alpha)", evidence)


def _closest(found: Sequence[Check]) -> Check | None:
    """Among the earlier promoted models, the one the candidate came closest to losing to."""
    others = [c for c in found if not c.against.startswith("live")]
    return min(others, key=lambda c: c.result.p_worse, default=None)


def next_best(decision: Decision, candidate: int, live: int | None,
              best: int | None) -> int | None:
    """The promoted model later candidates are held to after this decision: the candidate
    when it is promoted and scored at least as well as the current best on the best's rows
    (or as the live model on this run's rows when the live model is the best), else the
    current best (the live model when none was recorded)."""
    if not decision.promote:
        return best
    held = best if best is not None else live
    if held is None:
        return candidate
    label = f"{'live' if held == live else 'promoted'} model {held}"
    diffs = [e["diff"] for e in decision.evidence
             if e["against"] == label and e["scope"] == "held-out"]
    return candidate if not diffs or diffs[0] >= 0 else held
