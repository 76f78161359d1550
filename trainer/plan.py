"""What a training run reads: the manifest delta since the parent model, plus a replay sample.

*New* shards are those whose batch entered the dataset after the dataset version the parent
model was trained on (all shards when there is no parent; the version's own new shards when
retraining the parent's version). Every older shard is a *replay* shard: each contributes
the same fraction ``q`` of its training rows, chosen as the rows with the smallest salted id
hash, so the replay share of an epoch is ``replay_ratio`` (within rounding), the sample is
spread over all of history, and it is deterministic for a (seed, dataset version) salt.

Rows whose id hash puts them in the held-out split (see ``trainer.holdout``) are never
trained on; the held-out rows of every shard form the evaluation set.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from shardline.core.errors import ShardlineError
from shardline.core.manifest import Manifest, ShardEntry
from shardline.trainer.holdout import holdout_mask, pick_smallest, salted
from shardline.trainer.shard_file import ShardIndex


class NothingToTrain(ShardlineError):
    """The dataset version adds no rows beyond what the parent model was trained on."""


@dataclass(frozen=True)
class PlannedShard:
    entry: ShardEntry
    ordinal: int                       # position in the manifest's shard list (sample keys)
    dataset_version: int               # dataset version that added the shard's batch
    role: Literal["new", "replay"]


@dataclass(frozen=True)
class TrainPlan:
    dataset: str
    dataset_version: int
    since_dataset_version: int | None  # parent model's dataset version (None: from scratch)
    shards: list[PlannedShard]         # every shard of the version, manifest order
    replay_fraction: float             # q: share of each replay shard's training rows used
    holdout_fraction: float
    salt: int

    @property
    def train_shards(self) -> list[PlannedShard]:
        return [s for s in self.shards if s.role == "new" or self.replay_fraction > 0]

    def expected_rows(self, s: PlannedShard) -> float:
        frac = 1.0 if s.role == "new" else self.replay_fraction
        return s.entry.rows * (1.0 - self.holdout_fraction) * frac

    def train_rows(self, s: PlannedShard, index: ShardIndex) -> np.ndarray:
        """Row numbers of ``s`` that this run trains on (ascending)."""
        train = np.flatnonzero(~holdout_mask(index.hashes, self.holdout_fraction))
        if s.role == "new":
            return train.astype(np.int64)
        k = int(round(self.replay_fraction * len(train)))
        return train[pick_smallest(salted(index.hashes[train], self.salt), k)]

    def holdout_rows(self, index: ShardIndex) -> np.ndarray:
        return np.flatnonzero(holdout_mask(index.hashes, self.holdout_fraction)).astype(np.int64)

    def fingerprint(self) -> str:
        """Identity of the sample universe (resumed loader state must match it)."""
        h = hashlib.sha256()
        for s in self.shards:
            h.update(f"{s.entry.sha256}:{s.role};".encode())
        h.update(f"{self.replay_fraction:.12g}:{self.holdout_fraction:.12g}:{self.salt}".encode())
        return h.hexdigest()[:16]


def shard_versions(manifest: Manifest) -> list[int]:
    """The dataset version that added each shard of ``manifest.shards`` (same order), from the
    batch table (format 2: the batch-list references; format 1: the cumulative batch list).
    A shard whose batch is not listed (hand-made format-1 manifests) counts as this
    version's when it is among its new shards, else as the version before."""
    by_batch = {b.id: b.version for b in manifest.batches}
    out = [by_batch.get(s.batch, -1) for s in manifest.shards]
    if -1 in out:
        new, earlier = set(manifest.new_shards), max(manifest.version - 1, 0)
        out = [v if v >= 0 else (manifest.version if s.path in new else earlier)
               for v, s in zip(out, manifest.shards, strict=True)]
    return out


def make_plan(manifest: Manifest, since_dataset_version: int | None, replay_ratio: float,
              holdout_fraction: float, seed: int) -> TrainPlan:
    """Choose new and replay shards of ``manifest`` for a model last trained on
    ``since_dataset_version``.

    Reads every batch list of the version once (replay samples all of history); shards are
    new when their batch's version is after ``since_dataset_version`` (when retraining the
    same version: when their batch is the version's own).

    Raises:
        NothingToTrain: no shard is new relative to ``since_dataset_version``.
    """
    shards = manifest.shards
    versions = shard_versions(manifest)
    if since_dataset_version is None:
        is_new = [True] * len(shards)
    elif since_dataset_version >= manifest.version:
        is_new = [v == manifest.version for v in versions]
    else:
        is_new = [v > since_dataset_version for v in versions]
    new_rows = sum(s.rows for s, n in zip(shards, is_new, strict=True) if n)
    old_rows = sum(s.rows for s, n in zip(shards, is_new, strict=True) if not n)
    if new_rows == 0:
        raise NothingToTrain(
            f"dataset {manifest.dataset} v{manifest.version} has no rows newer than the "
            f"parent model's dataset version {since_dataset_version}; ingest new data, or pass an "
            "explicit --version"
        )
    target = replay_ratio / (1.0 - replay_ratio) * new_rows
    q = min(1.0, target / old_rows) if old_rows else 0.0
    salt = int.from_bytes(hashlib.sha256(f"{seed}:{manifest.version}".encode()).digest()[:8],
                          "little")
    planned = [PlannedShard(s, i, v, "new" if n else "replay")
               for i, (s, v, n) in enumerate(zip(shards, versions, is_new, strict=True))]
    return TrainPlan(manifest.dataset, manifest.version, since_dataset_version, planned, q,
                     holdout_fraction, salt)
