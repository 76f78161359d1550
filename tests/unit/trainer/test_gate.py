"""The gate's decision over per-row scores (``trainer.gate``), scenario by scenario, with no
server and no model: rows are built with known outcomes."""

from __future__ import annotations

import numpy as np
import pytest

from shardline.trainer.evaluate import EvalResult
from shardline.trainer.gate import Decision, Rules, gate, next_best
from shardline.trainer.promote import history
from shardline.trainer.registry import Promoted
from shardline.trainer.rows import RowScores

RULES = Rules(alpha=0.05, tolerance=0.01, forget_tolerance=0.01)


def rows(correct: np.ndarray, versions: np.ndarray | None = None, start: int = 0) -> RowScores:
    n = len(correct)
    ids = np.arange(start, start + n, dtype=np.uint64) * np.uint64(2654435761)
    v = np.ones(n, np.int32) if versions is None else versions.astype(np.int32)
    return RowScores(ids, correct.astype(np.float32), v, np.zeros(n, np.int64))


def pair(n: int, both: int, wins: int, losses: int, seed: int = 0,
         versions: np.ndarray | None = None) -> tuple[RowScores, RowScores]:
    """Candidate and reference on the same ``n`` rows: ``both`` right for both, ``wins``
    only the candidate right, ``losses`` only the reference right (rows shuffled)."""
    kinds = np.array([0] * both + [1] * wins + [2] * losses + [3] * (n - both - wins - losses))
    kinds = np.random.default_rng(seed).permutation(kinds)
    cand = (kinds == 0) | (kinds == 1)
    ref = (kinds == 0) | (kinds == 2)
    return rows(cand, versions), rows(ref, versions)


def test_first_model_is_promoted() -> None:
    cand, _ = pair(100, 80, 0, 0)
    d = gate(cand, None)
    assert d.promote and "first model" in d.reason and "80.00 %" in d.reason


def test_nothing_to_evaluate_is_not_promoted() -> None:
    _, live = pair(10, 5, 0, 0)
    for cand in (None, RowScores.empty()):
        d = gate(cand, (1, live))
        assert not d.promote and "holdout_fraction" in d.reason


@pytest.mark.parametrize("drop_rows", [7, 5, 4])
def test_the_issues_drops_within_noise_are_promoted(drop_rows: int) -> None:
    """Issue 21: 2.0 / 1.5 / 1.2-point drops on ~350 rows (one standard error about 1.3
    points) were refused by the fixed 0.01 threshold; the rows do not show them."""
    n = 350
    cand, best = pair(n, 300, 8, 8 + drop_rows)
    drop = 100 * drop_rows / n
    d = gate(cand, (5, cand), [(2, best)], rules=RULES)   # live: equal to the candidate
    assert d.promote, d.reason
    clause = "promoted model 2"
    assert clause in d.reason and f"-{drop:.2f} points" in d.reason and "350 rows" in d.reason


def test_a_drop_the_rows_show_is_refused_naming_difference_interval_and_rows() -> None:
    cand, live = pair(2000, 1700, 20, 80)          # -3 points, discordant 20 vs 80
    d = gate(cand, (4, live), rules=RULES)
    assert not d.promote
    for part in ("held-out accuracy", "live model 4", "-3.00 points", "90 % interval",
                 "2,000 rows", "McNemar mid-p", "train.promote_tolerance", "keeping"):
        assert part in d.reason, (part, d.reason)
    ev = d.evidence[0]
    assert ev["rows"] == 2000 and ev["losses"] == 80 and ev["wins"] == 20
    assert ev["low"] < ev["diff"] < ev["high"] < 0


def test_a_significant_drop_smaller_than_the_tolerance_is_promoted() -> None:
    cand, live = pair(100_000, 90_000, 1000, 1500)   # -0.5 points, shown with confidence
    assert not gate(cand, (1, live), rules=Rules(tolerance=0.0)).promote
    assert gate(cand, (1, live), rules=RULES).promote


def test_a_drop_is_refused_only_when_the_rows_show_it_is_at_least_the_tolerance() -> None:
    """A drop shown to exist (p < alpha) whose interval still reaches above -tolerance may
    be smaller than a drop that matters: promoted. The same drop on more rows, where the
    interval's upper end is below -tolerance, is refused. (Measured in the classes bench: a
    1.26-point forgetting drop on 475 rows, p ~0.04, had refused a whole stage.)"""
    cand, live = pair(475, 400, 5, 14)               # -1.89 points on 475 rows
    r = gate(cand, (3, live), rules=RULES)
    ev = r.evidence[0]
    assert ev["p_worse"] < 0.05 and -ev["diff"] > 0.01       # a drop, shown, over 1 point
    assert -0.01 < ev["high"] < 0 and r.promote, r.reason    # ... not shown to be 1 point
    big_c, big_l = pair(47_500, 40_000, 1000, 1600)   # -1.26 points on 47,500 rows
    r = gate(big_c, (3, big_l), rules=RULES)
    assert r.evidence[0]["high"] < -0.01 and not r.promote, r.reason


