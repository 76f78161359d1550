"""Losses and metrics per target kind: each metric equals scikit-learn's on the same
predictions; sums over batches give the metrics of the whole set (what lets ranks and
batches combine); the row score's direction and the primary metric per kind."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn import metrics as skm

from shardline.core.errors import ConfigError
from shardline.core.fields import TargetInfo
from shardline.trainer.objectives import AP_BINS, objective

CLASSES = tuple("abcde")


def _halves(obj, out: torch.Tensor, y: torch.Tensor) -> dict:
    whole = obj.metrics(obj.sums(out, y))
    split = obj.metrics(obj.sums(out[:37], y[:37]) + obj.sums(out[37:], y[37:]))
    assert obj.sums(out, y).shape == (obj.sums_size(),)
    for k, v in whole.items():
        assert v == pytest.approx(split[k], rel=1e-9, abs=1e-12), k
    return whole


def test_class_metrics_match_sklearn() -> None:
    g = torch.Generator().manual_seed(0)
    out, y = torch.randn(100, 5, generator=g), torch.randint(0, 5, (100,), generator=g)
    obj = objective(TargetInfo("label", "class", CLASSES))
    m = _halves(obj, out, y)
    pred = out.argmax(1).numpy()
    assert m["accuracy"] == pytest.approx(skm.accuracy_score(y.numpy(), pred))
    assert m["macro_f1"] == pytest.approx(skm.f1_score(y.numpy(), pred, average="macro"))
    assert obj.row_score(out, y).mean().item() == pytest.approx(m["accuracy"])
    assert obj.loss(out, y).item() == pytest.approx(
        torch.nn.functional.cross_entropy(out, y).item())
    assert (obj.primary, obj.higher_is_better) == ("accuracy", True)


def test_multilabel_metrics_match_sklearn() -> None:
    g = torch.Generator().manual_seed(1)
    y = (torch.rand(100, 5, generator=g) < 0.3).to(torch.uint8)
    # scores on bin centres: the binned average precision is then exact
    bins = torch.randint(0, AP_BINS, (100, 5), generator=g).double()
    prob = (bins + 0.5) / AP_BINS
    out = torch.log(prob / (1 - prob)).float()
    obj = objective(TargetInfo("tags", "multilabel", CLASSES, (5,)))
    m = _halves(obj, out, y)
    pred = (prob > 0.5).numpy()
    assert m["micro_f1"] == pytest.approx(skm.f1_score(y.numpy(), pred, average="micro"))
    assert m["macro_f1"] == pytest.approx(skm.f1_score(y.numpy(), pred, average="macro"))
    assert m["map"] == pytest.approx(
        skm.average_precision_score(y.numpy(), prob.numpy(), average="macro"), abs=1e-6)
    assert (obj.primary, obj.higher_is_better) == ("map", True)
    row = obj.row_score(out, y)
    assert row.shape == (100,) and ((row >= 0) & (row <= 1)).all()


def test_regression_metrics_match_sklearn() -> None:
    g = torch.Generator().manual_seed(2)
    y = torch.randn(100, generator=g) * 3 + 1
    out = (y + 0.5 * torch.randn(100, generator=g)).reshape(100, 1)
    obj = objective(TargetInfo("y", "regression"))
    m = _halves(obj, out, y)
    p, t = out[:, 0].numpy().astype(np.float64), y.numpy().astype(np.float64)
    assert m["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(t, p)), rel=1e-5)
    assert m["mae"] == pytest.approx(skm.mean_absolute_error(t, p), rel=1e-5)
    assert m["r2"] == pytest.approx(skm.r2_score(t, p), rel=1e-5)
    assert (obj.primary, obj.higher_is_better) == ("rmse", False)
    # row score: higher is better, so a perfect row scores 0 and a worse one below it
    assert obj.row_score(y.reshape(100, 1), y).abs().max() == 0
    assert (obj.row_score(out, y) <= 0).all()
    assert obj.loss(out, y).item() == pytest.approx(m["rmse"] ** 2, rel=1e-5)


def test_mask_metrics_and_unknown_kinds() -> None:
    y = torch.tensor([[[0, 1], [1, 2]]])
    out = torch.nn.functional.one_hot(torch.tensor([[[0, 1], [2, 2]]]), 3).permute(0, 3, 1, 2)
    obj = objective(TargetInfo("mask", "mask", ("bg", "a", "b"), (2, 2)))
    m = obj.metrics(obj.sums(out.float(), y))
    assert m["pixel_accuracy"] == pytest.approx(0.75)
    assert m["mean_iou"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert obj.row_score(out.float(), y).tolist() == [0.75]
    with pytest.raises(ConfigError, match="kind 'ranking'"):
        objective(TargetInfo("y", "ranking"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no classes"):
        objective(TargetInfo("label", "class"))


def test_empty_set_scores_none() -> None:
    for t in (TargetInfo("label", "class", CLASSES), TargetInfo("y", "regression"),
              TargetInfo("t", "multilabel", CLASSES, (5,))):
        obj = objective(t)
        assert set(obj.metrics(torch.zeros(obj.sums_size())).values()) == {None}
