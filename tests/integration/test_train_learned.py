"""A training re-run after a kill that landed just after promotion (issue 23): the promoted
model already learned the dataset version with the same [train] settings, so nothing is
trained again, the run says so, and the killed run's progress checkpoint is deleted.
Real moto S3 and real torch on the CPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from shardline.core.store import ObjectStore
from shardline.trainer.context import already_learned
from shardline.trainer.learned import AlreadyLearned
from shardline.trainer.options import RunOptions
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.run import train
from tests.integration.trainer_data import digits_config, publish_version

FAST = RunOptions(log_every=50, checkpoint_every=1000, eval_each_epoch=False)


def test_a_version_the_promoted_model_learned_is_not_trained_again(store: ObjectStore,
                                                                   tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = digits_config(cache_dir=str(tmp_path / "cache"), width=8, epochs=1, batch_size=32)
    publish_version(store, cfg.dataset, np.random.default_rng(5).permutation(1797)[:600])
    first = train(cfg, store, options=FAST)
    assert first.promoted and first.model_version == 1
    reg = ModelRegistry(store, cfg.dataset.name, cfg.train.registry_name)
    # the kill landed after promote() and before clear_progress(): the run's last save stays
    key = reg.meta(1)["run_key"]
    reg.save_progress(key, 7, {"w": torch.zeros(2)}, {"step": 7})
    assert reg.progress_steps(key) == [7]

    message = already_learned(cfg, store, 1)         # what the train flow asks first
    assert message is not None and "already learned by the promoted model 1" in message
    assert "deleted the interrupted run's progress (1 save(s))" in message
    assert reg.progress_steps(key) == []
    with pytest.raises(AlreadyLearned, match="dataset digits v1 was already learned"):
        train(cfg, store, 1, options=FAST)           # the trainer alone says the same
    assert reg.promoted() is not None and reg.promoted().number == 1
    assert not store.head(reg.key(2, "meta.json")), "a second model was trained"

    # another [train] setting is a new training of the same data, as asked
    more = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=2))
    assert already_learned(more, store, 1) is None
    again = train(more, store, 1, options=FAST)
    assert again.model_version == 2 and again.parent_model_version == 1
