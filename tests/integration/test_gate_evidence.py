"""The gate on evidence and classes that grow, with real training (digits on moto, CPU).

- A refused candidate's data is not lost: the next run plans its delta from the promoted
  parent's dataset version, and learns the refused run's rows as new data.
- Every model stores its per-row held-out results; the gate's reason uses the registry
  table's names and numbers ("earlier data accuracy" = the table's ``accuracy_earlier``).
- Appending classes grows the promoted model's head: before training the grown model is
  the parent (nothing right on the new classes), the evaluation reports old and new classes
  apart, the gate decides on its paired evidence; a reordered class list is refused in one
  line.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardline.api.models import model_rows
from shardline.core.config import Config
from shardline.core.store import ObjectStore
from shardline.trainer.grow import ClassListChanged
from shardline.trainer.options import RunOptions
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.rows import load_rows
from shardline.trainer.run import train
from tests.integration.trainer_data import digits, digits_config, publish_version

ORDER = np.random.default_rng(21).permutation(1797)
FAST = RunOptions(log_every=1000, checkpoint_every=10_000)


def _cfg(tmp_path, **kw: object) -> Config:  # type: ignore[no-untyped-def]
    base: dict[str, object] = dict(cache_dir=str(tmp_path / "cache"), width=8, epochs=2,
                                   lr=3e-3, holdout_fraction=0.3)
    base.update(kw)
    return digits_config(**base)


def _with(cfg: Config, **train: object) -> Config:
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **train))


def test_a_refused_runs_data_is_learned_from_the_promoted_parent(store: ObjectStore,
                                                                  tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(tmp_path)
    publish_version(store, cfg.dataset, ORDER[:700])
    first = train(cfg, store, options=FAST)
    publish_version(store, cfg.dataset, ORDER[700:1200])
    wrecked = train(_with(cfg, lr=50.0), store, options=FAST)
    assert first.promoted and not wrecked.promoted
    publish_version(store, cfg.dataset, ORDER[1200:])
    third = train(cfg, store, options=FAST)
    # planned from model 1's v1: v2 (the refused run's data) and v3 are both new
    assert third.parent_model_version == first.model_version
    assert third.new_samples > wrecked.new_samples
    assert third.promoted, third.decision
    reg = ModelRegistry(store, "digits", "cnn")
    for r in (first, wrecked, third):
        rows = load_rows(reg, r.model_version)
        assert rows is not None and len(rows) == r.eval["samples"]
        assert rows.mean() == pytest.approx(r.eval_accuracy)
    # the reason's numbers are the table's, under the table's names
    table = {m["model"]: m for m in model_rows(store, "digits", "cnn")}
    row = table[third.model_version]
    assert f"held-out accuracy {100 * row['accuracy']:.2f} %" in third.decision
    assert f"earlier data accuracy {100 * row['accuracy_earlier']:.2f} %" in third.decision
    assert "rows" in third.decision and "interval" in third.decision
    assert reg.promoted().pointer["best"] in (first.model_version, third.model_version)  # type: ignore[union-attr]


def _classes(cfg: Config, n: int) -> Config:
    ds = dataclasses.replace(cfg.dataset, classes=tuple(str(i) for i in range(n)))
    return dataclasses.replace(cfg, dataset=ds)


def test_appended_classes_grow_the_head_and_a_reorder_is_refused(store: ObjectStore,
                                                                  tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, labels, _ = digits()
    early, late = ORDER[labels[ORDER] < 6], ORDER[labels[ORDER] >= 6]
    full = _cfg(tmp_path, epochs=3)
    # the data side records all ten names; the trainer reads the list from its config
    publish_version(store, full.dataset, early[:800])
    parent = train(_classes(full, 6), store, options=FAST)
    publish_version(store, full.dataset, np.concatenate([late, early[800:]]))
    grown = train(full, store, options=FAST)
    assert "growing its head from 6 to 10 classes" in grown.start
    assert grown.parent_model_version == parent.model_version
    # before training the grown model is the parent: same per-row outcomes on its rows
    reg = ModelRegistry(store, "digits", "cnn")
    mine, theirs = load_rows(reg, grown.model_version), load_rows(reg, parent.model_version)
    assert mine is not None and theirs is not None
    assert grown.eval_before is not None
    before_old = grown.eval_before["old_classes_accuracy"]
    assert before_old is not None and grown.eval_before["new_classes_accuracy"] == 0.0
    assert grown.eval["new_classes_accuracy"] > 0.5 and grown.eval["old_classes_accuracy"] > 0.5
    # the gate decided on its evidence: promoted exactly when no paired check showed a drop
    # that matters (growing 6 -> 10 classes in one step may forget; the rows then say so)
    evidence = reg.meta(grown.model_version)["gate"]["evidence"]
    assert {e["scope"] for e in evidence} == {"held-out", "earlier data"}
    refusing = [e for e in evidence
                if e["p_worse"] < e["alpha"] and e["high"] <= -e["tolerance"] + 1e-12]
    assert grown.promoted == (not refusing), grown.decision
    # a reordered class list is refused in one line
    swapped = dataclasses.replace(full.dataset, classes=("1", "0", *map(str, range(2, 10))))
    publish_version(store, full.dataset, ORDER[:5])
    with pytest.raises(ClassListChanged) as err:
        train(dataclasses.replace(full, dataset=swapped), store, options=FAST)
    assert "\n" not in str(err.value) and "reordered" in str(err.value)
