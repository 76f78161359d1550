"""``trainer.schedule``: the learning rate as a pure function of the step."""

from __future__ import annotations

import math

import pytest

from shardline.trainer.schedule import lr_at_step


def test_cosine_falls_from_lr_to_its_final_share_and_stays_there() -> None:
    at = lr_at_step("cosine", 2e-3, 0.05, 100)
    assert at is not None
    rates = [at(s) for s in range(131)]
    assert rates[0] == pytest.approx(2e-3)
    assert rates[50] == pytest.approx(2e-3 * (0.05 + 0.95 / 2))
    assert rates[100] == pytest.approx(1e-4) and rates[130] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    # a pure function: asking again (a resumed run) gives the very same rates
    again = lr_at_step("cosine", 2e-3, 0.05, 100)
    assert again is not None and [again(s) for s in range(131)] == rates


def test_held_then_cosine_keeps_lr_for_the_held_share() -> None:
    at = lr_at_step("cosine", 1e-3, 0.05, 100, hold=0.6)
    assert at is not None
    assert all(at(s) == pytest.approx(1e-3) for s in range(61))
    assert at(80) == pytest.approx(1e-3 * (0.05 + 0.95 / 2))    # half-way through the fall
    assert at(100) == pytest.approx(5e-5) and at(61) < 1e-3
    rates = [at(s) for s in range(101)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))


def test_a_run_shorter_than_one_step_and_a_zero_rate() -> None:
    at = lr_at_step("cosine", 1e-3, 0.1, 0.4)
    assert at is not None and at(0) == pytest.approx(1e-3) and at(1) == pytest.approx(1e-4)
    frozen = lr_at_step("cosine", 0.0, 0.1, 50)
    assert frozen is not None and all(frozen(s) == 0.0 for s in range(60))
    assert not any(math.isnan(at(s)) for s in range(5))


def test_constant_leaves_the_optimizer_alone_and_an_unknown_kind_is_refused() -> None:
    assert lr_at_step("constant", 2e-3, 0.05, 100) is None
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        lr_at_step("linear", 2e-3, 0.05, 100)
