"""The trainer across a compaction (moto S3, real digits shards, real training runs): a
compaction version gives a trained model nothing new to learn; the next ingest's rows are
exactly the new samples, read next to the compacted shards as replay."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from shardline.core.store import ObjectStore
from shardline.tasks.compact import compact
from shardline.trainer.holdout import holdout_mask, id_hash64
from shardline.trainer.options import RunOptions
from shardline.trainer.plan import NothingToTrain
from shardline.trainer.run import train
from tests.integration.trainer_data import digits, digits_config, publish_version

ORDER = np.random.default_rng(3).permutation(1797)
FAST = RunOptions(log_every=10, checkpoint_every=1000)


def test_training_after_compaction_sees_only_the_next_ingest(store: ObjectStore,
                                                             tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = digits_config(cache_dir=str(tmp_path / "cache"), width=8, epochs=1, batch_size=32,
                        lr=3e-3)
    publish_version(store, cfg.dataset, ORDER[:900])
    first = train(cfg, store, options=FAST)
    assert first.dataset_version == 1 and first.promoted

    r = compact(store, cfg.dataset, target_mb=1.0)
    assert r.version == 2 and r.plan["shards_after"] == 1
    with pytest.raises(NothingToTrain):
        train(cfg, store, options=FAST)

    publish_version(store, cfg.dataset, ORDER[900:1300])
    second = train(cfg, store, options=FAST)
    assert second.dataset_version == 3 and second.parent_model_version == first.model_version
    ids, _, _ = digits()
    new_ids = pa.array([ids[i] for i in ORDER[900:1300]])
    trainable = int((~holdout_mask(id_hash64(new_ids), cfg.train.holdout_fraction)).sum())
    assert second.new_samples == trainable                  # the 400 new rows, less held-out
    assert second.replay_samples > 0                       # replay read the compacted shard
    assert set(second.eval["by_version"]) == {"1", "3"}    # rows keep their first version
