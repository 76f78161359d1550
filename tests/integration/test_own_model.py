"""A model of our own, from a package installed beside shardline (``own_model_pkg/tinynets``
on PYTHONPATH): the trainer subprocess imports it by the configured path, trains and
promotes; the next run warm-starts from it; a person pins a model with the CLI; then
``load_model`` + ``predict`` on the held-out rows reproduce the accuracy the registry
recorded. The registry records the factory, its args, package version and source hash;
``load_model`` imports no factory the registry names unless the caller passes it; a parent
built by another factory is refused with one line naming the difference. Real moto S3,
real torch, CPU."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from shardline.core.config import Config, StoreSettings
from shardline.core.store import ObjectStore
from shardline.trainer.options import RunOptions
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.run import train
from shardline.trainer.trust import UntrustedInput
from tests.integration.trainer_data import config_toml, digits_config, publish_version

PKG = Path(__file__).parent / "own_model_pkg"
ROOT = Path(__file__).resolve().parents[2]
ORDER = np.random.default_rng(5).permutation(1797)
FAST = RunOptions(log_every=20, checkpoint_every=1000)


@pytest.fixture
def own_package() -> Iterator[None]:
    sys.path.insert(0, str(PKG))
    try:
        yield
    finally:
        sys.path.remove(str(PKG))
        for m in [m for m in sys.modules if m.split(".")[0] == "tinynets"]:
            del sys.modules[m]


def own_config(tmp_path: Path, factory: str = "tinynets.nets:tiny") -> Config:
    cfg = digits_config(name="digits_own", epochs=4, lr=3e-3,
                        cache_dir=str(tmp_path / "cache"))
    return dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, model=factory, model_args={"hidden": 48}, name="digits-net"))


def holdout_accuracy(model: object, store: ObjectStore, cfg: Config, version: int) -> float:
    import shardline

    ds = shardline.open_dataset(cfg.dataset, version, store=store, split="holdout")
    table = ds.to_table()
    pred = model.predict(table)  # type: ignore[attr-defined]
    return float((pred.numpy() == table.column("label").to_numpy()).mean())


def test_own_factory_trains_warm_starts_is_promoted_and_loads_back(
        store: ObjectStore, stack_env: StoreSettings, tmp_path: Path,
        own_package: None) -> None:
    import shardline

    cfg = own_config(tmp_path)
    path = tmp_path / "digits_own.toml"
    path.write_text(config_toml(cfg))
    publish_version(store, cfg.dataset, ORDER[:1000])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PKG)])}
    r = subprocess.run([sys.executable, "-m", "shardline.trainer", "--config", str(path),
                        "--json", "--device", "cpu"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    first = json.loads(r.stdout.strip().splitlines()[-1])
    assert first["model"] == "digits-net" and first["promoted"]
    reg = ModelRegistry(store, "digits_own", "digits-net")
    build = reg.meta(1)["build"]
    assert (build["factory"], build["args"]) == ("tinynets.nets:tiny", {"hidden": 48})
    assert (build["package"], build["version"]) == ("tinynets", "1.2.0")
    assert len(build["source_sha256"]) == 64

    publish_version(store, cfg.dataset, ORDER[1000:])
    second = train(cfg, store, options=FAST)               # warm start, in this process
    assert second.parent_model_version == 1
    assert "continuing from promoted model 1" in second.start

    r = subprocess.run([sys.executable, "-m", "shardline.cli.main", "models", "pin",
                        str(second.model_version), "-c", str(path), "--by", "tester"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert reg.promoted().number == second.model_version

    # two lines to use it: the live model, its predictions on the raw held-out rows
    model = shardline.load_model("digits_own", config=path, store=store)
    assert model.number == second.model_version and model.classes == cfg.dataset.classes
    recorded = reg.meta(second.model_version)["metrics"]["after"]["accuracy"]
    assert recorded > 0.8
    assert holdout_accuracy(model, store, cfg, 2) == pytest.approx(recorded, abs=1e-9)
    older = shardline.load_model("digits_own", version=1, factory="tinynets.nets:tiny",
                                 store=store)
    assert holdout_accuracy(older, store, cfg, 1) == pytest.approx(
        reg.meta(1)["metrics"]["after"]["accuracy"], abs=1e-9)
    # the registry names the factory; without the caller's word it is not imported
    with pytest.raises(UntrustedInput, match="never imports code named in the registry") as e:
        shardline.load_model("digits_own", model="digits-net", store=store)
    assert "factory='tinynets.nets:tiny'" in str(e.value)

    # another factory under the same model name: no warm start, one line says why
    third = train(own_config(tmp_path, "tinynets.nets:other"), store, options=FAST)
    assert third.parent_model_version == second.model_version
    assert "\n" not in third.start and "warm start from promoted model" in third.start
    assert "factory: tinynets.nets:tiny -> tinynets.nets:other" in third.start
    assert not third.promoted                  # refused by the gate, or kept out by the pin
    assert reg.promoted().number == second.model_version


def test_a_builtin_loads_back_and_reproduces_its_accuracy(
        store: ObjectStore, stack_env: StoreSettings, tmp_path: Path) -> None:
    """The 9.8 % of the issue: the obvious use (raw rows in, predictions out) is right."""
    import shardline

    cfg = digits_config(name="digits_load", epochs=3, lr=3e-3,
                        cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, ORDER[:1200])
    result = train(cfg, store, options=FAST)
    model = shardline.load_model("digits_load", store=store)      # the only model there
    assert model.number == result.model_version
    assert result.eval_accuracy is not None and result.eval_accuracy > 0.8
    assert holdout_accuracy(model, store, cfg, 1) == pytest.approx(result.eval_accuracy,
                                                                    abs=1e-9)
    ds = shardline.open_dataset(cfg.dataset, 1, store=store, split="holdout")
    table = ds.to_table()
    images = ds.images(table)                                        # uint8 (N, H, W, C)
    pred = model.predict({"image": images})
    assert (pred.numpy() == table.column("label").to_numpy()).mean() == pytest.approx(
        result.eval_accuracy, abs=1e-9)


def test_step_and_score_hooks_replace_the_builtin_loss_and_row_score(
        store: ObjectStore, stack_env: StoreSettings, tmp_path: Path,
        own_package: None) -> None:
    from tinynets import hooks  # type: ignore[import-not-found]

    cfg = digits_config(name="digits_hooks", epochs=2, lr=3e-3,
                        cache_dir=str(tmp_path / "cache"))
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, step="tinynets.hooks:smoothed_step", score="tinynets.hooks:top2"))
    publish_version(store, cfg.dataset, ORDER[:900])
    result = train(cfg, store, options=FAST)
    # one call per step: every sample seen went through the hook
    assert hooks.CALLS["step"] > 0 and hooks.CALLS["step"] * cfg.train.batch_size >= \
        result.samples_seen
    assert hooks.CALLS["score"] > 0
    assert result.eval["primary"] == "score" and set(result.eval["metrics"]) == {"score"}
    assert result.eval_accuracy is not None and result.eval_accuracy > 0.8
    assert result.curve_epochs[-1]["train_accuracy"] > 0.5       # the hook's batch score
    meta = ModelRegistry(store, "digits_hooks", "cnn").meta(result.model_version)
    assert meta["objective"]["score"] == "tinynets.hooks:top2"


def test_a_pinned_live_model_is_not_replaced_by_a_training_run(
        store: ObjectStore, stack_env: StoreSettings, tmp_path: Path) -> None:
    from shardline.trainer.moves import move

    cfg = digits_config(name="digits_pin", epochs=1, lr=3e-3,
                        cache_dir=str(tmp_path / "cache"))
    # tolerances at their maximum: the gate passes every candidate, the pin alone holds
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, promote_tolerance=1.0, forget_tolerance=1.0))
    publish_version(store, cfg.dataset, ORDER[:600])
    first = train(cfg, store, options=FAST)
    reg = ModelRegistry(store, "digits_pin", "cnn")
    move(reg, "pin", "ops", "frozen for the audit", first.model_version)
    publish_version(store, cfg.dataset, ORDER[600:1200])
    second = train(cfg, store, options=FAST)
    assert not second.promoted and reg.promoted().number == first.model_version
    assert "gate passed" in second.decision and "pinned by ops (frozen for the audit)" in \
        second.decision
    move(reg, "promote", "ops", "audit done", second.model_version)     # unpins
    assert reg.promoted().number == second.model_version
    assert "pinned" not in reg.promoted().pointer
