"""``bench/learning_report.print_classes``: the oracle figures are the per-class gaps'
means, over every class and over the first stage's classes."""

from __future__ import annotations

import argparse

import pytest

from shardline.bench.learning_report import print_classes


def _row(seed: int, inc: list[float], ref: list[float]) -> dict:
    return {"seed": seed, "incremental_accuracy": 0.7, "scratch_accuracy": 0.71,
            "incremental_first": 0.8, "scratch_first": 0.8, "old_classes_accuracy": 0.7,
            "new_classes_accuracy": 0.7, "last_step_samples": 18, "scratch_samples": 100,
            "promoted": [True] * 5, "schemas": ["stage"] * 5, "oracle_rows_per_class": 2000,
            "first_classes": 2, "oracle_incremental": inc, "oracle_scratch": ref}


def test_oracle_gaps_average_the_classes_and_the_first_stage(capsys) -> None:  # type: ignore[no-untyped-def]
    ref = [0.8] * 10
    rows = [_row(0, [0.7, 0.8] + [0.8] * 8, ref), _row(1, [0.8, 0.8] + [0.75] * 8, ref)]
    args = argparse.Namespace(per_class=200, epochs=7, scratch_epochs=24, replay=0.6,
                              width=32, alpha=0.05)
    s = print_classes(rows, args)
    # first stage: seed 0 gaps 10 and 0 points, seed 1 none: 2.5 points
    assert s["oracle_first_gap_points"] == pytest.approx(2.5)
    # every class: seed 0 1 point, seed 1 4 points
    assert s["oracle_gap_points"] == pytest.approx(2.5)
    assert s["acc_gap_points"] == pytest.approx(1.0) and s["sample_ratio"] == pytest.approx(0.18)
    out = capsys.readouterr().out
    assert "on 2000 fresh rows a class" in out and "2.50 ± 2.50" in out
