"""Class-balanced replay: per-shard replay fractions from the manifest's label counts.

The replay budget (rows) is split over the classes found in the older shards as evenly as
their rows allow: water-filling, each class gets ``min(available, level)`` with ``level``
chosen so the quotas add up to the budget. A shard then replays the rows of its labels'
quotas: ``sum(count[label] * quota[label] / available[label]) / rows``. With label-
partitioned shards (one label each) a class's quota is met exactly (within rounding); a
shard holding several labels gets their weighted fraction (its rows are picked by id hash,
not by label).
"""

from __future__ import annotations

import numpy as np

from shardline.core.shard_table import ShardColumns


def label_counts(cols: ShardColumns) -> tuple[np.ndarray, list[str], np.ndarray] | None:
    """(shard index, label, count) triples of every shard's label counts, vectorised over
    the version's columns; None when some shard has none recorded."""
    col = cols.arrow().column("label_counts").combine_chunks()
    if len(col) == 0:
        return np.zeros(0, np.int64), [], np.zeros(0, np.int64)
    offsets = col.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = np.diff(offsets)
    if col.null_count or (lengths == 0).any():
        return None
    base = offsets[0]
    keys = col.keys.slice(base, offsets[-1] - base).to_pylist()
    counts = col.items.slice(base, offsets[-1] - base).to_numpy(
        zero_copy_only=False).astype(np.int64)
    shard = np.repeat(np.arange(len(col), dtype=np.int64), lengths.astype(np.int64))
    return shard, keys, counts


def water_fill(available: np.ndarray, budget: float) -> np.ndarray:
    """Quotas ``min(available, level)`` adding up to ``budget`` (all when it is larger)."""
    if budget >= available.sum():
        return available.astype(np.float64)
    order = np.sort(available).astype(np.float64)
    n = len(order)
    spent = 0.0
    for i, a in enumerate(order):
        level = (budget - spent) / (n - i)
        if a >= level:
            return np.minimum(available, level).astype(np.float64)
        spent += a
    return available.astype(np.float64)


def balanced_fractions(cols: ShardColumns, replay: np.ndarray,
                       budget: float) -> np.ndarray | None:
    """Per-shard replay fractions (0 outside ``replay``) spending ``budget`` training rows
    evenly over the classes of the ``replay`` shards; None without label counts."""
    found = label_counts(cols)
    if found is None:
        return None
    shard, keys, counts = found
    # counts of whole shards, like the budget (a mixed shard of the older layout trains on
    # about 1 - holdout of its rows, its new rows too: the ratio is the same)
    keep = replay[shard]
    shard, counts = shard[keep], counts[keep].astype(np.float64)
    labels, code = np.unique(np.asarray(keys, dtype=object)[keep].astype(str),
                             return_inverse=True)
    available = np.bincount(code, counts, minlength=len(labels))
    quota = water_fill(available, budget)
    share = np.divide(quota, available, out=np.zeros_like(quota), where=available > 0)
    rows = np.bincount(shard, counts, minlength=len(cols))
    per = np.bincount(shard, counts * share[code], minlength=len(cols))
    out = np.divide(per, rows, out=np.zeros(len(cols)), where=rows > 0)
    return np.clip(out, 0.0, 1.0)
