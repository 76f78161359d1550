from __future__ import annotations

from shardline.trainer.promote import gate


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
