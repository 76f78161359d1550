"""Two real dataset versions of sklearn digits as Arrow IPC files on local disk:
v1 uncompressed (1000 rows), v2 LZ4 (797 rows), label-partitioned like the ingest writes;
and typed datasets (``typed_data``): tensor, uint16 image and scalar fields with a
multi-label or a regression target."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from shardline.core.config import Config
from shardline.core.manifest import Manifest
from shardline.trainer.fetch import LocalShards
from shardline.trainer.plan import TrainPlan, make_plan
from shardline.trainer.shard_reader import ShardReader
from tests.integration.trainer_data import digits_config, write_local_version

from .typed_data import LocalTyped, local_typed, mask_config, regression_config, typed_config


@dataclass
class LocalDigits:
    cfg: Config
    root: Path
    v1: Manifest
    v2: Manifest

    def reader(self) -> ShardReader:
        return ShardReader(LocalShards(self.root), self.cfg.dataset)

    def plan(self, since: int | None = None, replay: float = 0.3, holdout: float = 0.15,
             version: int = 2, resample: bool = False) -> TrainPlan:
        return make_plan(self.v2 if version == 2 else self.v1, since, replay, holdout, seed=0,
                         resample=resample)


@pytest.fixture(scope="session")
def local_digits(tmp_path_factory: pytest.TempPathFactory) -> LocalDigits:
    root = tmp_path_factory.mktemp("digits")
    cfg = digits_config(record_batch_rows=40)     # several record batches per shard
    order = np.random.default_rng(7).permutation(1797)
    v1 = write_local_version(root, cfg.dataset, order[:1000], compression="none")
    v2 = write_local_version(root, cfg.dataset, order[1000:], v1, compression="lz4")
    return LocalDigits(cfg, root, v1, v2)


@dataclass
class LocalFields:
    """A typed dataset (``typed_data``) with the same helpers as :class:`LocalDigits`."""

    data: LocalTyped

    def reader(self) -> ShardReader:
        return ShardReader(LocalShards(self.data.root), self.data.cfg)

    def plan(self, since: int | None = None, replay: float = 0.3, holdout: float = 0.15,
             version: int = 2) -> TrainPlan:
        return make_plan(self.data.v2 if version == 2 else self.data.v1, since, replay,
                         holdout, seed=0)


@pytest.fixture(scope="session")
def local_fields(tmp_path_factory: pytest.TempPathFactory) -> LocalFields:
    """13-band float32 tiles, uint16 images, a bool tensor, scalars, a multi-label target
    (v1 + LZ4 v2)."""
    return LocalFields(local_typed(tmp_path_factory.mktemp("typed"), typed_config()))


@pytest.fixture(scope="session")
def local_mask(tmp_path_factory: pytest.TempPathFactory) -> LocalFields:
    """An image and a segmentation mask target (v1 + LZ4 v2)."""
    return LocalFields(local_typed(tmp_path_factory.mktemp("mask"), mask_config()))


@pytest.fixture(scope="session")
def local_regression(tmp_path_factory: pytest.TempPathFactory) -> LocalFields:
    return LocalFields(local_typed(tmp_path_factory.mktemp("regr"), regression_config()))
