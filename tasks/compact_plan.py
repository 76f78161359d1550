"""Compaction, part 1: which shards are small, and how they are grouped into large ones.

A shard is *small* when its bytes are under ``min_bytes``. Small shards are grouped by what
must stay apart: their batch (a row keeps the batch, and so the version, it was first
published in: the trainer's "new vs replay" and the id index are per batch), the fields
that say what a shard is for (``split``: train rows never share a shard with held-out rows,
and older mixed shards, split None, only merge with each other) and any partition value
other than ``label`` (label partitioning is exactly what compaction undoes). A group becomes
``n`` shards of about ``target_bytes`` (never more than ``max_rows`` rows each); a group
that would not get fewer shards than it has is left alone, so re-planning a compacted
dataset finds nothing to do. A shard with masked rows (``core.deletions``) is rewritten
whatever its size, without those rows: compaction applies every deletion vector, and the
version it commits has none.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry

# ShardEntry fields that say what a shard is for: shards that differ in one never merge,
# and a merged shard carries the group's value.
GROUP_FIELDS = ("split",)
MiB = 1024 * 1024


def group_key(s: ShardEntry) -> tuple[tuple[str, str], ...]:
    """What a shard's group is keyed by, besides its batch (a null split reads "mixed": an
    older shard holding both splits)."""
    fields = [(f, "mixed" if getattr(s, f) is None else str(getattr(s, f)))
              for f in GROUP_FIELDS]
    parts = [(f"partition.{k}", v) for k, v in sorted(s.partition.items())
             if k not in ("label", "batch")]
    return tuple(fields + parts)


@dataclass(frozen=True)
class Group:
    """Small shards of one batch (and one group key) and the output shards they become."""

    batch: str
    key: tuple[tuple[str, str], ...]
    bins: list[list[ShardEntry]]          # inputs of each output shard, manifest order
    # masked rows of the inputs that have some (path -> positions): dropped by the rewrite
    masked: dict[str, np.ndarray] = field(default_factory=dict, compare=False)

    @property
    def masked_rows(self) -> int:
        return sum(len(v) for v in self.masked.values())

    @property
    def inputs(self) -> list[ShardEntry]:
        return [s for b in self.bins for s in b]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.inputs)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.inputs)

    @property
    def identity(self) -> tuple[str, tuple[str, ...]]:
        """The batch and its input shards' digests: a rewrite of the same group is reusable
        after a lost race, whatever version it was planned on."""
        masks = hashlib.sha256(b"".join(p.encode() + v.tobytes()
                                        for p, v in sorted(self.masked.items()))).hexdigest()
        return self.batch, (*(s.sha256 for s in self.inputs), masks)

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "key": dict(self.key), "shards_in": len(self.inputs),
                "shards_out": len(self.bins), "rows": self.rows, "bytes_in": self.bytes,
                "rows_masked": self.masked_rows}


@dataclass(frozen=True)
class CompactionPlan:
    dataset: str
    version: int                    # the version the plan was made on (the parent)
    min_bytes: int
    target_bytes: int
    shards_before: int
    groups: list[Group] = field(default_factory=list)

    @property
    def shards_in(self) -> int:
        return sum(len(g.inputs) for g in self.groups)

    @property
    def shards_out(self) -> int:
        return sum(len(g.bins) for g in self.groups)

    @property
    def shards_after(self) -> int:
        return self.shards_before - self.shards_in + self.shards_out

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)

    @property
    def batches(self) -> list[str]:
        return sorted({g.batch for g in self.groups})

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "planned_on_version": self.version,
                "min_mb": self.min_bytes / MiB,
                "target_mb": self.target_bytes / MiB, "shards_before": self.shards_before,
                "shards_after": self.shards_after, "shards_in": self.shards_in,
                "shards_out": self.shards_out, "rows_rewritten": self.rows,
                "batches": len(self.batches), "groups": [g.to_dict() for g in self.groups]}


def split_bins(shards: list[ShardEntry], target_bytes: int, max_rows: int
               ) -> list[list[ShardEntry]]:
    """``shards`` (in order) cut into ``n`` consecutive runs of about equal bytes, ``n``
    the nearest whole number of targets (at least one, and enough for ``max_rows``)."""
    total = sum(s.bytes for s in shards)
    rows = sum(s.rows for s in shards)
    n = max(1, round(total / target_bytes), math.ceil(rows / max_rows))
    bins: list[list[ShardEntry]] = [[] for _ in range(n)]
    done = 0
    for s in shards:
        mid = done + s.bytes / 2          # the shard goes where its middle byte falls
        bins[min(n - 1, int(mid * n / total)) if total else 0].append(s)
        done += s.bytes
    bins = [b for b in bins if b]
    # a run over max_rows (a few huge-row shards) is split further, shard by shard
    out: list[list[ShardEntry]] = []
    for b in bins:
        cur: list[ShardEntry] = []
        for s in b:
            if cur and sum(x.rows for x in cur) + s.rows > max_rows:
                out.append(cur)
                cur = []
            cur.append(s)
        out.append(cur)
    return out


def plan(m: Manifest, *, min_bytes: int, target_bytes: int, max_rows: int) -> CompactionPlan:
    """The compaction of version ``m``: every group of small shards that gets fewer shards.

    Reads every batch list of ``m`` (compaction looks at the whole history, once)."""
    if min_bytes <= 0 or target_bytes <= 0:
        raise ValueError("min and target sizes must be positive")
    shards = m.shards
    masks = m.masks()                # deletion vectors: none, or every masked shard's
    grouped: dict[tuple[str, tuple[tuple[str, str], ...]], list[ShardEntry]] = {}
    for s in shards:
        if s.bytes < min_bytes or s.path in masks:
            grouped.setdefault((s.batch, group_key(s)), []).append(s)
    groups = []
    for (batch, key), small in grouped.items():
        bins = split_bins(small, target_bytes, max_rows)
        mine = {s.path: masks[s.path] for s in small if s.path in masks}
        if len(bins) < len(small) or mine:
            groups.append(Group(batch, key, bins, mine))
    return CompactionPlan(m.dataset, m.version, min_bytes, target_bytes,
                          len(shards), groups)
