"""Wait for an upload burst to end before detecting what is new.

The upload trigger starts an ingest run about a second after the first upload event (the
debounce in ``prefect.yaml``), while a burst (the demo's 299 objects, a Zarr group being
written chunk by chunk) may still be landing; detecting then would publish half of it as
one version and the rest as another. So the triggered run first waits until nothing under
the incoming prefix has been modified for ``quiet_s`` seconds. After a single upload the
run starts later than that anyway, and this costs one listing.

S3 listings give ``LastModified`` in whole seconds (truncated), so an object listed at
``t`` was written in ``[t, t + 1)``: the quiet period counts from ``t + 1``. ``max_wait_s``
bounds the wait when uploads never pause; the run then ingests what is there, and the
rest is the next run's.

What it lists follows the run's detect (``tasks.detect.settle_scope``): an upload-triggered
run watches the pending upload keys the event bridges write (never ``incoming/``), a
reconciling run the part of ``incoming/`` its listing covers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from shardline.core.store import Store

LISTING_RESOLUTION_S = 1.0


@dataclass(frozen=True)
class Settled:
    waited_s: float
    listings: int
    newest_age_s: float | None   # how long before the end of the wait the newest object landed
    gave_up: bool = False


def newest_age(store: Store, prefix: str, now: float, start_after: str | None = None
               ) -> float | None:
    """Seconds since the newest object under ``prefix`` (after ``start_after``) was
    written, at the latest it can have been (None when there is none)."""
    newest = max((o.last_modified.timestamp() for o in store.list(prefix, start_after)),
                 default=None)
    return None if newest is None else now - (newest + LISTING_RESOLUTION_S)


def wait_until_quiet(store: Store, prefix: str, quiet_s: float,
                     max_wait_s: float = 60.0, poll_s: float = 0.25,
                     clock: Callable[[], float] = time.time,
                     sleep: Callable[[float], None] = time.sleep,
                     start_after: str | None = None) -> Settled:
    """Block until nothing under ``prefix`` (after ``start_after``) was written in the last
    ``quiet_s`` seconds, or ``max_wait_s`` passed. ``quiet_s`` <= 0 returns at once without
    listing."""
    if quiet_s <= 0:
        return Settled(0.0, 0, None)
    start = clock()
    listings = 0
    while True:
        now = clock()
        age = newest_age(store, prefix, now, start_after)
        listings += 1
        if age is None or age >= quiet_s:
            return Settled(now - start, listings, age)
        if now - start >= max_wait_s:
            return Settled(now - start, listings, age, gave_up=True)
        # until it would be quiet if nothing else lands; re-list at least every second
        sleep(min(max(quiet_s - age, poll_s), 1.0))
