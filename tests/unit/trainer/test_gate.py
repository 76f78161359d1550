from __future__ import annotations

from shardline.trainer.evaluate import EvalResult
from shardline.trainer.promote import Mark, gate, history
from shardline.trainer.registry import Promoted


def test_first_model_is_promoted() -> None:
    d = gate(0.8, None, 0.01)
    assert d.promote and "first model" in d.reason


def test_candidate_within_tolerance_is_promoted() -> None:
    assert gate(0.895, 0.9, 0.01).promote
    assert gate(0.95, 0.9, 0.0).promote


def test_worse_candidate_is_refused_with_both_numbers() -> None:
    d = gate(0.70, 0.90, 0.01)
    assert not d.promote
    assert "0.7000" in d.reason and "0.9000" in d.reason and "keeping" in d.reason


def test_nothing_to_evaluate_is_not_promoted() -> None:
    d = gate(None, 0.9, 0.01)
    assert not d.promote and "holdout_fraction" in d.reason


# -- no ratchet: the candidate is held to every promoted model's record ----------------------
def test_a_chain_of_small_losses_cannot_ratchet_down() -> None:
    """Old gate: 0.938 is within 0.01 of the live 0.945 and was promoted, though 0.95 had
    been promoted before; now the best promoted model's record is the floor."""
    best = [Mark(1, 0.95, 0.938), Mark(2, 0.945, 0.938)]
    d = gate(0.938, 0.945, 0.01, marks=best)
    assert not d.promote
    assert "best promoted model 1" in d.reason and "0.9500" in d.reason and "0.9380" in d.reason


def test_the_best_is_compared_on_its_own_rows() -> None:
    # the candidate's overall accuracy is lower, but on the rows model 1 was scored on it
    # matches model 1's record: promoted
    assert gate(0.90, 0.905, 0.01, marks=[Mark(1, 0.96, 0.955)]).promote
    assert not gate(0.90, 0.905, 0.01, marks=[Mark(1, 0.96, 0.94)]).promote


def test_a_mark_without_comparable_rows_falls_back_to_overall_accuracy() -> None:
    assert not gate(0.93, 0.93, 0.01, marks=[Mark(1, 0.95, None)]).promote
    assert gate(0.945, 0.93, 0.01, marks=[Mark(1, 0.95, None)]).promote


def test_a_promoted_model_that_cannot_be_evaluated_still_binds_through_its_record() -> None:
    assert not gate(0.80, None, 0.01, marks=[Mark(3, 0.9, 0.8)]).promote
    assert gate(0.95, None, 0.01, marks=[Mark(3, 0.9, 0.95)]).promote


def test_at_exactly_the_tolerance_is_promoted() -> None:
    assert gate(0.94, 0.95, 0.01, marks=[Mark(1, 0.95, 0.94)], earlier=(0.94, 0.95)).promote


# -- forgetting --------------------------------------------------------------------------------
def test_forgetting_beyond_its_tolerance_is_refused() -> None:
    """Issue 13's case: earlier data 98.43 -> 97.64 % while the overall accuracy improved."""
    d = gate(0.99, 0.985, 0.01, marks=[Mark(1, 0.985, 0.99)], earlier=(0.9764, 0.9843),
             forget_tolerance=0.005)
    assert not d.promote
    assert "forget_tolerance" in d.reason and "0.9764" in d.reason and "0.9843" in d.reason
    assert gate(0.99, 0.985, 0.01, earlier=(0.9764, 0.9843), forget_tolerance=0.01).promote


def test_unknown_earlier_accuracy_does_not_block() -> None:
    assert gate(0.95, 0.95, 0.01, earlier=(None, 0.9)).promote
    assert gate(0.95, 0.95, 0.01, earlier=(0.9, None)).promote


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
