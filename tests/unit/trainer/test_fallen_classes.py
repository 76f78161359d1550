"""``trainer.evaluate.fallen_classes``: the classes whose held-out accuracy fell most from
the live model to the candidate, on the rows both were scored on."""

from __future__ import annotations

import numpy as np

from shardline.trainer.evaluate import fallen_classes
from shardline.trainer.rows import RowScores


def _rows(ids: np.ndarray, labels: np.ndarray, scores: np.ndarray) -> RowScores:
    return RowScores(ids.astype(np.uint64), scores.astype(np.float32),
                     np.ones(len(ids), np.int32), labels.astype(np.int64))


def test_the_largest_drops_first_on_the_shared_rows_with_names() -> None:
    labels = np.repeat(np.arange(4), 20)                   # 20 rows a class
    ids = np.arange(80) * 7 + 3
    before = np.ones(80)
    after = np.ones(80)
    after[labels == 1] = np.r_[np.zeros(5), np.ones(15)]   # class 1: 100 -> 75 %
    after[labels == 3] = np.r_[np.zeros(10), np.ones(10)]  # class 3: 100 -> 50 %
    after[labels == 2] = 1.0                               # class 2: no drop
    # the candidate's rows in another order, and a row the live model was not scored on
    perm = np.random.default_rng(0).permutation(80)
    cand = _rows(np.r_[ids[perm], 10**6], np.r_[labels[perm], 0], np.r_[after[perm], 0.0])
    live = _rows(ids, labels, before)
    got = fallen_classes(live, cand, names=("cat", "dog", "eel", "fox"))
    assert [(f["class"], f["name"], f["rows"]) for f in got] == [(3, "fox", 20), (1, "dog", 20)]
    assert got[0]["before"] == 1.0 and got[0]["after"] == 0.5 and got[1]["after"] == 0.75
    assert [f["class"] for f in fallen_classes(live, cand, top=1)] == [3]
    assert fallen_classes(live, cand)[0]["name"] == "3"      # no names: the index


def test_small_classes_rises_and_other_targets_are_not_listed() -> None:
    ids = np.arange(12)
    labels = np.r_[np.zeros(9), np.ones(3)]                 # class 1 has 3 rows
    live = _rows(ids, labels, np.ones(12))
    cand = _rows(ids, labels, np.r_[np.ones(9), np.zeros(3)])
    assert fallen_classes(live, cand) == []                 # below min_rows
    assert [f["class"] for f in fallen_classes(live, cand, min_rows=3)] == [1]
    assert fallen_classes(cand, live, min_rows=1) == []     # a rise is not a fall
    regression = _rows(ids, -np.ones(12), -np.ones(12))     # label -1: no class target
    assert fallen_classes(regression, regression) == []
    assert fallen_classes(None, cand) == [] and fallen_classes(live, RowScores.empty()) == []
