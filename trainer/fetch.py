"""Where the loader gets local shard files: fetched ahead of use, or already on disk.

``ShardFetcher`` runs cache downloads on a small thread pool. The loader announces the
shards it will need, in the order it will need them (``prefetch``), a bounded number of bytes
ahead; ``path`` then blocks only if that shard's download has not finished yet, which is
the data wait the trainer reports. Downloads are mostly I/O (which releases the GIL), so
threads overlap them with training compute, and the first epoch streams while it fetches.

``LocalShards`` serves a dataset whose shard paths are files under a local folder (tests,
or a copy of a version on local disk); it has the same two methods.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from shardline.core.errors import StoreError
from shardline.core.manifest import ShardEntry
from shardline.trainer.cache import ShardCache


class ShardSource(Protocol):
    def prefetch(self, entries: Iterable[ShardEntry], max_bytes: int | None = None) -> None:
        """Start making ``entries`` local, in order, up to ``max_bytes`` not yet local."""

    def path(self, entry: ShardEntry) -> Path:
        """A local, verified file with the shard's bytes (blocks until there is one)."""


class ShardFetcher:
    """Fetches shards into a :class:`ShardCache` on ``threads`` background threads."""

    def __init__(self, cache: ShardCache, threads: int = 4) -> None:
        if threads <= 0:
            raise ValueError(f"fetch threads must be positive, got {threads=}")
        self.cache = cache
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shard-fetch")
        self._futures: dict[str, Future[Path]] = {}
        self._lock = threading.Lock()

    def prefetch(self, entries: Iterable[ShardEntry], max_bytes: int | None = None) -> None:
        ahead = 0   # bytes announced but not local yet (in flight or newly submitted)
        for e in entries:
            with self._lock:
                fut = self._futures.get(e.sha256)
                if fut is not None and fut.done() and fut.exception() is None:
                    continue
                if max_bytes is not None and ahead and ahead + e.bytes > max_bytes:
                    return
                if fut is None or fut.done():
                    self._futures[e.sha256] = self._pool.submit(self.cache.ensure, e)
            ahead += e.bytes

    def path(self, entry: ShardEntry) -> Path:
        with self._lock:
            fut = self._futures.get(entry.sha256)
            if fut is None or (fut.done() and fut.exception() is not None):
                fut = self._pool.submit(self.cache.ensure, entry)
                self._futures[entry.sha256] = fut
        path = fut.result()
        if not path.exists():  # evicted since it was fetched: fetch again, synchronously
            path = self.cache.ensure(entry)
        return path

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class LocalShards:
    """Shards whose ``entry.path`` is relative to a local folder; nothing is fetched."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def prefetch(self, entries: Iterable[ShardEntry], max_bytes: int | None = None) -> None:
        return None

    def path(self, entry: ShardEntry) -> Path:
        p = self.root / entry.path
        if not p.is_file():
            raise StoreError(f"shard {entry.path} is not a file under {self.root}; "
                             "point LocalShards at the folder the manifest's paths are under")
        return p
