"""What a training run reads: the manifest delta since the parent model, plus a replay sample.

*New* shards are those whose batch entered the dataset after the dataset version the parent
model was trained on (the *promoted* parent: a refused candidate's data stays new until a
model trained on it is promoted; all shards when there is no parent; the version's own new
shards when retraining the parent's version). Every older shard is a *replay* shard: it
contributes a fraction of its training rows, chosen as the rows with the smallest salted id
hash, so the replay share of an epoch is ``replay_ratio`` (within rounding), the sample is
spread over all of history, and it is deterministic for a (seed, dataset version) salt.

Replay balances the old classes (``replay_fractions``): from the manifest's label counts,
the replay budget is split over the classes of the older shards as evenly as their rows
allow (water-filling: a class with fewer rows than its share gives all of them, the rest is
shared by the others), so a class that was common early does not crowd out one that came
later, and each shard's fraction is its labels' quotas over its rows. Shards without label
counts make the plan fall back to one fraction ``q`` for every replay shard.

The held-out split: ingest writes each batch's held-out rows into their own shards
(``ShardEntry.split == "holdout"``), so training reads only ``"train"`` shards and
evaluation only ``"holdout"`` ones. Shards written before that (``split`` None) hold both:
their rows are masked by id hash (``trainer.holdout``, the same rule ingest splits by), so
a dataset mixing both layouts trains and evaluates on the same rows either way.

The fraction: a dataset that materialised the split recorded its fraction in the version
document, and that one is used; a trainer configured with another value is refused
(``HoldoutMismatch``, naming both), since it would evaluate other rows than the held-out
shards hold. A dataset with mixed shards only uses the trainer's configured fraction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from shardline.core.deletions import drop_masked
from shardline.core.errors import ShardlineError, StoreError
from shardline.core.idhash import HoldoutMismatch, dataset_fraction
from shardline.core.manifest import Manifest, ShardEntry
from shardline.core.parts import HOLDOUT, SPLITS, TRAIN
from shardline.core.shard_table import ShardColumns, no_gc
from shardline.trainer.holdout import holdout_mask, pick_smallest, salted
from shardline.trainer.replay import balanced_fractions
from shardline.trainer.shard_file import ShardIndex

__all__ = ["HoldoutMismatch", "NothingToTrain", "PlannedShard", "TrainPlan", "dataset_fraction",
           "make_plan", "shard_versions"]


class NothingToTrain(ShardlineError):
    """The dataset version adds no rows beyond what the parent model was trained on."""


class PlannedShard:
    """One shard of a plan. Its manifest ``entry`` is built from the version's shard columns
    when first used (a 100k-shard plan builds no entries up front). ``split``: "train",
    "holdout", or None (a mixed shard of the older layout, masked by id hash)."""

    __slots__ = ("_entry", "_columns", "ordinal", "dataset_version", "role", "split")

    def __init__(self, entry: ShardEntry | None, ordinal: int, dataset_version: int,
                 role: Literal["new", "replay"], columns: ShardColumns | None = None,
                 split: str | None = None):
        if entry is None and columns is None:
            raise ValueError("PlannedShard needs an entry or the shard columns to build it from")
        self._entry, self._columns = entry, columns
        self.ordinal = ordinal                  # position in the manifest's shard list
        self.dataset_version = dataset_version  # dataset version that added the shard's batch
        self.role: Literal["new", "replay"] = role
        self.split = split if entry is None else entry.split

    @property
    def entry(self) -> ShardEntry:
        if self._entry is None:
            self._entry = self._columns.entry(self.ordinal)  # type: ignore[union-attr]
        return self._entry

    def _sha256(self) -> str:
        if self._entry is None:
            return self._columns.sha256[self.ordinal]  # type: ignore[union-attr]
        return self._entry.sha256

    def _key(self) -> tuple[ShardEntry, int, int, str]:
        return (self.entry, self.ordinal, self.dataset_version, self.role)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlannedShard) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.ordinal, self.dataset_version, self.role))

    def __repr__(self) -> str:
        return (f"PlannedShard(ordinal={self.ordinal}, dataset_version={self.dataset_version}, "
                f"role={self.role!r}, entry={self.entry.path!r})")


@dataclass(frozen=True)
class TrainPlan:
    dataset: str
    dataset_version: int
    since_dataset_version: int | None  # parent model's dataset version (None: from scratch)
    shards: list[PlannedShard]         # every shard of the version, manifest order
    replay_fraction: float             # q: share of each replay shard's training rows used
    holdout_fraction: float
    salt: int
    # per shard (manifest order): share of its training rows replayed (new shards: 1);
    # None: ``replay_fraction`` for every replay shard
    replay_fractions: np.ndarray | None = field(default=None, compare=False, repr=False)
    # rows masked by deletion vectors (``core.deletions``), by shard ordinal: never served
    masked: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    # a replay shard's rows drawn afresh every epoch (same count, another salt per epoch)
    resample: bool = False

    def live(self, s: PlannedShard, rows: np.ndarray) -> np.ndarray:
        """``rows`` of ``s`` without the ones a deletion vector masks (order kept)."""
        return drop_masked(rows, self.masked.get(s.ordinal))

    def fraction(self, s: PlannedShard) -> float:
        """Share of ``s``'s training rows this run reads."""
        if s.role == "new":
            return 1.0
        if self.replay_fractions is None:
            return self.replay_fraction
        return float(self.replay_fractions[s.ordinal])

    @property
    def train_shards(self) -> list[PlannedShard]:
        """Shards training reads: train and mixed ones (never a held-out shard)."""
        return [s for s in self.shards if s.split != HOLDOUT
                and (s.role == "new" or self.fraction(s) > 0)]

    @property
    def eval_shards(self) -> list[PlannedShard]:
        """Shards evaluation reads: held-out and mixed ones (never a train shard)."""
        return [s for s in self.shards if s.split != TRAIN]

    def expected_rows(self, s: PlannedShard) -> float:
        frac = self.fraction(s)
        if s.split is not None:
            return s.entry.rows * frac if s.split == TRAIN else 0.0
        return s.entry.rows * (1.0 - self.holdout_fraction) * frac

    def rows_epoch(self, s: PlannedShard, epoch: int) -> int:
        """The epoch whose sample of ``s``'s rows epoch ``epoch`` reads: itself for a
        replay shard of a resampling plan, else 0 (the same rows every epoch)."""
        return epoch if self.resample and s.role != "new" else 0

    def train_rows(self, s: PlannedShard, index: ShardIndex, epoch: int = 0) -> np.ndarray:
        """Row numbers of ``s`` that this run trains on in ``epoch`` (ascending): a new
        shard's every training row; a replay shard's sample, drawn again every epoch when
        the plan resamples (``rows_epoch``), always of the same size."""
        if s.split == HOLDOUT:
            return np.empty(0, np.int64)
        if s.split == TRAIN:
            train = np.arange(len(index.hashes), dtype=np.int64)
        else:
            train = np.flatnonzero(~holdout_mask(index.hashes, self.holdout_fraction))
        train = self.live(s, train)
        if s.role == "new":
            return train.astype(np.int64)
        k = int(round(self.fraction(s) * len(train)))
        sample = self.rows_epoch(s, epoch)
        salt = self.salt ^ (0x9E3779B97F4A7C15 * sample) & 0xFFFFFFFFFFFFFFFF   # 0: the salt
        return train[pick_smallest(salted(index.hashes[train], salt), k)]

    def holdout_rows(self, index: ShardIndex, s: PlannedShard | None = None) -> np.ndarray:
        """Row numbers of shard ``s`` that are held out: all of a held-out shard, none of a
        train shard, the id-hash mask of a mixed one (also when ``s`` is not given)."""
        split = None if s is None else s.split
        if split == HOLDOUT:
            rows = np.arange(len(index.hashes), dtype=np.int64)
        elif split == TRAIN:
            return np.empty(0, np.int64)
        else:
            rows = np.flatnonzero(holdout_mask(index.hashes, self.holdout_fraction)).astype(
                np.int64)
        return rows if s is None else self.live(s, rows)

    def fingerprint(self) -> str:
        """Identity of the sample universe (resumed loader state must match it)."""
        h = hashlib.sha256("".join(f"{s._sha256()}:{s.role};" for s in self.shards).encode())
        h.update(f"{self.replay_fraction:.12g}:{self.holdout_fraction:.12g}:{self.salt}".encode())
        if self.replay_fractions is not None:
            h.update(np.round(self.replay_fractions, 12).tobytes())
        for ordinal in sorted(self.masked):
            h.update(f"{ordinal}:".encode() + self.masked[ordinal].tobytes())
        if self.resample:
            h.update(b"resample")
        return h.hexdigest()[:16]