def test_better_now_is_not_vetoed_by_noise_on_earlier_rows() -> None:
    """+ on new data, a drop within noise on the earlier rows: promoted; a forgetting the
    rows show: refused by the forgetting rule, whose reason uses the table's name."""
    versions = np.array([1] * 400 + [2] * 400)
    old_c, old_r = pair(400, 360, 4, 10, seed=1)
    new_c, new_r = pair(400, 300, 60, 5, seed=2)
    cand = RowScores.concat([old_c, RowScores(new_c.ids + np.uint64(1), new_c.scores,
                                              new_c.versions + 1, new_c.labels)])
    live = RowScores.concat([old_r, RowScores(new_r.ids + np.uint64(1), new_r.scores,
                                              new_r.versions + 1, new_r.labels)])
    assert (cand.versions == versions).all()
    d = gate(cand, (3, live), since=1, rules=RULES)
    assert d.promote, d.reason
    assert "earlier data accuracy" in d.reason
    old_c, old_r = pair(400, 330, 4, 40, seed=1)
    cand = RowScores.concat([old_c, RowScores(new_c.ids + np.uint64(1), new_c.scores,
                                              new_c.versions + 1, new_c.labels)])
    live = RowScores.concat([old_r, RowScores(new_r.ids + np.uint64(1), new_r.scores,
                                              new_r.versions + 1, new_r.labels)])
    d = gate(cand, (3, live), since=1, rules=RULES)
    assert not d.promote and "earlier data accuracy" in d.reason
    assert "train.forget_tolerance" in d.reason and "400 rows" in d.reason


def test_the_best_promoted_model_is_compared_on_its_own_rows() -> None:
    """No ratchet: the best earlier model's stored rows are a subset of today's; the
    candidate is compared on exactly those."""
    cand, live = pair(3000, 2700, 10, 10)
    best_rows = cand.where(np.arange(3000) < 1000)
    worse = RowScores(best_rows.ids, np.ones(1000, np.float32), best_rows.versions,
                      best_rows.labels)            # model 1 got every one of them right
    d = gate(cand, (4, live), [(1, worse)], rules=RULES)
    assert not d.promote and "promoted model 1" in d.reason and "1,000 rows" in d.reason
    d = gate(cand, (4, live), [(1, best_rows)], rules=RULES)
    assert d.promote


def test_after_growth_forgetting_asks_the_parents_question() -> None:
    """Classes grew 2 -> 4: on the earlier rows the live model could only choose among its
    2 classes; the candidate, choosing among 4, is wrong more often there without having
    forgotten anything. Asked the parent's question (its first 2 outputs) it is not worse."""
    cand_full, live = pair(400, 280, 10, 60, seed=3)        # -12.5 points among 4 classes
    cand_known, _ = pair(400, 330, 12, 8, seed=3)           # among the parent's 2: +1 point
    cand_known = RowScores(cand_full.ids, cand_known.scores, cand_full.versions,
                           cand_full.labels)
    live = RowScores(cand_full.ids, live.scores, cand_full.versions, cand_full.labels)
    assert not gate(cand_full, (1, live), since=1, rules=RULES).promote
    d = gate(cand_full, (1, live), since=1, rules=RULES, known=cand_known, known_classes=2)
    assert [e["scope"] for e in d.evidence] == ["held-out", "earlier data"]
    assert "both answering among its 2 classes" in d.evidence[1]["against"]
    assert d.evidence[1]["diff"] > 0 and d.evidence[0]["diff"] < 0


def test_regression_scores_use_the_paired_bootstrap() -> None:
    rng = np.random.default_rng(0)
    err = rng.normal(0, 1, 500).astype(np.float32)
    live = RowScores(np.arange(500, dtype=np.uint64), -(err ** 2), np.ones(500, np.int32),
                     np.full(500, -1, np.int64))
    worse = RowScores(live.ids, -((err + 1.0) ** 2), live.versions, live.labels)
    same = RowScores(live.ids, live.scores + rng.normal(0, 0.01, 500).astype(np.float32),
                     live.versions, live.labels)
    r = Rules(metric="neg_mse")
    assert not gate(worse, (1, live), rules=r).promote
    d = gate(same, (1, live), rules=r)
    assert d.promote and "paired bootstrap" in d.reason and "points" not in d.reason


