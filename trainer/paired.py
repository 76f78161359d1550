"""Paired comparison of two models on the same held-out rows (the gate's evidence).

Both models are scored per row (higher is better: 1/0 for a correct/incorrect class, the
negative squared error for a regression target). What varies between two models scored on
the *same* rows is only the rows where they disagree, so a paired test sees a difference
that two separate accuracies (each with its own standard error) hide in noise.

- **0/1 scores** (correct or not): McNemar's exact test, mid-p version. Of the ``d`` rows
  where exactly one model is right, the candidate loses ``l``; under "no difference" ``l``
  is Binomial(d, 1/2). One-sided mid-p = P(L > l) + P(L = l) / 2. The interval of the
  difference in accuracy is Bonett & Price's adjusted Wald interval for paired proportions.
- **Any other score**: a paired bootstrap of the mean per-row difference (rows resampled
  together, a fixed seed: the same rows give the same answer). One-sided p = the share of
  resampled means at or above 0; the interval is the percentile interval.

Both report a two-sided ``1 - 2 * alpha`` interval, the one whose upper end a one-sided
test at level ``alpha`` looks at: a drop is refused when that upper end lies at least the
tolerance below zero (``Paired.worse``: the rows show the drop is one that matters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

BOOTSTRAP_RESAMPLES = 2000
_CHUNK = 4_000_000           # row draws per bootstrap chunk (memory, not results)


@dataclass(frozen=True)
class Paired:
    """Candidate minus reference on ``rows`` shared rows (in the metric's units: a
    fraction for accuracy). ``p_worse``: one-sided p-value of "the candidate is worse"."""

    rows: int
    candidate: float          # candidate's mean score on the shared rows
    reference: float          # reference's mean score on the same rows
    diff: float
    low: float
    high: float
    p_worse: float
    test: str                 # "McNemar mid-p" or "paired bootstrap"
    wins: int = 0             # 0/1 scores: rows only the candidate gets right
    losses: int = 0           # ... rows only the reference gets right

    def worse(self, alpha: float, tolerance: float) -> bool:
        """A drop that matters, shown with confidence: the candidate is worse (p < alpha)
        and the interval's upper end (the one-sided ``1 - alpha`` bound) lies at least
        ``tolerance`` below zero, so the rows show the drop is at least the tolerance, not
        only that there is one (a drop of 1.3 points whose bound is -0.4 may be less than
        a 1-point tolerance: it is not refused)."""
        return self.p_worse < alpha and self.high <= -tolerance + 1e-12


def _binary(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all())


def mcnemar(cand: np.ndarray, ref: np.ndarray, alpha: float) -> Paired:
    """McNemar mid-p for 0/1 scores of the same rows (see the module docstring)."""
    n = len(cand)
    c, r = cand.astype(bool), ref.astype(bool)
    wins, losses = int((c & ~r).sum()), int((~c & r).sum())
    d = wins + losses
    p = float(stats.binom.sf(losses, d, 0.5) + 0.5 * stats.binom.pmf(losses, d, 0.5)) \
        if d else 1.0
    # Bonett & Price adjusted Wald interval for p12 - p21
    p12, p21 = (wins + 1) / (n + 2), (losses + 1) / (n + 2)
    centre = p12 - p21
    se = math.sqrt(max(p12 + p21 - centre ** 2, 0.0) / (n + 2))
    z = float(stats.norm.ppf(1 - alpha))
    diff = (wins - losses) / n
    return Paired(n, float(c.mean()), float(r.mean()), diff, max(centre - z * se, -1.0),
                  min(centre + z * se, 1.0), min(p, 1.0), "McNemar mid-p", wins, losses)


def bootstrap(cand: np.ndarray, ref: np.ndarray, alpha: float, seed: int = 0,
              resamples: int = BOOTSTRAP_RESAMPLES) -> Paired:
    """Paired bootstrap of the mean per-row difference (see the module docstring)."""
    n = len(cand)
    d = cand.astype(np.float64) - ref.astype(np.float64)
    rng = np.random.default_rng(seed)
    per = max(1, _CHUNK // max(n, 1))
    means = []
    for lo in range(0, resamples, per):
        k = min(per, resamples - lo)
        means.append(d[rng.integers(0, n, size=(k, n))].mean(1))
    m = np.concatenate(means)
    low, high = np.quantile(m, [alpha, 1 - alpha])
    return Paired(n, float(cand.mean()), float(ref.mean()), float(d.mean()), float(low),
                  float(high), float((m >= 0).mean()), "paired bootstrap")


def compare(cand: np.ndarray, ref: np.ndarray, alpha: float) -> Paired | None:
    """Candidate vs reference scores of the same rows (same order); None without rows."""
    if len(cand) != len(ref):
        raise ValueError(f"paired scores need the same rows: {len(cand)=} != {len(ref)=}")
    if len(cand) == 0:
        return None
    return mcnemar(cand, ref, alpha) if _binary(cand, ref) else bootstrap(cand, ref, alpha)
