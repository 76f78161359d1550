"""The latest version of a dataset, found without listing ``versions/``.

Each version document is committed with ``If-None-Match: *`` on the number after its parent,
so the committed numbers are 1..L with no hole. ``versions/latest.json`` is a hint: moved
forward by compare-and-swap after each commit, it may lag (a killed or outrun publisher) but
never leads. A reader takes the hint P (no hint: one listing, datasets older than it), HEADs
P+1, P+2, ... until one is missing, and one number further: a document after a missing one
means a hole (a deleted document), refused in one line. A stale hint costs a probe or a lost
race, never a commit on a stale parent: the If-None-Match commit decides.
"""

from __future__ import annotations

import json
import logging

from shardline.core import layout
from shardline.core.errors import ObjectChanged, ObjectExists, PermanentStoreError, StoreError
from shardline.core.store import Store

log = logging.getLogger(__name__)

HINT_TRIES = 5


class VersionChainBroken(PermanentStoreError):
    """A version document the chain needs is missing (deleted or never restored)."""


def _parse(data: bytes) -> int | None:
    try:
        v = int(json.loads(data)["version"])
    except (ValueError, KeyError, TypeError):
        return None
    return v if v >= 1 else None


def read_hint(store: Store, prefix: str) -> int | None:
    """The version the hint names (None: no hint, or an unreadable one)."""
    key = layout.latest_pointer_key(prefix)
    try:
        data = store.get_bytes(key)
    except StoreError:
        if store.head(key) is None:
            return None
        data = store.get_bytes(key)    # a racer wrote the first hint between GET and HEAD
    v = _parse(data)
    if v is None:
        log.warning("%s is not a latest-version hint; finding the latest by listing",
                    store.uri(key))
    return v


def list_versions(store: Store, prefix: str) -> list[int]:
    """Every committed version number, ascending: one listing of ``versions/`` (for the
    version table; finding the latest does not need it)."""
    found = (layout.version_of_key(o.key) for o in store.list(layout.versions_prefix(prefix)))
    return sorted(v for v in found if v is not None)


def broken(store: Store, prefix: str, missing: int, why: str) -> VersionChainBroken:
    key = layout.version_key(prefix, missing)
    return VersionChainBroken(
        f"dataset version chain under s3://{store.bucket}/{prefix}/versions/ is broken: "
        f"{key.rsplit('/', 1)[1]} is missing but {why}; restore that document from a backup "
        "(or the bucket's object versions) before ingesting or reading again")


def latest_version(store: Store, prefix: str) -> int | None:
    """The latest committed version number (None: the dataset has no version).

    Raises:
        VersionChainBroken: a version after the first missing one exists.
    """
    hint = read_hint(store, prefix)
    if hint is None:
        listed = list_versions(store, prefix)
        return listed[-1] if listed else None
    v = hint
    while store.head(layout.version_key(prefix, v + 1)) is not None:
        v += 1
    if store.head(layout.version_key(prefix, v + 2)) is not None:
        raise broken(store, prefix, v + 1, f"version {v + 2} exists")
    return v


def advance_hint(store: Store, prefix: str, version: int) -> None:
    """Move the hint forward to ``version`` (just committed) by compare-and-swap; never
    backward. Best effort: a hint left behind only makes readers probe one more step."""
    key = layout.latest_pointer_key(prefix)
    body = json.dumps({"version": version}).encode()
    try:
        for _ in range(HINT_TRIES):
            info = store.head(key)
            try:
                if info is None:
                    store.put_bytes(key, body, if_none_match=True,
                                    content_type="application/json")
                    return
                current = _parse(store.get_bytes(key, if_match=info.etag))
                if current is not None and current >= version:
                    return
                store.put_bytes(key, body, if_match=info.etag, content_type="application/json")
                return
            except (ObjectExists, ObjectChanged):
                continue        # another publisher moved it: read it again
        log.info("%s: left behind after %d races; readers probe forward", key, HINT_TRIES)
    except StoreError as exc:   # the commit is done; the hint can wait for the next one
        log.warning("could not move the latest-version hint to %d: %s", version, exc)
