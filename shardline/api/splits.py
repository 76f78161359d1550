"""The held-out split for API readers: which shards a split reads, and the id-hash mask of
the mixed shards written before ingest materialised the split.

``"train"`` reads train shards, ``"holdout"`` held-out shards, ``"all"`` every shard; mixed
shards (``split`` None) are read by both and masked by id hash with the dataset's fraction
(``core.idhash.dataset_fraction``), so the rows are those the trainer trains / evaluates on.
"""

from __future__ import annotations

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
