"""The CUDA paths (bf16 autocast, channels-last, pinned batch buffers with non_blocking
copies and event-guarded reuse). Opt-in marker ``gpu``; skipped cleanly without CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardline.core.store import ObjectStore
from shardline.trainer.dist import DistInfo
from shardline.trainer.options import RunOptions
from shardline.trainer.run import train
from tests.integration.trainer_data import digits_config, publish_version

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_placement_on_cuda_uses_bf16_and_channels_last() -> None:
    from shardline.trainer.device import choose

    place = choose(None, DistInfo())
    assert place.cuda and place.channels_last
    assert place.amp == torch.cuda.is_bf16_supported()


def test_training_on_cuda_matches_the_cpu_contract(store: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = digits_config(epochs=2, width=16, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.random.default_rng(0).permutation(1797)[:900])
    result = train(cfg, store, options=RunOptions(log_every=10))
    assert result.model_version == 1 and result.promoted
    assert result.eval_accuracy is not None and result.eval_accuracy > 0.5
    assert result.loader_samples_per_s > 0 and 0 <= result.data_wait_share < 1


def test_the_default_cuda_step_is_fused_compiled_and_continues_from_its_parent(
        store: ObjectStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 14 item 1 on a GPU: fused AdamW + torch.compile(reduce-overhead) + TF32 are
    the CUDA defaults; the parent's fused optimizer state (its step counts on the device)
    loads into the child. Not run without CUDA (tests/unit/trainer/test_accel.py checks
    the decisions on a CPU)."""
    from shardline.trainer.registry import ModelRegistry

    cfg = digits_config(epochs=2, width=16, cache_dir=str(tmp_path / "cache"))
    order = np.random.default_rng(1).permutation(1797)
    publish_version(store, cfg.dataset, order[:900])
    first = train(cfg, store, options=RunOptions(log_every=10))
    meta = ModelRegistry(store, "digits", "cnn").meta(first.model_version)
    assert meta["optimizer_state"]["param_groups"][0]["fused"] is True
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.benchmark
    publish_version(store, cfg.dataset, order[900:])
    second = train(cfg, store, options=RunOptions(log_every=10))
    assert second.parent_model_version == first.model_version and second.samples_seen > 0
    assert second.eval_accuracy is not None and second.eval_accuracy > 0.5
