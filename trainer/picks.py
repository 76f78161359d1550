"""``Picks``: the samples a window (or an evaluation group) gathers, and the batch gather.

The gather is the loader's hot path. Picks hold, per sample, its segment (one record
batch of one shard: a ``[rows, nbytes]`` uint8 view per gathered column, see
``trainer.columns``) and row, plus class label and key. Runs of consecutive picks from the
same segment are found once, when the picks are built, so a batch is copied with one
``ndarray.take(rows, 0, out)`` per run and column straight into the batch buffer's region
of that column (pinned when CUDA is used), and labels/keys are plain slices: no
per-sample Python, no per-batch sort. numpy releases the GIL for the copies. With a
``ShardArena`` (``trainer.arena``) a window's picks also carry each pick's arena row
(``flat``), and a batch is one ``take`` per column from the arena instead.

A training window is a random permutation of its samples, *sorted within each batch*
by (segment, row) (``select(pos, chunk=batch_size, phase=...)``): the order of samples
inside a batch does not matter to a mean loss, and sorted picks make the runs long (one per
segment the batch touches, ~10 for ten label shards) and read each map front to back.
``phase`` is where batch boundaries fall in the window (a batch may have started in the
previous window); it is a pure function of the epoch's layout, so a resumed run rebuilds
exactly the same window.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.trainer.shard_file import OpenShard

_FIRST, _LAST = np.int64(-1), np.int64(np.iinfo(np.int64).max)
_ROW_MASK = np.int64(0xFFFFFFFF)


@dataclass
class Picks:
    """Samples to gather: a flat list of segments and, per sample, which one and which row."""

    segments: list[tuple[np.ndarray, ...]]   # per segment, per column: [rows, nbytes] uint8
    seg: np.ndarray               # int32 [n] index into ``segments``
    row: np.ndarray               # int64 [n] row within the segment
    label: np.ndarray             # int64 [n] class target (zeros for other targets)
    key: np.ndarray               # int64 [n] (shard ordinal << 32) | row in shard
    runs: list[int] = field(init=False, repr=False)      # start of each same-segment run
    run_seg: list[int] = field(init=False, repr=False)   # its segment
    _sort_key: np.ndarray | None = field(init=False, repr=False, default=None)
    # batch start -> per column, the copies of that full batch: (take, rows, out lo, out hi)
    plans: dict[int, list[list[tuple[Any, np.ndarray, int, int]]]] = field(
        init=False, repr=False, default_factory=dict)
    # with a ``ShardArena``: every pick's row in ``arena`` (one ``take`` per batch and column)
    arena: list[np.ndarray] | None = field(init=False, repr=False, default=None)
    flat: np.ndarray | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if len(self.seg) == 0:
            self.runs, self.run_seg = [], []
            return
        starts = np.concatenate(([0], np.flatnonzero(self.seg[1:] != self.seg[:-1]) + 1))
        self.runs, self.run_seg = starts.tolist(), self.seg[starts].tolist()

    def __len__(self) -> int:
        return len(self.seg)

    def select(self, pos: np.ndarray, chunk: int = 0, phase: int = 0) -> Picks:
        """The picks at positions ``pos`` (a permutation, or a rank's share of one); with
        ``chunk``, each span of ``chunk`` positions starting at ``phase`` (mod ``chunk``)
        is sorted by (segment, row)."""
        if chunk > 1 and len(pos):
            if self._sort_key is None:
                self._sort_key = (self.seg.astype(np.int64) << np.int64(32)) | self.row
            keys = self._sort_key[pos]
            order = _chunk_order(keys, chunk, phase)
            pos, keys = pos[order], keys[order]
            seg, row = (keys >> np.int64(32)).astype(np.int32), keys & _ROW_MASK
        else:
            seg, row = self.seg[pos], self.row[pos]
        return Picks(self.segments, seg, row, self.label[pos], self.key[pos])


def plan_batches(picks: Picks, chunk: int, phase: int) -> None:
    """Work out, once per window, every full batch's copies (``Picks.plans``): one
    ``take`` per column and same-segment run inside each span [phase + k*chunk, +chunk). The batch
    path then only loops over ready tuples; the window build (on the stream's helper
    thread) pays for the bookkeeping instead."""
    n = len(picks)
    starts = np.arange(phase % chunk, n - chunk + 1, chunk, dtype=np.int64)
    if chunk <= 0 or not len(starts):
        return
    cuts = np.unique(np.concatenate((np.asarray(picks.runs, np.int64), starts,
                                     starts + chunk)))
    cuts = cuts[(cuts >= starts[0]) & (cuts <= starts[-1] + chunk)]
    lo, hi = cuts[:-1], cuts[1:]
    batch = (lo - starts[0]) // chunk
    base = starts[0] + batch * chunk
    takes = [[col.take for col in seg] for seg in picks.segments]
    ncols = len(takes[0]) if takes else 0
    row, plans = picks.row, picks.plans
    for a, b, s, k, z in zip(lo.tolist(), hi.tolist(), picks.seg[lo].tolist(),
                             base.tolist(), (lo - base).tolist(), strict=True):
        per_col = plans.get(k)
        if per_col is None:
            per_col = plans[k] = [[] for _ in range(ncols)]
        rows = row[a:b]
        for c in range(ncols):
            per_col[c].append((takes[s][c], rows, z, z + b - a))


def _chunk_order(keys: np.ndarray, chunk: int, phase: int) -> np.ndarray:
    """Positions that sort ``keys`` (all >= 0) within spans [phase + k*chunk, ...)."""
    n = len(keys)
    front = (chunk - phase % chunk) % chunk          # fillers before: first span is short
    back = (-(front + n)) % chunk
    padded = np.concatenate((np.full(front, _FIRST), keys, np.full(back, _LAST)))
    order = np.argsort(padded.reshape(-1, chunk), axis=1)   # fillers sort to their places
    order += np.arange(0, len(padded), chunk, dtype=order.dtype)[:, None]
    return order.ravel()[front:front + n] - front


def build_picks(items: list[tuple[int, OpenShard, np.ndarray, np.ndarray]]) -> Picks:
    """Picks over several open shards: ``items`` = (shard ordinal, shard, rows, labels)."""
    segments: list[tuple[np.ndarray, ...]] = []
    seg_l, row_l, lab_l, key_l = [], [], [], []
    for ordinal, shard, rows, labels in items:
        seg, local = shard.locate(rows)
        seg_l.append(seg + len(segments))
        segments.extend(shard.segments)
        row_l.append(local)
        lab_l.append(labels)
        key_l.append((np.int64(ordinal) << np.int64(32)) | rows)
    if not items:
        empty = np.empty(0, np.int64)
        return Picks([], np.empty(0, np.int32), empty, empty, empty)
    return Picks(segments, np.concatenate(seg_l), np.concatenate(row_l),
                 np.concatenate(lab_l), np.concatenate(key_l))


def gather_into(outs: Sequence[np.ndarray], picks: Picks, lo: int, hi: int, at: int,
                labels: np.ndarray | None = None, keys: np.ndarray | None = None) -> None:
    """Copy picks[lo:hi] (in their order) into each column's ``outs[c][at:at+n]``, labels and
    keys likewise (when given; a batch within one window can use slices of
    ``picks.label``/``key``)."""
    n = hi - lo
    if n <= 0:
        return
    if labels is not None:
        labels[at:at + n] = picks.label[lo:hi]
    if keys is not None:
        keys[at:at + n] = picks.key[lo:hi]
    if picks.arena is not None and picks.flat is not None:
        flat = picks.flat[lo:hi]
        for data, out in zip(picks.arena, outs, strict=True):
            data.take(flat, 0, out[at:at + n], "clip")
        return
    runs = picks.runs
    i, j = bisect_right(runs, lo) - 1, bisect_left(runs, hi)
    bounds = [lo, *runs[i + 1:j], hi]
    segments, row, shift = picks.segments, picks.row, at - lo
    for a, b, s in zip(bounds[:-1], bounds[1:], picks.run_seg[i:j], strict=True):
        for col, out in zip(segments[s], outs, strict=True):
            col.take(row[a:b], 0, out[a + shift:b + shift], "clip")
