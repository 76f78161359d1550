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
    """Fetches shards into a :class:`ShardCache` on ``threads`` background threads.

    The read-ahead rolls with the reader: the last announced list is remembered, and
    ``max_bytes`` bounds the announced shards the reader has not asked for (``path``)
    since, local or in flight. Each finished download and each ``path`` call tops the
    read-ahead up again, so all threads stay busy while the reader moves (before, shards
    beyond the first ``max_bytes`` of an announcement were fetched one at a time, on
    demand, by ``path``: a 753 MB first window with a 512 MB read-ahead spent its last
    ~240 MB on one thread). A failed download is retried only when it is announced or
    asked for again, never by a top-up.
    """

    def __init__(self, cache: ShardCache, threads: int = 4) -> None:
        if threads <= 0:
            raise ValueError(f"fetch threads must be positive, got {threads=}")
        self.cache = cache
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shard-fetch")
        self._futures: dict[str, Future[Path]] = {}
        self._lock = threading.RLock()  # re-entered by a done callback run at add time
        self._upcoming: list[ShardEntry] = []
        self._start = 0                 # entries before it were asked for (skipped on top-up)
        self._asked: set[str] = set()   # sha256s asked for by ``path`` since the announcement
        self._max_bytes: int | None = None
        self._closed = False

    def prefetch(self, entries: Iterable[ShardEntry], max_bytes: int | None = None) -> None:
        with self._lock:
            self._upcoming, self._start, self._max_bytes = list(entries), 0, max_bytes
            self._asked = set()
            self._top_up(retry_failed=True)

    def _top_up(self, retry_failed: bool = False) -> None:
        """Submit announced entries, in order, while the bytes not asked for yet fit."""
        with self._lock:
            if self._closed:
                return
            ahead = 0   # bytes announced, not asked for yet (local, in flight or submitted)
            for i in range(self._start, len(self._upcoming)):
                e = self._upcoming[i]
                if e.sha256 in self._asked:
                    if i == self._start:
                        self._start += 1
                    continue
                if self._max_bytes is not None and ahead and ahead + e.bytes > self._max_bytes:
                    return
                ahead += e.bytes
                fut = self._futures.get(e.sha256)
                if fut is not None and fut.done() and fut.exception() is None:
                    continue
                if fut is None or (retry_failed and fut.done()):
                    self._submit(e)

    def _submit(self, entry: ShardEntry) -> Future[Path]:
        fut = self._pool.submit(self.cache.ensure, entry)
        self._futures[entry.sha256] = fut
        fut.add_done_callback(lambda _: self._top_up())
        return fut

    def path(self, entry: ShardEntry) -> Path:
        with self._lock:
            fut = self._futures.get(entry.sha256)
            if fut is None or (fut.done() and fut.exception() is not None):
                fut = self._submit(entry)
            self._asked.add(entry.sha256)
        self._top_up()
        path = fut.result()
        if not path.exists():  # evicted since it was fetched: fetch again, synchronously
            path = self.cache.ensure(entry)
        return path

    def close(self) -> None:
        with self._lock:
            self._closed = True
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
