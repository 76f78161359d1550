"""Per-sample decisions that must never change between runs: hashes of the row id.

The held-out split is a pure function of the id, so a sample is held out in every version,
on every rank and in every run: the evaluation set of version N is exactly the held-out rows
of all shards so far, and it can never leak into training later. Since ingest materialises
the split (held-out rows in their own shards, ``split = "holdout"``), the trainer masks with
the hash only the mixed shards written before that; the hash itself lives in
``shardline.core.idhash`` (ingest and trainer share it) and is re-exported here.

Replay selection ranks rows by a salted re-mix of the same hash, so it is deterministic per
run salt and independent of shard layout.
"""

from __future__ import annotations

import numpy as np

from shardline.core.idhash import (
    K_LEN,
    K,
    holdout_ids,
    holdout_mask,
    id_hash64,
    reference_hash,
    splitmix64,
    unit_interval,
)

_MASK64 = (1 << 64) - 1

__all__ = ["K", "K_LEN", "holdout_ids", "holdout_mask", "id_hash64", "pick_smallest",
           "reference_hash", "salted", "unit_interval"]


def salted(hashes: np.ndarray, salt: int) -> np.ndarray:
    """A second, independent hash of the same ids (for per-run replay selection)."""
    return splitmix64(hashes ^ np.uint64(salt & _MASK64))


def pick_smallest(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest scores, ascending by position (deterministic)."""
    if k >= len(scores):
        return np.arange(len(scores), dtype=np.int64)
    if k <= 0:
        return np.empty(0, np.int64)
    return np.sort(np.argpartition(scores, k - 1)[:k]).astype(np.int64)
