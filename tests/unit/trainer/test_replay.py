"""Class-balanced replay (``trainer.replay`` through ``trainer.plan.make_plan``): the
replay budget is spread evenly over the old classes the manifest's label counts show."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardline.core.builder import build_version
from shardline.core.manifest import Manifest
from shardline.core.parts import ValidationSummary
from shardline.trainer.plan import make_plan
from shardline.trainer.replay import water_fill
from tests.unit.manifest_fixtures import PREFIX, SCHEMA, new_batch, shard

OK = ValidationSummary(success=True, suites=["toy.batch"])


def test_water_fill_spreads_a_budget_evenly_within_what_exists() -> None:
    assert water_fill(np.array([1000.0, 10.0, 500.0]), 300).tolist() == [145.0, 10.0, 145.0]
    assert water_fill(np.array([5.0, 7.0]), 100).tolist() == [5.0, 7.0]
    assert water_fill(np.array([50.0, 50.0]), 40).tolist() == [20.0, 20.0]


def _version(parent: Manifest | None, i: int, rows_by_label: dict[int, int]) -> Manifest:
    b = new_batch(i)
    shards = [dataclasses.replace(shard(b.id, p, rows=n, label=lab), split="train",
                                  label_counts={str(lab): n})
              for p, (lab, n) in enumerate(rows_by_label.items())]
    return build_version(PREFIX, dataset="toy", schema=SCHEMA, config={}, parent=parent,
                         batch=dataclasses.replace(b, shards=shards), validation=OK,
                         holdout_fraction=0.2).manifest()


def test_replay_balances_the_old_classes() -> None:
    v1 = _version(None, 1, {0: 900, 1: 30, 2: 300})     # class 0 dominated early uploads
    v2 = _version(v1, 2, {3: 200, 4: 200})               # two new classes
    plan = make_plan(v2, 1, 0.3, None, seed=0)
    budget = 0.3 / 0.7 * 400
    replayed = {s.entry.partition.get("label") or s.entry.path: plan.expected_rows(s)
                for s in plan.train_shards if s.role == "replay"}
    per_class = sorted(replayed.values())
    assert sum(per_class) == pytest.approx(budget)
    # class 1 has 30 rows: all of them; the other two share the rest equally
    assert per_class[0] == pytest.approx(30.0)
    assert per_class[1] == pytest.approx(per_class[2]) == pytest.approx((budget - 30) / 2)
    assert plan.replay_fraction == pytest.approx(budget / 1230)
    # the fractions are part of the plan's identity (a resumed loader must match them)
    other = make_plan(_version(_version(None, 1, {0: 900, 1: 31, 2: 300}), 2,
                               {3: 200, 4: 200}), 1, 0.3, None, seed=0)
    assert other.fingerprint() != plan.fingerprint()


def test_the_delta_runs_from_the_promoted_parents_version() -> None:
    """A refused candidate trained on v2 moves nothing: the next run plans from the
    promoted parent's v1, so v2's rows are still new (not replay) in v3's plan."""
    v1 = _version(None, 1, {0: 100})
    v2 = _version(v1, 2, {1: 100})
    v3 = _version(v2, 3, {2: 100})
    plan = make_plan(v3, 1, 0.3, None, seed=0)
    new = {s.dataset_version for s in plan.shards if s.role == "new"}
    assert new == {2, 3}
    assert [s.dataset_version for s in plan.shards if s.role == "replay"] == [1]