@pytest.mark.parametrize("sd", [0.01, 1.0, 1000.0])
def test_the_regression_tolerance_is_in_r2_points_whatever_the_target_units(sd: float
                                                                           ) -> None:
    """The same two candidates on targets in different units (standard deviation ``sd``):
    one 0.3 R² points worse than the live model (promoted: within the 0.01 tolerance), one
    5 points worse (refused). Raw squared errors put the tolerance in squared target units:
    at sd 1000 the 0.3-point drop is 3,000 units (refused), at sd 0.01 the 5-point drop is
    0.000005 (promoted)."""
    from shardline.core.fields import FieldStats, TargetInfo
    from shardline.trainer.gate import score_name
    from shardline.trainer.objectives import objective

    target = TargetInfo("y", "regression", stats=FieldStats(mean=(5.0,), std=(sd,)))
    variance = objective(target).target_variance()
    assert variance == pytest.approx(sd * sd)
    n = 4000
    err = np.random.default_rng(1).normal(0, sd * np.sqrt(0.1), n)     # R² about 0.9
    ids, versions, labels = np.arange(n, dtype=np.uint64), np.ones(n, np.int32), \
        np.full(n, -1, np.int64)

    def scores(mse_factor: float) -> RowScores:
        return RowScores(ids, (-(err ** 2) * mse_factor).astype(np.float32), versions, labels)

    live = scores(1.0)
    rules = Rules(metric=score_name("regression", variance), variance=variance)
    slightly = gate(scores(1.03), (1, live), rules=rules)
    assert slightly.promote, slightly.reason
    worse = gate(scores(1.5), (1, live), rules=rules)
    assert not worse.promote
    ev = worse.evidence[0]
    assert ev["diff"] == pytest.approx(-0.05, rel=0.1)                 # R² points, not units
    for part in ("held-out R² (recorded variance)", "-5.", "points", "paired bootstrap",
                 "train.promote_tolerance"):
        assert part in worse.reason, (part, worse.reason)


def test_without_a_recorded_variance_regression_rows_compare_as_they_are() -> None:
    from shardline.core.fields import FieldStats, TargetInfo
    from shardline.trainer.gate import score_name
    from shardline.trainer.objectives import objective

    for stats in (None, FieldStats(mean=(1.0,), std=(0.0,)),
                  FieldStats(mean=(1.0,), std=(float("nan"),))):
        assert objective(TargetInfo("y", "regression", stats=stats)).target_variance() is None
    two = FieldStats(mean=(0.0, 0.0), std=(1.0, 3.0))                  # per channel
    assert objective(TargetInfo("y", "regression", shape=(2,), stats=two)
                     ).target_variance() == pytest.approx(5.0)
    classes = TargetInfo("t", "multilabel", ("a", "b"), (2,), stats=two)
    assert objective(classes).target_variance() is None
    assert score_name("regression", None) == "negative MSE"
    assert score_name("multilabel", 2.0) == "row F1"


def test_unpaired_models_do_not_block() -> None:
    cand, _ = pair(100, 90, 0, 0)
    other = rows(np.ones(50, bool), start=10_000)   # no shared ids
    d = gate(cand, None, [(2, other)])
    assert d.promote and "no promoted model could be compared" in d.reason


def test_next_best_follows_the_evidence() -> None:
    cand, live = pair(1000, 800, 30, 10)
    d = gate(cand, (4, live), rules=RULES)
    assert next_best(d, 5, 4, 4) == 5                      # better than the live best
    cand, live = pair(1000, 800, 10, 15)
    d = gate(cand, (4, live), rules=RULES)
    assert d.promote and next_best(d, 5, 4, 4) == 4        # promoted, but not the best
    assert next_best(Decision(False, "x"), 5, 4, 2) == 2
    assert next_best(Decision(True, "first"), 1, None, None) == 1


# -- the promotion history in the pointer -----------------------------------------------------
def test_history_from_pointer() -> None:
    assert history(None) == []
    assert history(Promoted(4, "e", {"version": 4})) == [4]                 # older pointer
    assert history(Promoted(4, "e", {"version": 4, "history": [1, 2, 4]})) == [1, 2, 4]
    # junk entries are dropped; the live number is always in it
    assert history(Promoted(4, "e", {"version": 4, "history": [1, "x", True, -2]})) == [1, 4]
    assert history(Promoted(4, "e", {"version": 4, "history": "bad"})) == [4]


def test_accuracy_on_weights_versions_by_samples() -> None:
    r = EvalResult(0.9, 300, None, None, {"1": 1.0, "2": 0.8}, {"1": 100, "2": 200})
    assert r.accuracy_on([1]) == 1.0
    assert abs(r.accuracy_on([1, 2]) - (100 + 160) / 300) < 1e-12  # type: ignore[operator]
    assert r.accuracy_on([3]) is None
