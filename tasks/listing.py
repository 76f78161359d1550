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

Some sub-folders of ``incoming/`` are streams of their own (:data:`STREAMS`: corrections/,
deletions/),
ordered by their own first path segment: each keeps its own mark, and the listing of the
main stream jumps over them (one extra LIST request each), so such a folder neither
hides new dates nor is re-listed in full.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shardline.core import layout
from shardline.core.errors import StoreError
from shardline.core.store import ObjectInfo, Store

STATE_FORMAT = 1
# sub-folders of the incoming prefix that are ordered streams of their own
STREAMS: tuple[str, ...] = (layout.CORRECTIONS, layout.DELETIONS)
_TOP = "\U0010ffff"          # sorts after every character a key holds


@dataclass(frozen=True)
class ListingState:
    """What the reconciling detects of a dataset know: per stream (``""``: the main one,
    else a :data:`STREAMS` folder) list keys after its mark (absent: from the start); the
    last full listing was at ``full_at`` (store time)."""

    marks: Mapping[str, str] = field(default_factory=dict)
    full_at: datetime | None = None


@dataclass(frozen=True)
class ListingPlan:
    full: bool
    marks: Mapping[str, str]
    why: str


def plan_listing(state: ListingState | None, incremental: bool, every: timedelta,
                 now: datetime | None, force_full: bool = False) -> ListingPlan:
    """A full listing when asked, when the layout is not declared ordered, when none was
    recorded, or when the last one is ``every`` old at the store time ``now``; otherwise
    the keys after the recorded marks."""
    if force_full:
        return ListingPlan(True, {}, "a full listing was asked for")
    if not incremental:
        return ListingPlan(True, {}, "incremental_listing is off")
    if state is None or state.full_at is None:
        return ListingPlan(True, {}, "no full listing recorded yet")
    if now is None or now - state.full_at >= every:
        return ListingPlan(True, {}, f"the last full listing ({state.full_at:%Y-%m-%d %H:%M}"
                                     f" UTC) is older than {every}")
    return ListingPlan(False, dict(state.marks),
                       f"incremental, after {dict(state.marks)}" if state.marks
                       else "incremental, from the start (nothing listed yet)")


def stream_of(incoming: str, key: str) -> str:
    """The :data:`STREAMS` folder ``key`` lies in, else ``""`` (the main stream)."""
    rest = key[len(incoming):]
    return next((s for s in STREAMS if rest.startswith(s)), "")


def partition(incoming: str, key: str) -> str:
    """The first path segment of ``key`` below its stream's root (a flat key: its name)."""
    return key[len(incoming) + len(stream_of(incoming, key)):].split("/", 1)[0]


def before(s: str) -> str:
    """The greatest string sorting before ``s`` that a key can practically follow: every key
    starting with ``s`` sorts after it, (almost) no other (StartAfter excludes its own
    value, so ``s`` itself cannot be the mark: a flat key would be skipped)."""
    last = ord(s[-1]) if s else 0
    if last <= 1 or 0xD800 <= last - 1 <= 0xDFFF:
        return s[:-1]
    return s[:-1] + chr(last - 1) + _TOP


def next_marks(incoming: str, listed: Iterable[str], unresolved: Iterable[str],
               current: Mapping[str, str]) -> dict[str, str]:
    """Where each stream's next incremental listing starts: before the partition of its
    oldest unresolved key, else before its newest partition listed (else as it was)."""
    out = dict(current)
    waiting: dict[str, list[str]] = {}
    seen: dict[str, list[str]] = {}
    for k in unresolved:
        waiting.setdefault(stream_of(incoming, k), []).append(partition(incoming, k))
    for k in listed:
        seen.setdefault(stream_of(incoming, k), []).append(partition(incoming, k))
    for stream in {*waiting, *seen}:
        if stream in waiting:
            p = min(waiting[stream], key=str.encode)
        else:
            p = max(seen[stream], key=str.encode)
        out[stream] = before(incoming + stream + p)
    return out


def list_incoming(store: Store, incoming: str, marks: Mapping[str, str] | None
                  ) -> Iterator[ObjectInfo]:
    """Every key under ``incoming`` (``marks`` None), or each stream's keys after its mark:
    the main stream's listing jumps over the :data:`STREAMS` folders, listed on their own."""
    if marks is None:
        yield from store.list(incoming)
        return
    after: str | None = marks.get("")
    while True:
        jumped = False
        for o in store.list(incoming, after):
            stream = stream_of(incoming, o.key)
            if stream:
                after, jumped = incoming + stream + _TOP, True
                break
            yield o
        if not jumped:
            break
    for stream in STREAMS:
        yield from store.list(incoming + stream, marks.get(stream))


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
    marks = doc.get("marks") or {}
    return ListingState({str(k): str(v) for k, v in marks.items()},
                        datetime.fromisoformat(full_at) if full_at else None)


def write_state(store: Store, prefix: str, state: ListingState) -> None:
    """Record ``state`` (a plain PUT: racing reconcilers each write marks that are safe for
    what they listed; a full listing repairs any mark that moved too far)."""
    doc = {"format": STATE_FORMAT, "marks": dict(sorted(state.marks.items())),
           "full_at": state.full_at.isoformat() if state.full_at else None}
    store.put_bytes(layout.listing_state_key(prefix), json.dumps(doc).encode(),
                    content_type="application/json")
