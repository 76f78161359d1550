"""Every target kind trains with its own loss and is scored with its own metrics: a float
feature vector with a regression target and a multi-band tile dataset with a multi-label
target, through the built-in MLP, on real Arrow shards in the moto bucket. The training loss
falls, the evaluation reports the kind's metrics with its primary metric, and the model
loads back and predicts in the target's shape. CPU, real torch."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from shardline.core.builder import commit_version
from shardline.core.config import Config, DatasetConfig, TrainConfig
from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.trainer.options import RunOptions
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.run import train
from tests.unit.trainer.typed_data import draft_version, regression_config, typed_config

FAST = RunOptions(log_every=20, checkpoint_every=1000)


def publish(store: ObjectStore, cfg: DatasetConfig, rows: np.ndarray) -> None:
    draft = draft_version(store.put_bytes, cfg, rows, latest_manifest(store, cfg.prefix),
                          "none")
    commit_version(store, draft)


@pytest.mark.parametrize(("make", "metrics", "primary"), [
    (regression_config, {"rmse", "mae", "r2"}, "rmse"),
    (typed_config, {"micro_f1", "macro_f1", "map"}, "map"),
])
def test_each_target_kind_learns_with_its_loss_and_metrics(
        store: ObjectStore, tmp_path: Path, make: object, metrics: set[str],
        primary: str) -> None:
    import shardline

    ds = make()  # type: ignore[operator]
    cfg = Config(dataset=ds, train=TrainConfig(
        model="mlp", model_args={"hidden": 32}, epochs=4, batch_size=16, lr=3e-3,
        shuffle_window=256, cache_dir=str(tmp_path / "cache")))
    publish(store, ds, np.random.default_rng(0).permutation(400))
    result = train(cfg, store, options=FAST)
    assert result.promoted and result.model == "mlp"
    losses = [e["loss"] for e in result.curve_epochs]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert set(result.eval["metrics"]) == metrics and result.eval["primary"] == primary
    assert all(v is not None and math.isfinite(v) for v in result.eval["metrics"].values())
    meta = ModelRegistry(store, ds.name, "mlp").meta(result.model_version)
    assert meta["objective"]["kind"] == ds.target_spec.kind
    assert meta["objective"]["primary"] == primary
    [row] = shardline.list_models(ds.name, "mlp", store=store)
    assert row["metric"] == f"{primary} {result.eval['metrics'][primary]:.4f}"

    model = shardline.load_model(ds.name, store=store)
    table = shardline.open_dataset(ds, store=store, split="holdout").to_table()
    pred = model.predict(table)
    info = model.info
    expected = (table.num_rows, *info.target.shape) if info.target.shape else (table.num_rows,)
    assert tuple(pred.shape) == expected
