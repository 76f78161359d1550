"""Which part of ``incoming/`` a reconciling detect lists: the decisions, as pure functions,
and the state they keep in the ledger (``ledger/listing.json``).

A reconciling run (the schedule, ``shardline ingest``) backs up the event path: it finds
uploads whose event was lost. Listing all of ``incoming/`` makes it O(history), so where
the layout allows it (``incremental_listing``: upload keys sort in upload order by their
first path segment below ``incoming``, e.g. ``incoming/ds/2026-11-26/...``), it lists only
keys after a high-water mark (S3 ``ListObjectsV2 StartAfter``) and, every
``full_listing_every_hours`` by the store's clock or when asked (``--full``), everything:
Databricks Auto Loader's incremental listing plus ``backfillInterval``.

The mark sits just before the *partition* (first path segment) of the oldest upload not
yet resolved (claimed or set aside), else of the newest partition listed: so the newest
partition is always listed again (uploads still landing in it are found), and an upload
that is not ingested yet keeps its partition in every listing until it is. An upload into
an older partition after the mark passed it is found by its event or the next full listing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shardline.core import layout
from shardline.core.errors import StoreError
from shardline.core.store import Store

STATE_FORMAT = 1


@dataclass(frozen=True)
class ListingState:
    """What the reconciling detects of a dataset know: list keys after ``start_after``
    (None: from the start); the last full listing was at ``full_at`` (store time)."""

    start_after: str | None = None
    full_at: datetime | None = None


@dataclass(frozen=True)
class ListingPlan:
    full: bool
    start_after: str | None
    why: str


def plan_listing(state: ListingState | None, incremental: bool, every: timedelta,
                 now: datetime | None, force_full: bool = False) -> ListingPlan:
    """A full listing when asked, when the layout is not declared ordered, when none was
    recorded, or when the last one is ``every`` old at the store time ``now``; otherwise
    the keys after the recorded mark."""
    if force_full:
        return ListingPlan(True, None, "a full listing was asked for")
    if not incremental:
        return ListingPlan(True, None, "incremental_listing is off")
    if state is None or state.full_at is None:
        return ListingPlan(True, None, "no full listing recorded yet")
    if now is None or now - state.full_at >= every:
        return ListingPlan(True, None, f"the last full listing ({state.full_at:%Y-%m-%d %H:%M}"
                                       f" UTC) is older than {every}")
    return ListingPlan(False, state.start_after,
                       f"incremental, after {state.start_after!r}" if state.start_after
                       else "incremental, from the start (nothing listed yet)")


def partition(incoming: str, key: str) -> str:
    """The first path segment of ``key`` below ``incoming`` (a flat key: its name)."""
    return key[len(incoming):].split("/", 1)[0]


def before(s: str) -> str:
    """The greatest string sorting before ``s`` that a key can practically follow: every key
    starting with ``s`` sorts after it, (almost) no other (StartAfter excludes its own
    value, so ``s`` itself cannot be the mark: a flat key would be skipped)."""
    last = ord(s[-1]) if s else 0
    if last <= 1 or 0xD800 <= last - 1 <= 0xDFFF:
        return s[:-1]
    return s[:-1] + chr(last - 1) + "\U0010ffff"


def next_start_after(incoming: str, listed: Iterable[str], unresolved: Iterable[str],
                     current: str | None) -> str | None:
    """Where the next incremental listing starts: before the partition of the oldest
    unresolved key, else before the newest partition listed (``current`` if none)."""
    waiting = [partition(incoming, k) for k in unresolved]
    if waiting:
        return before(incoming + min(waiting, key=str.encode))
    parts = [partition(incoming, k) for k in listed]
    return before(incoming + max(parts, key=str.encode)) if parts else current


def read_state(store: Store, prefix: str) -> ListingState | None:
    """The recorded state, or None (none yet, or written by a newer format)."""
    key = layout.listing_state_key(prefix)
    try:
        doc = store.get_json(key)
    except StoreError:
        if store.head(key) is None:
            return None
        raise
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        return None
    full_at = doc.get("full_at")
    return ListingState(doc.get("start_after"),
                        datetime.fromisoformat(full_at) if full_at else None)


def write_state(store: Store, prefix: str, state: ListingState) -> None:
    """Record ``state`` (a plain PUT: racing reconcilers each write a mark that is safe for
    what they listed; a full listing repairs any mark that moved too far)."""
    doc = {"format": STATE_FORMAT, "start_after": state.start_after,
           "full_at": state.full_at.isoformat() if state.full_at else None}
    store.put_bytes(layout.listing_state_key(prefix), json.dumps(doc).encode(),
                    content_type="application/json")
