"""The quiet-period wait before a triggered ingest's detect (tasks/settle.py), on a fake
listing and a fake clock: a burst still landing is waited out; a quiet prefix costs one
listing; the wait is bounded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shardline.core.store import ObjectInfo
from shardline.tasks.settle import wait_until_quiet


class Burst:
    """A prefix that receives one object every ``every_s`` until ``until`` (fake time)."""

    def __init__(self, start: float, until: float, every_s: float = 0.05) -> None:
        self.now, self.start, self.until, self.every_s = start, start, until, every_s
        self.listings = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s > 0
        self.now += s

    def list(self, prefix: str, start_after: str | None = None) -> list[ObjectInfo]:
        self.listings += 1
        last = min(self.now, self.until)
        n = int((last - self.start) / self.every_s) + 1
        out = []
        for i in range(n):
            t = self.start + i * self.every_s
            # S3 listings truncate LastModified to whole seconds
            lm = datetime.fromtimestamp(int(t), UTC)
            out.append(ObjectInfo(f"{prefix}o{i:05d}", f"e{i}", 1, lm))
        return out


def test_a_burst_still_landing_is_waited_out_until_the_quiet_period() -> None:
    b = Burst(start=1000.0, until=1007.3)
    got = wait_until_quiet(b, "incoming/", quiet_s=2.0, clock=b.clock, sleep=b.sleep)  # type: ignore[arg-type]
    assert not got.gave_up
    # the last object landed at 1007.3 (listed as 1007): quiet from 1008 on, so >= 1010
    assert b.now >= 1010.0 and b.now - 1007.3 <= 2.0 + 1.0 + 1.0
    assert got.newest_age_s is not None and got.newest_age_s >= 2.0


def test_a_quiet_prefix_costs_one_listing_and_no_wait() -> None:
    b = Burst(start=1000.0, until=1000.0)
    b.now = 1004.0
    got = wait_until_quiet(b, "incoming/", quiet_s=2.0, clock=b.clock, sleep=b.sleep)  # type: ignore[arg-type]
    assert got.waited_s == 0.0 and got.listings == 1 == b.listings


def test_zero_quiet_does_not_list_and_an_endless_trickle_is_bounded() -> None:
    b: Any = Burst(start=1000.0, until=10_000.0)
    assert wait_until_quiet(b, "incoming/", quiet_s=0.0).listings == 0
    got = wait_until_quiet(b, "incoming/", quiet_s=2.0, max_wait_s=30.0, clock=b.clock,
                           sleep=b.sleep)
    assert got.gave_up and 30.0 <= got.waited_s <= 31.0


def test_an_empty_prefix_is_quiet() -> None:
    class Empty:
        def list(self, prefix: str, start_after: str | None = None) -> list[ObjectInfo]:
            return []

    got = wait_until_quiet(Empty(), "incoming/", quiet_s=2.0)  # type: ignore[arg-type]
    assert got.newest_age_s is None and got.waited_s < 1.0
