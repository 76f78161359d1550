from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from shardline.trainer.holdout import (
    holdout_mask,
    id_hash64,
    pick_smallest,
    reference_hash,
    salted,
    unit_interval,
)

IDS = [f"upload-{i}/row-{i * 7}" for i in range(3000)] + ["", "é", "x" * 300]


def test_vectorised_hash_matches_the_reference_definition() -> None:
    got = id_hash64(pa.array(IDS))
    assert got.dtype == np.uint64
    assert got.tolist() == [reference_hash(s) for s in IDS]


def test_hash_depends_only_on_the_id_not_on_layout() -> None:
    whole = id_hash64(pa.array(IDS))
    sliced = id_hash64(pa.array(IDS).slice(100, 50))
    chunked = id_hash64(pa.chunked_array([IDS[:10], IDS[10:]]))
    large = id_hash64(pa.array(IDS, pa.large_string()))
    assert np.array_equal(sliced, whole[100:150])
    assert np.array_equal(chunked, whole)
    assert np.array_equal(large, whole)


def test_holdout_fraction_is_respected_and_monotone() -> None:
    h = id_hash64(pa.array(IDS))
    small, big = holdout_mask(h, 0.1), holdout_mask(h, 0.3)
    assert abs(small.mean() - 0.1) < 0.02 and abs(big.mean() - 0.3) < 0.03
    assert not (small & ~big).any()          # raising the fraction only adds rows
    u = unit_interval(h)
    assert ((u >= 0) & (u < 1)).all()


def test_salted_hash_is_independent_of_the_split() -> None:
    h = id_hash64(pa.array(IDS))
    held = holdout_mask(h, 0.5)
    picked = unit_interval(salted(h, 12345)) < 0.5
    # independent: about half of each side is picked
    assert abs(picked[held].mean() - 0.5) < 0.05 and abs(picked[~held].mean() - 0.5) < 0.05
    assert not np.array_equal(salted(h, 1), salted(h, 2))


def test_pick_smallest_is_exact_and_ordered() -> None:
    scores = np.array([5, 1, 4, 2, 3], np.uint64)
    assert pick_smallest(scores, 2).tolist() == [1, 3]
    assert pick_smallest(scores, 0).tolist() == []
    assert pick_smallest(scores, 9).tolist() == [0, 1, 2, 3, 4]


def test_non_string_ids_are_rejected_with_the_type() -> None:
    with pytest.raises(TypeError, match="int64"):
        id_hash64(pa.array([1, 2, 3]))
