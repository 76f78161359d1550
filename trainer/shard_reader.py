"""The trainer's shard reader: opens planned shards from a source, with each shard's index
computed once per run (ingest's shard writer is ``shardline.tasks``' business).

Open shards are kept across windows and epochs (least recently used first out, bounded by
``keep_open_bytes`` of gathered column data): re-opening costs the IPC footer parse per record batch
and, for LZ4 shards, decompressing the whole shard again every epoch. One shard file on its
own is ``trainer.shard_file``; the batch gather lives in ``trainer.picks``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from shardline.core.config import DatasetConfig
from shardline.core.fields import DatasetInfo, dataset_info
from shardline.trainer.buffers import BufferPool
from shardline.trainer.columns import Layout, layout_for, optional_fields
from shardline.trainer.fetch import ShardSource
from shardline.trainer.plan import PlannedShard
from shardline.trainer.shard_file import OpenShard, ShardFormatError, ShardIndex

DEFAULT_KEEP_OPEN_BYTES = 1 << 30


class ShardReader:
    """Opens planned shards through ``source``; caches their :class:`ShardIndex` and keeps
    up to ``keep_open_bytes`` of recently used shards open (mapped, or decompressed LZ4).

    The columns it serves follow the dataset's fields and target (``info``: default
    ``dataset_info(dataset)``; ``trainer.columns``).

    A shard dropped from the open set is not closed: windows still reading it keep its
    buffers alive, and they are freed when the last one is done. A shard file evicted from
    the disk cache while open keeps its disk blocks until then (POSIX unlink semantics).
    """

    def __init__(self, source: ShardSource, dataset: DatasetConfig,
                 keep_open_bytes: int = DEFAULT_KEEP_OPEN_BYTES,
                 info: DatasetInfo | None = None) -> None:
        self.source = source
        self.info = info if info is not None else dataset_info(dataset)
        self.layout: Layout = layout_for(self.info, optional_fields(dataset))
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
        shard = OpenShard(path, self.layout, key=s.entry.path)
        if shard.rows != s.entry.rows:
            raise ShardFormatError(
                f"shard {s.entry.path} has {shard.rows} rows, its manifest entry says "
                f"{s.entry.rows}; the manifest and the shard disagree: re-publish the version"
            )
        index = None
        if s.ordinal not in self._indexes:
            index = shard.index()
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

    def pool(self, batch_size: int, pin: bool = False) -> BufferPool:
        """Reusable batch buffers for this reader's columns (evaluation, notebook loaders)."""
        return BufferPool(batch_size, self.layout, pin)

    def index(self, s: PlannedShard) -> ShardIndex:
        with self._lock:
            idx = self._indexes.get(s.ordinal)
        if idx is None:
            self.open(s)
            with self._lock:
                idx = self._indexes[s.ordinal]
        return idx
