"""train() end to end on a real S3 API (moto server) with real digits shards: first model
from scratch, incremental continuation from the promoted parent, the gate refusing a worse
model, and a killed run resuming with exactly the same samples and weights. CPU only."""

from __future__ import annotations

import dataclasses
import json
import uuid

import numpy as np
import pytest
import torch

from shardline.core.config import Config, StoreSettings, TrainConfig
from shardline.core.store import ObjectStore
from shardline.trainer.checkpoint import bytes_to_tensors, header_metadata
from shardline.trainer.options import RunOptions
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.result import TrainResult
from shardline.trainer.run import train
from tests.integration.trainer_data import digits_config, publish_version

ORDER = np.random.default_rng(3).permutation(1797)
FAST = RunOptions(log_every=10, checkpoint_every=1000)


def config(tmp_path, **train_kw: object) -> Config:  # type: ignore[no-untyped-def]
    kw: dict[str, object] = dict(cache_dir=str(tmp_path / "cache"), width=8, epochs=2,
                                 batch_size=32, lr=3e-3)
    kw.update(train_kw)
    return digits_config(**kw)


def with_train(cfg: Config, **changes: object) -> Config:
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **changes))


def params(tensors: dict[str, torch.Tensor], model: torch.nn.Module | None = None
           ) -> dict[str, torch.Tensor]:
    """Trainable parameters only (BatchNorm running statistics move even with lr=0)."""
    return {k: v for k, v in tensors.items() if not k.endswith(("running_mean", "running_var",
                                                                 "num_batches_tracked"))}


