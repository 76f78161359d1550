"""Opening planned shards from a source, with each shard's index computed once per run,
and the batch gather every consumer (training stream, evaluation) shares.

The gather is the hot path. A batch is a list of (segment, row) picks; they are sorted by
(segment, row) — the order of samples *within* a batch does not matter to a mean loss, and
sorted rows read the map front to back — and each run of picks from one segment is copied
with a single ``ndarray.take(..., out=...)`` straight into the batch buffer (pinned when
CUDA is used). numpy releases the GIL for the copy, so a prefetch thread overlaps it with
compute. Cost per batch: one argsort of B precomputed int64 keys (segment << 32 | row) plus
one call per distinct segment; no per-sample Python.

Open shards are kept across windows and epochs (least recently used first out, bounded by
``keep_open_bytes`` of pixel data): re-opening costs the IPC footer parse per record batch
and, for LZ4 shards, decompressing the whole shard again every epoch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from shardline.config import DatasetConfig
from trainer.fetch import ShardSource
from trainer.plan import PlannedShard
from trainer.shard import OpenShard, ShardFormatError, ShardIndex

DEFAULT_KEEP_OPEN_BYTES = 1 << 30


class ShardReader:
    """Opens planned shards through ``source``; caches their :class:`ShardIndex` and keeps
    up to ``keep_open_bytes`` of recently used shards open (mapped, or decompressed LZ4).

    A shard dropped from the open set is not closed: windows still reading it keep its
    buffers alive, and they are freed when the last one is done. A shard file evicted from
    the disk cache while open keeps its disk blocks until then (POSIX unlink semantics).
    """

    def __init__(self, source: ShardSource, dataset: DatasetConfig,
                 keep_open_bytes: int = DEFAULT_KEEP_OPEN_BYTES) -> None:
        self.source = source
        self.shape = dataset.image.shape
        self.image_column = dataset.image.column
        self.id_column = dataset.id_column
        self.label_column = dataset.label_column
        self.keep_open_bytes = int(keep_open_bytes)
        self._indexes: dict[int, ShardIndex] = {}
        self._open: OrderedDict[str, OpenShard] = OrderedDict()   # sha256 -> open shard
        self._open_bytes = 0
        self._lock = threading.Lock()
        self.opened = 0                 # shard files opened (re-opens included)

    def open(self, s: PlannedShard) -> OpenShard:
        with self._lock:
            shard = self._open.get(s.entry.sha256)
            if shard is not None:
                self._open.move_to_end(s.entry.sha256)
                return shard
        path = self.source.path(s.entry)
        shard = OpenShard(path, self.shape, self.image_column, key=s.entry.path)
        if shard.rows != s.entry.rows:
            raise ShardFormatError(
                f"shard {s.entry.path} has {shard.rows} rows, its manifest entry says "
                f"{s.entry.rows}; the manifest and the shard disagree: re-publish the version"
            )
        index = None
        if s.ordinal not in self._indexes:
            index = shard.index(self.id_column, self.label_column)
        with self._lock:
            self.opened += 1
            if index is not None:
                self._indexes.setdefault(s.ordinal, index)
            self._keep(s.entry.sha256, shard)
        return shard

    def _keep(self, sha: str, shard: OpenShard) -> None:
        """Add ``shard`` to the open set, dropping the least recently used beyond budget."""
        size = shard.rows * shard.nbytes
        if sha in self._open or size > self.keep_open_bytes:
            return
        self._open[sha] = shard
        self._open_bytes += size
        while self._open_bytes > self.keep_open_bytes:
            _, old = self._open.popitem(last=False)
            self._open_bytes -= old.rows * old.nbytes

    def index(self, s: PlannedShard) -> ShardIndex:
        with self._lock:
            idx = self._indexes.get(s.ordinal)
        if idx is None:
            self.open(s)
            with self._lock:
                idx = self._indexes[s.ordinal]
        return idx


@dataclass
class Picks:
    """Samples to gather: a flat list of segments and, per sample, which one and which row."""

    segments: list[np.ndarray]    # [rows, nbytes] uint8 views
    seg: np.ndarray               # int32 [n] index into ``segments``
    row: np.ndarray               # int64 [n] row within the segment
    label: np.ndarray             # int64 [n]
    key: np.ndarray               # int64 [n] (shard ordinal << 32) | row in shard
    order: np.ndarray = field(init=False, repr=False)   # int64 [n] (seg << 32) | row

    def __post_init__(self) -> None:
        self.order = (self.seg.astype(np.int64) << np.int64(32)) | self.row

    def __len__(self) -> int:
        return len(self.seg)

    def select(self, pos: np.ndarray) -> Picks:
        """The picks at positions ``pos`` (a permutation, or a rank's share of one)."""
        return Picks(self.segments, self.seg[pos], self.row[pos], self.label[pos],
                     self.key[pos])


def build_picks(items: list[tuple[int, OpenShard, np.ndarray, np.ndarray]]) -> Picks:
    """Picks over several open shards: ``items`` = (shard ordinal, shard, rows, labels)."""
    segments: list[np.ndarray] = []
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


_ROW_MASK = np.int64(0xFFFFFFFF)


def gather_into(out: np.ndarray, picks: Picks, lo: int, hi: int, at: int,
                labels: np.ndarray, keys: np.ndarray) -> None:
    """Copy picks[lo:hi] into out[at:at+n] (+ labels, keys), sorted by (segment, row)."""
    n = hi - lo
    order = picks.order[lo:hi].argsort()
    sorted_keys = picks.order[lo:hi].take(order)
    order += lo
    picks.label.take(order, out=labels[at:at + n])
    picks.key.take(order, out=keys[at:at + n])
    seg_s = sorted_keys >> np.int64(32)
    row_s = sorted_keys & _ROW_MASK
    cuts = (seg_s[1:] != seg_s[:-1]).nonzero()[0]
    starts = [0, *(cuts + 1).tolist()]
    ends = starts[1:] + [n]
    segments = picks.segments
    for a, b, s in zip(starts, ends, seg_s[starts].tolist(), strict=True):
        segments[s].take(row_s[a:b], 0, out[at + a:at + b], "clip")


class BufferPool:
    """Reusable batch image buffers ``[batch_size, nbytes]`` uint8 (pinned if asked).

    A fresh 38 MB buffer per 224x224x3 batch costs more than the gather itself (page faults;
    torch.empty is slower still), so consumers hand a batch back with :meth:`release` once
    its images are no longer read (on CUDA: after the host-to-device copy, via an event).
    Buffers that are never released are simply garbage-collected; the pool holds at most
    ``max_free`` idle buffers.
    """

    def __init__(self, batch_size: int, nbytes: int, pin: bool = False, max_free: int = 8) -> None:
        self.shape = (batch_size, nbytes)
        self.pin, self.max_free = pin, max_free
        self._free: deque[tuple[torch.Tensor, Any]] = deque()
        self._owned: dict[int, torch.Tensor] = {}
        self._lock = threading.Lock()
        self.allocated = 0

    def acquire(self) -> torch.Tensor:
        with self._lock:
            item = self._free.popleft() if self._free else None
        if item is not None:
            buf, event = item
            if event is not None:
                event.synchronize()
            return buf
        if self.pin:
            buf = torch.empty(self.shape, dtype=torch.uint8, pin_memory=True)
        else:  # numpy's allocation is several times faster than torch.empty for big buffers
            buf = torch.from_numpy(np.empty(self.shape, np.uint8))
        with self._lock:
            self._owned[buf.data_ptr()] = buf
            self.allocated += 1
        return buf

    def release(self, images: torch.Tensor, event: Any = None) -> None:
        """Return the buffer behind ``images`` (a batch's image tensor) for reuse.

        ``event``: a CUDA event recorded after the last read (e.g. the non_blocking copy)."""
        ptr = images.untyped_storage().data_ptr()
        with self._lock:
            buf = self._owned.get(ptr)
            if buf is None:
                return
            if len(self._free) < self.max_free:
                self._free.append((buf, event))
            else:
                del self._owned[ptr]


def as_nchw(images: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """[B, H*W*C] HWC bytes -> [B, C, H, W] view in channels-last memory format (no copy)."""
    h, w, c = shape
    return images.view(-1, h, w, c).permute(0, 3, 1, 2)
