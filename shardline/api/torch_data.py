"""Torch access to a dataset version through the trainer's own loader (read-only).

The same pieces as a training run: a plan over the version's shards, the digest-checked
local shard cache, memory-mapped shards, the windowed shuffle of ``ShardStream`` (epochs,
seed, resume from ``state_dict``, each rank a disjoint share). Nothing is written to the
bucket; shard files are cached under ``cache_dir``.

Batches are dicts (``shardline.core.fields``): one tensor per field, named after it (an
image ``[B, C, H, W]`` over channels-last memory, a tensor ``[B, *shape]``, a scalar
``[B]``; the legacy ``image`` is uint8), the target under its name (a class index int64
``[B]``, e.g. ``label``; a multi-label 0/1 uint8 ``[B, K]``; a regression float32), ``key``
int64 ``[B]`` (shard ordinal << 32 | row), ``epoch``, ``epoch_end``.

``split``: ``"all"`` rows, or the trainer's ``"train"`` / ``"holdout"`` split: the split's
own shards (written by ingest) plus older mixed shards masked by id hash with the dataset's
fraction; the rows the trainer evaluates on are exactly the ``"holdout"`` ones, and a
``"holdout"`` loader never opens a train shard.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset

from shardline.api.splits import Split, check_split
from shardline.core.config import TrainConfig
from shardline.core.parts import HOLDOUT
from shardline.core.settings import RuntimeEnv, read_env
from shardline.trainer.cache import ShardCache
from shardline.trainer.dist import DistInfo
from shardline.trainer.fetch import ShardFetcher
from shardline.trainer.loader import eval_batches, make_train_loader
from shardline.trainer.options import LoaderSpec
from shardline.trainer.plan import PlannedShard, TrainPlan, make_plan
from shardline.trainer.shard_file import ShardIndex
from shardline.trainer.shard_reader import ShardReader
from shardline.trainer.stream import ShardStream

# ``ds`` below is a ``shardline.api.dataset.Dataset``; typed Any so that the two modules do
# not import each other (``Dataset.torch_loader`` imports this module when called).
Dataset = Any
_DEFAULTS = TrainConfig()


@dataclasses.dataclass(frozen=True)
class _HoldoutPlan(TrainPlan):
    """A plan whose 'training' shards and rows are the held-out ones (to stream the
    evaluation split shuffled)."""

    @property
    def train_shards(self) -> list[PlannedShard]:
        return self.eval_shards

    def train_rows(self, s: PlannedShard, index: ShardIndex, epoch: int = 0) -> np.ndarray:
        return self.holdout_rows(index, s)

    def expected_rows(self, s: PlannedShard) -> float:
        if s.split is not None:
            return float(s.entry.rows) if s.split == HOLDOUT else 0.0
        return s.entry.rows * self.holdout_fraction


@dataclasses.dataclass(frozen=True)
class _AllPlan(TrainPlan):
    """Every row of every shard, shuffled (train rows) or in order (the 'held-out' pass)."""

    @property
    def train_shards(self) -> list[PlannedShard]:
        return self.shards

    @property
    def eval_shards(self) -> list[PlannedShard]:
        return self.shards

    def train_rows(self, s: PlannedShard, index: ShardIndex, epoch: int = 0) -> np.ndarray:
        return self.live(s, np.arange(len(index.hashes), dtype=np.int64))

    def holdout_rows(self, index: ShardIndex, s: PlannedShard | None = None) -> np.ndarray:
        rows = np.arange(len(index.hashes), dtype=np.int64)
        return rows if s is None else self.live(s, rows)

    def expected_rows(self, s: PlannedShard) -> float:
        return float(s.entry.rows)


def _plan(ds: Dataset, split: Split, holdout_fraction: float | None, seed: int, shuffle: bool
          ) -> TrainPlan:
    check_split(split)
    if not shuffle and split == "train":   # the fixed order is eval_batches' (held-out rows)
        raise ValueError("split='train' is only streamed shuffled; pass shuffle=True, or "
                         "split='all' / 'holdout' for a fixed order")
    base = make_plan(ds.manifest, None, 0.0, None if split == "all" else holdout_fraction, seed)
    cls = {"all": _AllPlan, "holdout": _HoldoutPlan}.get(split)
    if cls is None:
        return base
    return cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})


class TorchLoader:
    """An iterable of batches with ``state_dict`` / ``load_state_dict`` (resume mid-epoch)
    and ``close`` (stops the fetch threads; also on ``with`` exit)."""

    def __init__(self, ds: Dataset, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 epochs: int = 1, split: Split | None = None, rank: int | None = None,
                 world: int | None = None, holdout_fraction: float | None = None,
                 shuffle_window: int = _DEFAULTS.shuffle_window, cache_dir: str | None = None,
                 cache_max_gb: float | None = None, fetch_threads: int = 4) -> None:
        info = DistInfo.from_env()
        self.rank = info.rank if rank is None else rank
        self.world = info.world if world is None else world
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank must be within [0, world), got {self.rank=}, {self.world=}")
        fraction = (holdout_fraction if holdout_fraction is not None
                    else ds.train.holdout_fraction if ds.train is not None else None)
        split = ds.split if split is None else split
        env = read_env(RuntimeEnv)
        cache = ShardCache(cache_dir or env.cache_dir or _DEFAULTS.cache_dir,
                           int((cache_max_gb or env.cache_max_gb or _DEFAULTS.cache_max_gb)
                               * 2**30), ds.store)
        self.fetcher = ShardFetcher(cache, fetch_threads)
        self.reader = ShardReader(self.fetcher, ds.config, info=ds.fields)
        self.plan = _plan(ds, split, fraction, seed, shuffle)
        self.shuffle, self.batch_size = shuffle, batch_size
        self._skip = 0
        self._loader: Any = None
        if shuffle:
            self.stream = ShardStream(self.plan, self.reader, batch_size=batch_size,
                                      epochs=epochs, seed=seed, rank=self.rank,
                                      world=self.world, window_rows=shuffle_window)
            self._loader = make_train_loader(self.stream, LoaderSpec(prefetch_batches=0))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._loader is not None:
            return iter(self._loader)
        return self._fixed_order()

    def _fixed_order(self) -> Iterator[dict[str, Any]]:
        pool = self.reader.pool(self.batch_size)
        batches = eval_batches(self.plan, self.reader, pool, rank=self.rank, world=self.world)
        for i, batch in enumerate(batches):
            if i >= self._skip:
                self._skip = i + 1
                yield batch
        self._skip = 0       # a finished pass: the next iteration starts over

    def state_dict(self) -> dict[str, Any]:
        if self._loader is not None:
            return dict(self._loader.state_dict())
        return {"fixed_order_batches": self._skip}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._loader is not None:
            self._loader.load_state_dict(state)
        else:
            self._skip = int(state["fixed_order_batches"])

    def close(self) -> None:
        self.fetcher.close()

    def __enter__(self) -> TorchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_loader(ds: Dataset, batch_size: int = 256, **kwargs: Any) -> TorchLoader:
    """A :class:`TorchLoader` over ``ds``.

    Args:
        batch_size: samples per batch (the last batch of an epoch may be shorter).
        shuffle: windowed shuffle as in training (default); False reads in manifest order.
        seed, epochs: the shuffle's seed; epochs in one iteration.
        split: "all", "train" or "holdout" (the trainer's split; default: the split the
            dataset was opened with, "all" unless ``open_dataset(..., split=...)``).
        rank, world: this process's share (default from ``RANK`` / ``WORLD_SIZE``).
        holdout_fraction: for the split: the dataset's, fixed at ingest (another value is
            an error); for a dataset of mixed shards only, ``[train]`` of the config the
            dataset was opened with, else 0.15.
        shuffle_window, cache_dir, cache_max_gb, fetch_threads: loader knobs.
    """
    return TorchLoader(ds, batch_size, **kwargs)


class BatchIterable(IterableDataset):
    """A ``torch.utils.data.IterableDataset`` of whole batches (``DataLoader(ds,
    batch_size=None, num_workers=0)``); each ``iter`` starts a fresh :class:`TorchLoader`."""

    def __init__(self, ds: Dataset, batch_size: int, kwargs: dict[str, Any]) -> None:
        self.ds, self.batch_size, self.kwargs = ds, batch_size, kwargs

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        with TorchLoader(self.ds, self.batch_size, **self.kwargs) as loader:
            yield from loader
