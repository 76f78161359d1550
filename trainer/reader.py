"""Opening planned shards from a source, with each shard's index computed once per run,
and the reusable batch buffers every consumer (training stream, evaluation) fills.

Open shards are kept across windows and epochs (least recently used first out, bounded by
``keep_open_bytes`` of pixel data): re-opening costs the IPC footer parse per record batch
and, for LZ4 shards, decompressing the whole shard again every epoch. The gather itself
lives in ``trainer.picks`` (re-exported here).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Any

import numpy as np
import torch

from shardline.core.config import DatasetConfig
from shardline.trainer.fetch import ShardSource
from shardline.trainer.picks import Picks, build_picks, gather_into
from shardline.trainer.plan import PlannedShard
from shardline.trainer.shard import OpenShard, ShardFormatError, ShardIndex

DEFAULT_KEEP_OPEN_BYTES = 1 << 30
__all__ = ["BufferPool", "Picks", "ShardReader", "as_nchw", "build_picks", "gather_into"]


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
        self._views: dict[int, tuple[np.ndarray, torch.Tensor]] = {}
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

    def views(self, buf: torch.Tensor, shape: tuple[int, int, int]
              ) -> tuple[np.ndarray, torch.Tensor]:
        """(numpy view, full-batch [B, C, H, W] view) of a buffer of this pool, made once per
        buffer: creating torch views costs microseconds, a sizeable part of a small batch."""
        ptr = buf.data_ptr()
        got = self._views.get(ptr)
        if got is None:
            got = self._views[ptr] = (buf.numpy(), as_nchw(buf, shape))
        return got

    def release(self, images: torch.Tensor, event: Any = None) -> None:
        """Return the buffer behind ``images`` (a batch's image tensor) for reuse.

        ``event``: a CUDA event recorded after the last read (e.g. the non_blocking copy)."""
        ptr = images.data_ptr()
        with self._lock:
            buf = self._owned.get(ptr)
            if buf is None:
                ptr = images.untyped_storage().data_ptr()
                buf = self._owned.get(ptr)
                if buf is None:
                    return
            if len(self._free) < self.max_free:
                self._free.append((buf, event))
            else:
                del self._owned[ptr]
                self._views.pop(ptr, None)


def as_nchw(images: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """[B, H*W*C] HWC bytes -> [B, C, H, W] view in channels-last memory format (no copy)."""
    h, w, c = shape
    return images.view(-1, h, w, c).permute(0, 3, 1, 2)
