"""``ShardArena``: the training stream's open shards copied into one buffer, so that a
batch is gathered with a single ``take`` (issue 14, item 2).

Why: on small images (S, 3 KB rows) a batch touches ~10 label shards; gathering it from
their maps costs ten ``take`` calls, and each call costs ~0.8 us beyond its copy (setup,
GIL release, a pipeline that drains between calls): ~10 % of a 60-80 us batch. With every
shard of a window at a fixed row offset of one ``[slots * slot_rows, nbytes]`` array, a
batch is one ``take`` of precomputed arena rows, as with one memory-mapped file.

A shard is copied in once and stays while its slot is not needed (least recently used
first out); the slots of the window the stream is reading are protected (``protect``), so
building the next window (on the stream's helper thread) never overwrites rows still being
gathered. The copies release the GIL. When a window's shards do not fit beside the
protected ones (or a shard is larger than a slot), ``place`` answers None and the stream
gathers that window from the maps as before: the bytes, their order and the resume state
are the same either way (the arena only changes where a row is copied from).

Cost: anonymous memory up to ``slots * slot_rows * nbytes`` (pages are touched only as
shards are copied in), on top of the page cache of the shard files (reclaimable), and one
copy of each shard per residency.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from shardline.trainer.shard_file import OpenShard


class ShardArena:
    def __init__(self, slots: int, slot_rows: int, nbytes: int) -> None:
        if slots <= 0 or slot_rows <= 0:
            raise ValueError(f"{slots=} and {slot_rows=} must be positive")
        self.slot_rows, self.nbytes = slot_rows, nbytes
        self.data = np.empty((slots * slot_rows, nbytes), np.uint8)
        self._owner: list[int | None] = [None] * slots     # shard ordinal per slot
        self._slot_of: dict[int, int] = {}
        self._used = [0] * slots                            # last use (a counter)
        self._tick = 0
        self._protected: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self.copied = 0                                     # shards copied in

    @classmethod
    def sized(cls, budget_bytes: int, shard_rows: Sequence[int], nbytes: int,
              min_slots: int) -> ShardArena | None:
        """An arena with slots of the largest shard, as many as ``budget_bytes`` allows
        (never more than there are shards), or None below ``min_slots``."""
        if not shard_rows or nbytes <= 0:
            return None
        slot_rows = max(shard_rows)
        slots = min(len(shard_rows), budget_bytes // max(1, slot_rows * nbytes))
        if slot_rows <= 0 or slots < max(1, min_slots):
            return None
        return cls(slots, slot_rows, nbytes)

    def protect(self, ordinals: Sequence[int]) -> None:
        """Keep these shards' rows in place until the next call (the window being read)."""
        with self._lock:
            self._protected = frozenset(ordinals)

    def place(self, shards: Sequence[tuple[int, OpenShard]]) -> list[int] | None:
        """The arena row where each shard's row 0 lies, copying in the shards not resident;
        None when they do not fit beside the protected shards (nothing is evicted then)."""
        with self._lock:
            want = {o for o, _ in shards}
            if len(want) != len(shards) or any(s.rows > self.slot_rows for _, s in shards):
                return None
            need = [(o, s) for o, s in shards if o not in self._slot_of]
            free = [i for i, o in enumerate(self._owner) if o is None]
            if len(need) > len(free):
                spare = sorted((self._used[i], i) for i, o in enumerate(self._owner)
                               if o is not None and o not in want and o not in self._protected)
                if len(need) > len(free) + len(spare):
                    return None
                for _, i in spare[:len(need) - len(free)]:
                    del self._slot_of[self._owner[i]]  # type: ignore[arg-type]
                    self._owner[i] = None
                    free.append(i)
            for (o, shard), i in zip(need, free, strict=False):
                base = i * self.slot_rows
                for seg, start in zip(shard.segments, shard.starts.tolist(), strict=False):
                    np.copyto(self.data[base + start:base + start + len(seg)], seg)
                self._owner[i], self._slot_of[o] = o, i
                self.copied += 1
            self._tick += 1
            for o in want:
                self._used[self._slot_of[o]] = self._tick
            return [self._slot_of[o] * self.slot_rows for o, _ in shards]

    def resident(self) -> set[int]:
        with self._lock:
            return set(self._slot_of)
