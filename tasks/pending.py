"""Pending upload keys: how the upload-triggered ingest learns which objects are new
without listing ``incoming/``.

Every event bridge (SQS consumer, webhook, poller: ``infra/events``) records the object of
each upload event as an empty marker ``events/pending/<key>/<ETag>`` *before* it posts the
event (``core.layout.pending_key``), so the run the event triggers always finds it. The
debounced trigger fires once per burst and carries no keys; the run lists the markers
under its dataset's incoming prefix (O(pending), not O(history)), HEADs exactly those keys
and ingests them. A marker is deleted only once its object is resolved: claimed by a
published version, set aside, or gone (a reconciling run deletes those of the claimed
uploads it listed). A run that dies leaves its markers for the next
one; an event lost before its marker was written is found by the next reconciling run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from shardline.core import layout
from shardline.core.store import ObjectInfo, Store

log = logging.getLogger(__name__)


def markers(store: Store, incoming: str) -> dict[str, list[str]]:
    """Upload key -> its marker keys (one per ETag an event named), under ``incoming``."""
    out: dict[str, list[str]] = {}
    for o in store.list(layout.pending_prefix(incoming)):
        named = layout.pending_upload(o.key)
        if named is not None:
            out.setdefault(named[0], []).append(o.key)
    return out


def head_all(store: Store, keys: Iterable[str]) -> list[ObjectInfo]:
    """HEAD each key (in parallel); keys that are gone are left out."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        return [i for i in pool.map(store.head, sorted(set(keys))) if i is not None]


def resolved(pending: Mapping[str, list[str]], source_of: Mapping[str, tuple[str, str]],
             done: set[tuple[str, str]], missing_is_gone: bool = True) -> list[str]:
    """The markers to delete: of uploads whose source (key, ETag) is in ``done`` (claimed
    or set aside), and of uploads with no ``source_of`` entry when that means they are gone
    (``missing_is_gone``: they were HEADed; a listing from a mark does not see them all)."""
    out: list[str] = []
    for key, keys in pending.items():
        src = source_of.get(key)
        if (src is None and missing_is_gone) or (src is not None and src in done):
            out.extend(keys)
    return out


def consume(store: Store, keys: list[str]) -> None:
    """Delete resolved markers (a failure only delays it to the next run)."""
    if keys:
        store.delete(keys)
        log.info("consumed %d pending upload key(s)", len(keys))
