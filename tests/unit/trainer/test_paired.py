"""The gate's paired tests (``trainer.paired``): exact values, and the error rates they
promise, simulated."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardline.trainer.paired import bootstrap, compare, mcnemar


def test_mcnemar_mid_p_by_hand() -> None:
    # 3 wins, 9 losses out of 12 discordant rows, 100 rows
    cand = np.array([1] * 3 + [0] * 9 + [1] * 80 + [0] * 8, np.float32)
    ref = np.array([0] * 3 + [1] * 9 + [1] * 80 + [0] * 8, np.float32)
    r = mcnemar(cand, ref, 0.05)
    tail = sum(math.comb(12, k) for k in range(10, 13)) / 2 ** 12
    assert r.p_worse == pytest.approx(tail + 0.5 * math.comb(12, 9) / 2 ** 12)
    assert (r.wins, r.losses, r.rows) == (3, 9, 100)
    assert r.diff == pytest.approx(-0.06) and r.low < r.diff < r.high
    assert r.candidate == pytest.approx(0.83) and r.reference == pytest.approx(0.89)


def test_no_disagreement_shows_nothing() -> None:
    x = np.ones(50, np.float32)
    r = compare(x, x, 0.05)
    assert r is not None and r.p_worse == 1.0 and r.diff == 0.0
    assert compare(x[:0], x[:0], 0.05) is None
    with pytest.raises(ValueError, match="same rows"):
        compare(x, x[:3], 0.05)


def _refusal_rate(p_ref: float, p_cand: float, n: int, trials: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    refused = 0
    for _ in range(trials):
        base = rng.random(n)
        ref = (base < p_ref).astype(np.float32)
        # the candidate disagrees with the reference on ~8 % of rows
        flip = rng.random(n) < 0.08
        cand = np.where(flip, rng.random(n) < p_cand, ref).astype(np.float32)
        r = mcnemar(cand, ref, 0.05)
        refused += r.worse(0.05, 0.0)
    return refused / trials


def test_equal_models_are_refused_at_most_alpha_of_the_time() -> None:
    assert _refusal_rate(0.9, 0.9, 350, 400, seed=1) <= 0.05 + 0.03


def test_a_real_three_point_drop_on_2000_rows_is_caught() -> None:
    # on flipped rows the candidate is right 55 % vs the reference's 90 %: ~ -2.8 points
    assert _refusal_rate(0.9, 0.55, 2000, 100, seed=2) >= 0.9


def test_bootstrap_is_deterministic_and_centred() -> None:
    rng = np.random.default_rng(0)
    ref = -rng.random(400).astype(np.float32)
    cand = ref - 0.1
    a, b = bootstrap(cand, ref, 0.05), bootstrap(cand, ref, 0.05)
    assert a == b and a.diff == pytest.approx(-0.1, abs=1e-6)
    assert a.p_worse == 0.0 and a.high < 0
    noisy = ref + rng.normal(0, 0.5, 400).astype(np.float32)
    assert bootstrap(noisy, ref, 0.05).low < 0 < bootstrap(noisy, ref, 0.05).high
