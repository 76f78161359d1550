"""ThreadPrefetcher: same items as the source alone (its exact consumer-side state:
``test_state_contract``), errors re-raised in the consumer, a dropped prefetcher stops its
thread; the reader's open-shard set stays within its byte bound and is reused across
windows."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import pytest
from torchdata.nodes import BaseNode, Loader

from shardline.trainer.prefetch import ThreadPrefetcher
from shardline.trainer.stream import ShardStream

from .conftest import LocalDigits


class Counter(BaseNode[int]):
    """0, 1, ..., n-1; raises ``fail`` at ``fail_at``; state = next value."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        super().__init__()
        self.n, self.fail_at = n, fail_at

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.i = 0 if initial_state is None else initial_state["i"]

    def next(self) -> int:
        if self.i == self.fail_at:
            raise KeyError(f"broken item {self.i}")
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i - 1

    def get_state(self) -> dict[str, Any]:
        return {"i": self.i}


def _workers() -> int:
    return sum(t.name == "shard-prefetch" for t in threading.enumerate())


@pytest.mark.parametrize(("depth", "group"), [(1, 1), (4, 1), (4, 2), (4, 4)])
def test_same_items_as_the_source(depth: int, group: int) -> None:
    """(Exact resume: ``test_state_contract``.)"""
    assert list(Loader(ThreadPrefetcher(Counter(23), depth, group))) == list(range(23))


def test_source_errors_reach_the_consumer_after_the_items_before_them() -> None:
    it = iter(Loader(ThreadPrefetcher(Counter(10, fail_at=6), 4)))
    assert [next(it) for _ in range(6)] == list(range(6))
    with pytest.raises(KeyError, match="broken item 6"):
        next(it)


def test_end_keeps_raising_stop_iteration() -> None:
    node = ThreadPrefetcher(Counter(3), 2)
    assert list(node) == [0, 1, 2]
    with pytest.raises(StopIteration):
        next(node)


def test_bad_depth_or_group_is_refused() -> None:
    with pytest.raises(ValueError, match="depth=0"):
        ThreadPrefetcher(Counter(3), 0)
    with pytest.raises(ValueError, match="group=5"):
        ThreadPrefetcher(Counter(3), 4, 5)


def test_dropped_prefetcher_stops_its_thread() -> None:
    before = _workers()
    it = iter(Loader(ThreadPrefetcher(Counter(10**9), 4)))
    next(it)
    assert _workers() == before + 1
    del it
    gc.collect()
    deadline = time.time() + 10
    while _workers() > before:
        assert time.time() < deadline, "the prefetch thread outlived its node"
        time.sleep(0.01)


def test_open_shards_are_reused_within_their_byte_bound(local_digits: LocalDigits) -> None:
    plan = local_digits.plan(since=None)
    reader = local_digits.reader()
    s = ShardStream(plan, reader, batch_size=32, epochs=3, seed=0, window_rows=200,
                    window_min_shards=4)
    n = sum(len(b["label"]) for b in s)
    assert n > 0
    assert reader.opened == len(plan.train_shards)   # three epochs, each shard opened once
    pixels = min(e.entry.rows for e in plan.train_shards) * 64
    small = type(reader)(reader.source, local_digits.cfg.dataset, keep_open_bytes=2 * pixels)
    s = ShardStream(plan, small, batch_size=32, epochs=2, seed=0, window_rows=200,
                    window_min_shards=4)
    assert sum(len(b["label"]) for b in s) == 2 * n // 3
    assert small.opened > len(plan.train_shards)      # re-opened: the bound holds
    assert small._open_bytes <= 2 * pixels
