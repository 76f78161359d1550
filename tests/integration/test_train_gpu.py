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
