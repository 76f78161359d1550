"""``ThreadPrefetcher``: run a node on one background thread, a bounded number of items ahead.

It does what ``torchdata.nodes.Prefetcher`` does for the training stream, with a cheaper
hand-off. torchdata's version moves every item through ``queue.Queue`` (a Python-level
lock and condition per put/get, plus a timed wait), a bounded semaphore and a locked
snapshot store; at ~5,000 small batches/s that bookkeeping, serialised on the GIL between
the two threads, cost about 30 % of the loader's throughput (measured in
``bench/loader.py``). Here items and free slots travel through two C-implemented
``queue.SimpleQueue`` objects, and the source's state is snapshotted after every item (the
stream's state is three integers), so the consumer-side state is exact for resume.

Semantics kept from torchdata: ``get_state`` is the source state after the last item the
consumer received; ``reset`` stops the thread before resetting the source; an exception in
the source is re-raised in the consumer (with its traceback); after the end, ``next``
keeps raising ``StopIteration``. The worker thread holds no reference to the node, so a
node that is dropped without being exhausted is collected and its thread told to stop.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any, Generic, TypeVar

from torchdata.nodes import BaseNode

T = TypeVar("T")

_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Worker:
    """The background side: pulls from ``source`` while it holds free slots, and hands items
    over in groups of up to ``group`` (or as soon as it has no free slot left)."""

    def __init__(self, source: BaseNode[Any], depth: int, group: int) -> None:
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.slots: queue.SimpleQueue[bool] = queue.SimpleQueue()
        for _ in range(depth):
            self.slots.put(True)
        self.stopping = False
        self.thread = threading.Thread(target=self._run, args=(source, group), daemon=True,
                                       name="shard-prefetch")
        self.thread.start()

    def _run(self, source: BaseNode[Any], group: int) -> None:
        put, slots = self.items.put, self.slots
        pending: list[tuple[Any, Any]] = []
        try:
            while not self.stopping:
                try:
                    ok = slots.get(block=not pending)
                except queue.Empty:        # items are waiting and no slot is free: hand over
                    put(pending)
                    pending = []
                    continue
                if not ok or self.stopping:
                    return
                pending.append((next(source), source.state_dict()))
                if len(pending) >= group:
                    put(pending)
                    pending = []
        except StopIteration:
            put(pending + [_END])
        except BaseException as exc:  # handed to the consumer, re-raised there
            put(pending + [_Failed(exc)])

    def stop(self, wait: bool = True) -> None:
        self.stopping = True
        self.slots.put(False)
        if wait and self.thread is not threading.current_thread():
            self.thread.join()


class ThreadPrefetcher(BaseNode[T], Generic[T]):
    SOURCE_KEY = "source"

    def __init__(self, source: BaseNode[T], depth: int, group: int | None = None) -> None:
        super().__init__()
        group = depth if group is None else group
        if depth <= 0 or not 0 < group <= depth:
            raise ValueError(f"{depth=} must be positive (use no prefetcher for 0) and "
                             f"{group=} within [1, depth]")
        self.source, self.depth, self.group = source, depth, group
        self._ready: deque[Any] = deque()
        self._worker: _Worker | None = None
        self._state: dict[str, Any] | None = None
        self._ended = False

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._shutdown()
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])
        self._state = self.source.state_dict()
        self._ended = False
        self._ready.clear()
        self._worker = _Worker(self.source, self.depth, self.group)

    def next(self) -> T:
        worker = self._worker
        if self._ended or worker is None:
            raise StopIteration
        if not self._ready:
            self._ready.extend(worker.items.get())
        got = self._ready.popleft()
        if got is _END:
            self._ended = True
            raise StopIteration
        if isinstance(got, _Failed):
            self._ended = True
            raise got.exc
        item, self._state = got
        worker.slots.put(True)
        return item

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._state}

    def _shutdown(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def __del__(self) -> None:
        worker = getattr(self, "_worker", None)
        if worker is not None:
            worker.stop(wait=False)
