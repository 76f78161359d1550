"""The held-out split for API readers: which shards a split reads, and the id-hash mask of
the mixed shards written before ingest materialised the split.

``"train"`` reads train shards, ``"holdout"`` held-out shards, ``"all"`` every shard; mixed
shards (``split`` None) are read by both and masked by id hash with the dataset's fraction
(``core.idhash.dataset_fraction``), so the rows are those the trainer trains / evaluates on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import pyarrow as pa

from shardline.core.idhash import holdout_ids
from shardline.core.parts import HOLDOUT, TRAIN, ShardEntry

Split = Literal["all", "train", "holdout"]
SPLITS: tuple[Split, ...] = ("all", "train", "holdout")


def check_split(split: str) -> Split:
    if split not in SPLITS:
        raise ValueError(f"split must be 'all', 'train' or 'holdout', got {split!r}")
    return split


def shards_of(shards: list[ShardEntry], split: Split) -> list[ShardEntry]:
    """The shards a split reads: its own and the mixed ones (all for ``"all"``)."""
    if split == "all":
        return shards
    other = HOLDOUT if split == TRAIN else TRAIN
    return [s for s in shards if s.split != other]


def mask_rows(table: pa.Table, split: Split, fraction: float, id_column: str = "id"
              ) -> pa.Table:
    """The rows of ``table`` (read from mixed shards) that belong to ``split``."""
    if split == "all" or not table.num_rows:
        return table
    held = holdout_ids(table.column(id_column), fraction)
    return table.filter(pa.array(held if split == HOLDOUT else ~held))


def read_split(read: Callable[[list[ShardEntry], list[str] | None], pa.Table],
               shards: list[ShardEntry], split: Split, fraction: Callable[[], float],
               columns: list[str] | None) -> pa.Table:
    """The rows of ``split`` in ``shards`` (from :func:`shards_of`): ``read(shards,
    columns)`` of the split's own shards, and of the mixed ones masked by id hash."""
    mixed = [s for s in shards if s.split is None]
    if split == "all" or not mixed:
        return read(shards, columns)
    cols = None if columns is None else list(dict.fromkeys([*columns, "id"]))
    parts = [mask_rows(read(mixed, cols), split, fraction())]
    pure = [s for s in shards if s.split is not None]
    if pure:
        parts.insert(0, read(pure, cols))
    table = pa.concat_tables(parts)
    return table if columns is None else table.select(columns)
