"""The learning rate of each step of a run (``[train] lr_schedule``).

``cosine`` (the default) keeps ``lr`` for the first ``lr_hold`` share of the run's steps
(0.8), then takes it down to ``lr * lr_final`` (0.05) at the last step along half a cosine;
``constant`` keeps ``lr`` throughout. A run's steps are known before it starts (the plan's
training rows per epoch, the epochs, the batch size and the world), and the rate is a pure
function of the step number, so a resumed run takes the same rates from the step it resumes
at: no scheduler state is saved, and the optimizer's stored rate is never used.

Why a falling rate: at a constant rate a run ends wherever its last noisy steps left it.
For an update that grew the head, that is forgetting: the last steps, at the full rate on
a stream of mostly new rows, pull the features away from the oldest classes. Why the hold:
a cosine over the whole run spends half of a short run at a low rate, and a short run is
what an update is. Class-incremental benchmark, 12 seeds, scored on 2,000 fresh rows a
class (``docs/benchmarks.md``, "Learning quality"), full retrain minus the chain of
updates, overall / on the first stage's classes: constant 0.28 / 2.19 points; cosine over
the whole run 0.62 / -0.35; held 0.6 -0.04 / -0.65; held 0.8 -0.03 / -1.59. Drift
benchmark (3-epoch runs, 6 seeds), the chain's accuracy against the constant rate's:
whole-run cosine -2.0 points (3 seeds), held 0.6 -1.0, held 0.8 -0.2.
"""

from __future__ import annotations

import math
from collections.abc import Callable

SCHEDULES = ("cosine", "constant")


def lr_at_step(kind: str, lr: float, final: float, total_steps: float, hold: float = 0.0
               ) -> Callable[[int], float] | None:
    """step -> learning rate for a run of ``total_steps`` steps, held at ``lr`` for the
    first ``hold`` share of them; None for ``constant`` (the optimizer's own rate stands)."""
    if kind == "constant":
        return None
    if kind != "cosine":
        raise ValueError(f"lr_schedule must be one of {SCHEDULES}, got {kind!r}")
    total = max(float(total_steps), 1.0)
    start = hold * total

    def cosine(step: int) -> float:
        done = min(max(step - start, 0.0) / max(total - start, 1.0), 1.0)
        return lr * (final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * done)))

    return cosine