def test_incremental_training_continues_from_the_promoted_parent(
        store: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = config(tmp_path)
    publish_version(store, cfg.dataset, ORDER[:900])
    first = train(cfg, store, options=FAST)
    assert (first.model_version, first.dataset_version, first.parent_model_version) == (1, 1, None)
    assert first.promoted and first.replay_samples == 0 and first.accuracy_before is None
    assert first.eval_accuracy is not None and first.eval_accuracy > 0.5

    publish_version(store, cfg.dataset, ORDER[900:], compression="lz4")
    # lr = 0: the weights can only be the parent's if the run really started from them
    frozen = train(with_train(cfg, lr=0.0), store, options=FAST)
    reg = ModelRegistry(store, "digits", "cnn")
    parent, child = reg.weights(1), reg.weights(frozen.model_version)
    assert frozen.parent_model_version == 1 and "continuing from promoted model 1" in frozen.start
    for k, v in params(parent).items():
        assert torch.equal(v, child[k]), k

    second = train(cfg, store, options=FAST)
    meta = reg.meta(second.model_version)
    parent_of_second = frozen.model_version if frozen.promoted else 1
    assert (second.dataset_version, second.parent_model_version) == (2, parent_of_second)
    assert reg.promoted().number == (second.model_version if second.promoted
                                      else parent_of_second)
    assert second.replay_samples > 0 and second.new_samples > 0
    ratio = second.replay_samples / (second.new_samples + second.replay_samples)
    assert abs(ratio - TrainConfig().replay_ratio) < 0.03
    assert second.samples_seen == 2 * (second.new_samples + second.replay_samples)
    assert second.eval["earlier_accuracy"] is not None and set(second.eval["by_version"]) == {
        "1", "2"}
    assert second.checkpoint == store.uri(f"models/digits/cnn/{second.model_version:06d}/")
    for key in ("config", "dataset_version", "parent_model_version", "metrics", "loader_state",
                "code_version", "build", "inputs", "objective", "gate"):
        assert key in meta, key
    assert meta["config"]["train"]["lr"] == cfg.train.lr
    json.dumps(second.to_dict())                      # the CLI prints exactly this


def test_the_rate_follows_the_schedule_through_a_real_run(
        store: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The run's last step is taken at about lr x lr_final under the cosine (the default,
    held at lr for the first lr_hold of the steps) and at lr with a constant rate: what the
    published optimizer state records."""
    publish_version(store, config(tmp_path).dataset, ORDER[:600])
    reg = ModelRegistry(store, "digits", "cnn")
    last = {}
    for kind in ("cosine", "constant"):
        cfg = config(tmp_path, lr_schedule=kind, lr_final=0.05)
        r = train(cfg, store, options=dataclasses.replace(FAST, resume=False))
        last[kind] = [g["lr"] for g in reg.meta(r.model_version)["optimizer_state"][
            "param_groups"]]
    lr = config(tmp_path).train.lr
    assert TrainConfig().lr_schedule == "cosine"
    assert all(0.05 * lr <= x <= 0.06 * lr for x in last["cosine"]), last
    assert last["constant"] == [lr] * len(last["constant"])


def test_gate_refuses_a_deliberately_worse_model(store: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = config(tmp_path, epochs=3)
    publish_version(store, cfg.dataset, ORDER[:900])
    good = train(cfg, store, options=FAST)
    publish_version(store, cfg.dataset, ORDER[900:])
    # a learning rate this large wrecks the weights within a few steps
    bad = train(with_train(cfg, lr=50.0, promote_tolerance=0.01), store, options=FAST)
    assert bad.accuracy_before is not None and bad.eval_accuracy is not None
    assert bad.eval_accuracy < bad.accuracy_before - 0.01
    assert not bad.promoted
    assert f"held-out accuracy {100 * bad.eval_accuracy:.2f} %" in bad.decision
    assert f"vs live model {good.model_version}'s" in bad.decision
    assert "keeping the promoted model" in bad.decision
    reg = ModelRegistry(store, "digits", "cnn")
    assert reg.promoted().number == good.model_version          # the pointer did not move
    assert reg.meta(bad.model_version)["gate"]["passed"] is False  # kept for inspection
    # the classes it wrecked are named, worst first, on the same rows as the live model
    fallen = reg.meta(bad.model_version)["metrics"]["after"]["fallen_classes"]
    assert fallen == bad.eval["fallen_classes"] and 1 <= len(fallen) <= 5
    assert all(f["name"] in cfg.dataset.classes and f["after"] < f["before"]
               and f["rows"] >= 10 for f in fallen)
    drops = [f["before"] - f["after"] for f in fallen]
    assert drops == sorted(drops, reverse=True)
    assert good.eval["fallen_classes"] is None                    # from scratch: no live model


class Killed(Exception):
    pass


def uninterrupted_twin(store: ObjectStore, store_settings: StoreSettings, cfg: Config,
                       opts: RunOptions) -> tuple[ObjectStore, TrainResult, list[list[int]]]:
    """Publish the same version to ``store`` and to a fresh twin bucket, and train on the
    twin without interruption: the run a killed-and-resumed run on ``store`` must equal.
    Returns the twin, that run's result and the sample keys of each of its steps."""
    twin = ObjectStore(dataclasses.replace(store_settings, bucket=f"t-{uuid.uuid4().hex[:12]}"))
    twin.ensure_bucket()
    for s in (store, twin):
        publish_version(s, cfg.dataset, ORDER[:700])
    seen: list[list[int]] = []
    full = train(cfg, twin, options=opts, on_batch=lambda step, b: seen.append(b["key"].tolist()))
    return twin, full, seen


def test_killed_run_resumes_with_the_same_samples_and_weights(
        store: ObjectStore, store_settings: StoreSettings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = config(tmp_path, epochs=2)
    opts = RunOptions(log_every=10, checkpoint_every=5)
    twin, full, seen_full = uninterrupted_twin(store, store_settings, cfg, opts)

    def crash_at_12(step: int, b: dict) -> None:
        if step == 12:
            raise Killed
    with pytest.raises(Killed):
        train(cfg, store, options=opts, on_batch=crash_at_12)
    reg = ModelRegistry(store, "digits", "cnn")
    assert reg.numbers() == []                                   # nothing published
    progress = list(store.list(f"{reg.prefix}/progress/"))
    assert len(progress) == 1
    saved = json.loads(header_metadata(store.get_bytes(progress[0].key))["state"])
    assert saved["loop"]["step"] == 10                           # last checkpoint before kill

    seen_resumed: list[list[int]] = []
    resumed = train(cfg, store, options=opts,
                    on_batch=lambda step, b: seen_resumed.append(b["key"].tolist()))
    assert resumed.resumed_at_step == 10
    assert seen_resumed == seen_full[10:]
    assert resumed.samples_seen == full.samples_seen
    a = bytes_to_tensors(store.get_bytes(reg.key(resumed.model_version, "weights.safetensors")))
    b = ModelRegistry(twin, "digits", "cnn").weights(full.model_version)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert list(store.list(f"{reg.prefix}/progress/")) == []     # cleared after publishing


def test_a_stale_save_of_an_older_step_never_moves_a_resume_back(
        store: ObjectStore, store_settings: StoreSettings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 11 #9. A second process with the same run key (e.g. one orphaned by a killed
    worker, or started twice) that saves an older step *after* the newest save must not
    send the resume back: saves are per step, and a resume takes the highest."""
    cfg = config(tmp_path, epochs=2)
    opts = RunOptions(log_every=10, checkpoint_every=5)
    twin, full, seen_full = uninterrupted_twin(store, store_settings, cfg, opts)

    def crash_at(n: int):  # type: ignore[no-untyped-def]
        def hook(step: int, b: dict) -> None:
            if step == n:
                raise Killed
        return hook
    with pytest.raises(Killed):                  # the newest save: step 10
        train(cfg, store, options=opts, on_batch=crash_at(12))
    with pytest.raises(Killed):                  # the late writer saves step 5 after it
        train(cfg, store, options=dataclasses.replace(opts, resume=False),
              on_batch=crash_at(7))
    reg = ModelRegistry(store, "digits", "cnn")
    (run_key,) = {o.key.split("/")[-2] for o in store.list(f"{reg.prefix}/progress/")}
    assert reg.progress_steps(run_key) == [5, 10]

    seen_resumed: list[list[int]] = []
    resumed = train(cfg, store, options=opts,
                    on_batch=lambda step, b: seen_resumed.append(b["key"].tolist()))
    assert resumed.resumed_at_step == 10 and seen_resumed == seen_full[10:]
    a, b = reg.weights(resumed.model_version), ModelRegistry(twin, "digits", "cnn").weights(
        full.model_version)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert reg.progress_steps(run_key) == []


def test_a_parent_saved_by_another_adamw_implementation_continues(
        store: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The optimizer implementation is how a run executes (RunOptions), not what it
    learns: state saved by a fused run (CUDA's default; CPU fused here) continues under
    the CPU's for-loop default, with this run's implementation."""
    cfg = config(tmp_path, epochs=1)
    publish_version(store, cfg.dataset, ORDER[:600])
    first = train(cfg, store, options=dataclasses.replace(FAST, optimizer="fused"))
    reg = ModelRegistry(store, "digits", "cnn")
    assert reg.meta(first.model_version)["optimizer_state"]["param_groups"][0]["fused"]
    publish_version(store, cfg.dataset, ORDER[600:900])
    second = train(cfg, store, options=FAST)
    assert second.parent_model_version == first.model_version
    assert "continuing from promoted model" in second.start
    groups = reg.meta(second.model_version)["optimizer_state"]["param_groups"]
    assert (groups[0]["fused"], groups[0]["foreach"]) == (False, False)
    assert reg.meta(second.model_version)["run"] == {
        "device": "cpu", "amp": False, "optimizer": "for-loop", "compile_mode": None,
        "tf32": False, "cudnn_benchmark": False}
