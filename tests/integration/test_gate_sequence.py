"""The gate cannot ratchet down (issue 13, item 4): ten real training runs on the same data
(digits on moto, CPU torch) with settings from good to wrecking; no promoted model is ever
worse than the best model promoted before it, beyond ``promote_tolerance``."""

from __future__ import annotations

import dataclasses

import numpy as np

from shardline.core.store import ObjectStore
from shardline.trainer.options import RunOptions
from shardline.trainer.promote import history
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.run import train
from tests.integration.trainer_data import digits_config, publish_version

ORDER = np.random.default_rng(5).permutation(1797)
FAST = RunOptions(log_every=50, checkpoint_every=10_000)
TOL = 0.01
# (lr, epochs, seed): helpful, neutral, mildly harmful and wrecking settings
RUNS = [(3e-3, 2, 0), (1e-2, 1, 1), (0.2, 1, 2), (3e-3, 1, 3), (50.0, 1, 4),
        (2e-2, 1, 5), (1e-3, 2, 6), (0.5, 1, 7), (3e-3, 2, 8), (5e-2, 1, 9)]


def test_ten_runs_never_promote_below_the_best(store: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = digits_config(cache_dir=str(tmp_path / "cache"), width=8, promote_tolerance=TOL,
                        forget_tolerance=TOL)
    publish_version(store, cfg.dataset, ORDER[:900])
    publish_version(store, cfg.dataset, ORDER[900:])
    results = []
    for lr, epochs, seed in RUNS:
        run_cfg = dataclasses.replace(cfg, train=dataclasses.replace(
            cfg.train, lr=lr, epochs=epochs, seed=seed))
        results.append(train(run_cfg, store, 2, options=FAST))
    reg = ModelRegistry(store, "digits", "cnn")
    pointer = reg.promoted()
    assert pointer is not None
    promoted = history(pointer)
    assert promoted == [r.model_version for r in results if r.promoted]
    assert pointer.number == promoted[-1]
    # same data every run: every model was scored on the same held-out rows
    acc = {r.model_version: r.eval_accuracy for r in results}
    assert len({r.eval["samples"] for r in results}) == 1
    best = -1.0
    for n in promoted:
        assert acc[n] is not None and acc[n] >= best - TOL, (n, acc[n], best)
        best = max(best, acc[n])
    # the live model is within the tolerance of the best ever promoted; every refused
    # candidate says which rule refused it
    assert acc[pointer.number] >= best - TOL
    refused = [r for r in results if not r.promoted]
    assert refused, "the wrecking settings must be refused"
    assert all("keeping the promoted model" in r.decision for r in refused)
    for r in results:
        if r.promoted and r.accuracy_before is not None:
            assert r.eval_accuracy >= r.accuracy_before - TOL
    print("gate sequence:", [(r.model_version, round(r.eval_accuracy or 0, 4), r.promoted)
                             for r in results], "best", round(best, 4))
