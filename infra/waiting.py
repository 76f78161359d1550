"""Polling helpers shared by the demo, the benchmarks and the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float,
             every_s: float = 1.0) -> T:
    """Call ``check`` until it returns something truthy, and return that.

    Raises:
        TimeoutError: naming ``what`` and where to look, once ``timeout_s`` has passed.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every_s)
    raise TimeoutError(f"gave up waiting for {what} after {timeout_s:.0f}s; see the Prefect UI "
                       "and $SHARDLINE_HOME/logs/worker.log")