def shard_versions(manifest: Manifest) -> np.ndarray:
    """The dataset version that added each shard of ``manifest.shard_columns`` (same order),
    from the batch table (the batch-list references). A shard whose batch is not listed
    (a hand-made manifest) counts as this version's when it is among its new shards, else
    as the version before."""
    by_batch = {b.id: b.version for b in manifest.batches}
    cols = manifest.shard_columns
    ids, codes = cols.batch_codes()
    out = np.asarray([by_batch.get(b, -1) for b in ids], np.int64)[codes] if ids else \
        np.zeros(0, np.int64)
    if (out < 0).any():
        new, earlier = set(manifest.new_shards), max(manifest.version - 1, 0)
        for i in np.flatnonzero(out < 0):
            out[i] = manifest.version if cols.path[i] in new else earlier
    return out


def make_plan(manifest: Manifest, since_dataset_version: int | None, replay_ratio: float,
              holdout_fraction: float | None, seed: int, resample: bool = False) -> TrainPlan:
    """Choose new and replay shards of ``manifest`` for a model last trained on
    ``since_dataset_version``.

    Reads every batch list of the version once, as columns (replay samples all of history);
    shards are new when their batch's version is after ``since_dataset_version`` (when
    retraining the same version: when their batch is the version's own). Held-out shards
    are in the plan (evaluation reads them) but count for neither new nor replay rows.

    Raises:
        NothingToTrain: no shard is new relative to ``since_dataset_version``.
        HoldoutMismatch: ``holdout_fraction`` differs from the dataset's (see
            :func:`dataset_fraction`; None takes the dataset's).
    """
    fraction = dataset_fraction(manifest, holdout_fraction)
    cols = manifest.shard_columns
    splits = cols.split
    odd = set(splits) - {None, *SPLITS}
    if odd:
        raise StoreError(f"dataset {manifest.dataset} v{manifest.version}: shard split(s) "
                         f"{sorted(map(str, odd))} are not 'train' or 'holdout'; upgrade shardline")
    trains = ~cols.split_is(HOLDOUT)
    versions = shard_versions(manifest)
    if since_dataset_version is None:
        is_new = np.ones(len(cols), bool)
    elif since_dataset_version >= manifest.version:
        is_new = versions == manifest.version
    else:
        is_new = versions > since_dataset_version
    new_rows = int(cols.rows[is_new & trains].sum())
    old_rows = int(cols.rows[~is_new & trains].sum())
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
    balanced = balanced_fractions(cols, ~is_new & trains, target) if old_rows \
        else None
    roles = np.where(is_new, "new", "replay").tolist()
    with no_gc():       # 100k small objects: the cyclic collector would rescan them all
        planned = [PlannedShard(None, i, v, r, cols, sp) for i, (v, r, sp)
                   in enumerate(zip(versions.tolist(), roles, splits, strict=True))]
    return TrainPlan(manifest.dataset, manifest.version, since_dataset_version, planned, q,
                     fraction, salt, balanced, masked_by_ordinal(manifest), resample)


def masked_by_ordinal(manifest: Manifest) -> dict[int, np.ndarray]:
    """The version's masked rows by shard ordinal (its shard columns' order); reads the
    deletion vectors only when the version has some."""
    if manifest.doc.deletions is None:
        return {}
    masks = manifest.masks()
    return {i: masks[p] for i, p in enumerate(manifest.shard_columns.path) if p in masks}
