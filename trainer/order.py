"""The sample order of an epoch: a pure function of (seed, epoch), so any position in it can
be recomputed after a restart without replaying what came before.

1. Shards are permuted per epoch.
2. Consecutive shards of that order form *windows* of at least ``min_rows`` expected rows
   and ``min_shards`` shards. A shard's rows are sorted by label (and with
   ``partition_by = ["batch", "label"]`` a shard holds one label), so a window must span
   several shards, or a batch would hold few classes.
3. The window's rows are permuted (one RNG stream per (seed, epoch, window)); every row of
   the window appears exactly once, so every sample appears exactly once per epoch.
4. With ``world`` ranks, the permuted window is cut to a multiple of ``world`` and rank r
   takes positions r, r+world, ...: ranks get disjoint samples and *exactly* equal counts
   without talking to each other (no DDP hang on uneven shards). The cost: up to world-1
   samples per window sit out an epoch (a different few each epoch), and every rank maps
   every shard of a window (it reads only its own rows' pages).

Why windows and not a global permutation: a window is the unit held open (mapped, or
decompressed for LZ4), so memory is bounded by the window, and fetch-ahead follows the
shard order. Trade-off: samples of different windows never share a batch in an epoch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in key]))


def shard_order(n_shards: int, seed: int, epoch: int) -> np.ndarray:
    """Permutation of shard positions for ``epoch``."""
    return _rng(seed, epoch, 0).permutation(n_shards)


def make_windows(order: Sequence[int], expected_rows: Sequence[float], min_rows: int,
                 min_shards: int) -> list[list[int]]:
    """Group ``order`` into consecutive windows (lists of shard positions).

    A window closes once it holds ``min_rows`` expected rows and ``min_shards`` shards; a
    short tail is merged into the previous window rather than left on its own.
    """
    windows: list[list[int]] = []
    cur: list[int] = []
    rows = 0.0
    for s in order:
        cur.append(int(s))
        rows += float(expected_rows[int(s)])
        if rows >= min_rows and len(cur) >= min_shards:
            windows.append(cur)
            cur, rows = [], 0.0
    if cur:
        if windows and (rows < min_rows or len(cur) < min_shards):
            windows[-1].extend(cur)
        else:
            windows.append(cur)
    return windows


def window_permutation(n: int, seed: int, epoch: int, window: int) -> np.ndarray:
    """Permutation of a window's ``n`` rows."""
    return _rng(seed, epoch, window + 1).permutation(n)


def rank_positions(perm: np.ndarray, rank: int, world: int) -> np.ndarray:
    """Rank ``rank``'s share of a permuted window: equal length on every rank."""
    if not 0 <= rank < world:
        raise ValueError(f"{rank=} must be within [0, {world=})")
    keep = len(perm) - len(perm) % world
    return perm[rank:keep:world]
