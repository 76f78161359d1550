"""``ShardArena``: the training shards copied into one buffer, so that a batch is gathered
with a single ``take`` (issue 14, item 2).

Why: on small images (S, 3 KB rows) a batch touches ~10 label shards; gathering it from
their maps costs ten ``take`` calls, and each costs ~0.8 us beyond its copy (argument
checks, a GIL release, a memory pipeline that drains between calls): ~10-15 % of a
60-80 us batch. With every shard at a fixed row offset of one ``[rows, nbytes]`` array, a
batch is one ``take`` of precomputed arena rows, as from one memory-mapped file.

One ``[rows, nbytes]`` array per gathered column (``trainer.columns``): a batch is one
``take`` per column. Every train shard has its own rows (``base``), fixed for the run: a
shard is copied in once (``claim`` then ``fill``, which releases the GIL) and never moved
or overwritten, so readers need no protection. A window is gathered from the arena only
when all its shards are filled (``bases``), else from the maps: same bytes in the same
order, so the batches and the resume state do not depend on when (or whether) the copies
happened.

Used only when the whole training set fits the budget (the stream's ``arena_bytes``; by
default the reader's keep-open budget, 1 GiB of pixels, shared by the ranks of the run,
and only for batches up to 8 MiB with more than one epoch: ``trainer.stream``).
Cost: anonymous memory as shards are filled (pages are touched by the copy; the first
touch of fresh memory is most of a fill's time), on top of the shard files' page cache
(reclaimable), and one copy per shard per run.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from shardline.trainer.shard_file import OpenShard


class ShardArena:
    def __init__(self, rows: dict[int, int], widths: Sequence[int]) -> None:
        """``rows``: shard ordinal -> its row count (the arena's layout, in this order);
        ``widths``: bytes per row of each column."""
        starts = np.cumsum([0, *rows.values()]).tolist()
        self.base = dict(zip(rows, starts, strict=False))
        self.rows = dict(rows)
        self.data = [np.empty((starts[-1], w), np.uint8) for w in widths]
        self._filled: set[int] = set()
        self._claimed: set[int] = set()
        self._lock = threading.Lock()
        self.copied = 0                                     # shards copied in

    @classmethod
    def sized(cls, budget_bytes: int, rows: dict[int, int], widths: Sequence[int]
              ) -> ShardArena | None:
        """An arena for these shards, or None when they do not fit ``budget_bytes``."""
        total = sum(rows.values()) * math.fsum(widths)
        if not rows or total <= 0 or total > budget_bytes:
            return None
        return cls(rows, widths)

    def bases(self, ordinals: Sequence[int]) -> list[int] | None:
        """The arena row of each shard's row 0 when all of them are filled, else None."""
        with self._lock:
            if not self._filled.issuperset(ordinals):
                return None
        return [self.base[o] for o in ordinals]

    def claim(self, shards: Sequence[tuple[int, OpenShard]]) -> list[tuple[int, OpenShard]]:
        """The shards not yet filled nor being filled, now reserved for the caller to fill."""
        with self._lock:
            mine = [(o, s) for o, s in shards if o in self.base and o not in self._claimed]
            self._claimed.update(o for o, _ in mine)
        return mine

    def fill(self, shards: Sequence[tuple[int, OpenShard]]) -> None:
        """Copy claimed shards in (checking each has the rows the layout says). A failure
        hands the unfilled claims back, so the next build claims them again and fails the
        same way (on the helper thread or the batch path alike) instead of reading them
        from the maps for the rest of the run."""
        done = 0
        try:
            for o, shard in shards:
                if shard.rows != self.rows[o]:
                    raise ValueError(f"shard {shard.key} has {shard.rows} rows, the arena "
                                     f"reserved {self.rows[o]}")
                base = self.base[o]
                for cols, start in zip(shard.segments, shard.starts.tolist(), strict=False):
                    for data, seg in zip(self.data, cols, strict=True):
                        np.copyto(data[base + start:base + start + len(seg)], seg)
                with self._lock:
                    self._filled.add(o)
                    self.copied += 1
                done += 1
        except BaseException:
            with self._lock:
                self._claimed.difference_update(o for o, _ in shards[done:])
            raise

    def filled(self) -> set[int]:
        with self._lock:
            return set(self._filled)
