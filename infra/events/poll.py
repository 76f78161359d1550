"""A polling sensor: list a prefix, emit an event per new object version, keep a cursor.

The core is the pure function :func:`plan` of (cursor, listing) -> (events, new cursor), the
way a dagster sensor is written, so every cursor scenario is tested without a server.

The cursor maps every key seen under the prefix to its ETag. An object is new when its key
is absent or its ETag differs (a re-upload with other bytes), so nothing is repeated and
nothing is missed, whatever the clocks say: Last-Modified is not used (it is the start of
an upload, and a long multipart upload can appear after later ones). Deleted keys leave the
cursor, which keeps it as large as the listing (about 100 bytes per object); an object
deleted and uploaded again is therefore new again (with the same event id when the bytes
are the same). S3 listings are strongly consistent; an object that lands while a listing is
paged through is either in it or in the next one.

The cursor is a JSON file written atomically (temporary file, fsync, rename) and only after
the events API accepted the events: a crash in between repeats events (at-least-once),
it never loses one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from shardline.core.errors import ShardlineError, StoreError
from shardline.core.store import Store
from shardline.infra.events.model import (
    EventPostError,
    EventSink,
    ObjectCreated,
    is_upload,
    normalize_etag,
)
from shardline.infra.events.stopping import Stopper

log = logging.getLogger(__name__)
CURSOR_FORMAT = 1


class Listed(Protocol):
    """What a listing entry needs (``shardline.core.store.ObjectInfo`` fits)."""

    @property
    def key(self) -> str: ...
    @property
    def etag(self) -> str: ...
    @property
    def size(self) -> int: ...


@dataclass(frozen=True)
class Cursor:
    """Every object version seen under ``prefix`` of ``bucket``: key -> ETag."""

    bucket: str
    prefix: str
    seen: Mapping[str, str] = field(default_factory=dict)

    def with_events(self, events: Iterable[ObjectCreated]) -> Cursor:
        """This cursor plus the given (accepted) events; nothing is dropped."""
        return Cursor(self.bucket, self.prefix, {**self.seen, **{e.key: e.etag for e in events}})


def plan(cursor: Cursor, listing: Iterable[Listed]) -> tuple[list[ObjectCreated], Cursor]:
    """Events for the object versions of ``listing`` that ``cursor`` has not seen, and the
    cursor to keep once they are accepted (exactly the listing's uploads).

    Folder markers (keys ending in "/") are neither events nor kept.
    """
    events: list[ObjectCreated] = []
    seen: dict[str, str] = {}
    for obj in listing:
        if not is_upload(obj.key):
            continue
        etag = normalize_etag(obj.etag)
        seen[obj.key] = etag
        if cursor.seen.get(obj.key) != etag:
            events.append(ObjectCreated(cursor.bucket, obj.key, int(obj.size), etag))
    return events, Cursor(cursor.bucket, cursor.prefix, seen)


def default_cursor_path(home: Path, bucket: str, prefix: str) -> Path:
    """``<home>/events/poll-<bucket>-<hash of prefix>.json``: one cursor per watched prefix."""
    digest = hashlib.sha256(prefix.encode()).hexdigest()[:12]
    return home / "events" / f"poll-{bucket}-{digest}.json"


def load_cursor(path: Path, bucket: str, prefix: str) -> Cursor | None:
    """The cursor stored at ``path``, or None when there is none yet.

    Raises:
        ShardlineError: the file is unreadable or belongs to another bucket or prefix.
    """
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ShardlineError(f"poll cursor {path} cannot be read ({exc}); delete it to start "
                             "over (every object under the prefix is then emitted again)") from exc
    if not isinstance(doc, dict) or doc.get("format") != CURSOR_FORMAT or \
            not isinstance(doc.get("objects"), dict):
        raise ShardlineError(f"poll cursor {path} is not a format-{CURSOR_FORMAT} cursor; "
                             "delete it to start over")
    if (doc.get("bucket"), doc.get("prefix")) != (bucket, prefix):
        raise ShardlineError(f"poll cursor {path} belongs to s3://{doc.get('bucket')}/"
                             f"{doc.get('prefix')}, not s3://{bucket}/{prefix}; pass another "
                             "--cursor file")
    return Cursor(bucket, prefix, {str(k): str(v) for k, v in doc["objects"].items()})


def save_cursor(path: Path, cursor: Cursor) -> None:
    """Write ``cursor`` atomically: a reader (or a crash) sees the old or the new file."""
    doc: dict[str, Any] = {"format": CURSOR_FORMAT, "bucket": cursor.bucket,
                           "prefix": cursor.prefix,
                           "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
                           "objects": dict(sorted(cursor.seen.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


@dataclass
class PollStats:
    polls: int = 0
    events: int = 0
    event_ids: list[str] = field(default_factory=list)
    failed_posts: int = 0


def poll_once(store: Store, sink: EventSink, cursor_path: Path, prefix: str,
              skip_existing: bool = False) -> list[ObjectCreated]:
    """List ``prefix``, post what is new, then save the cursor; returns the accepted events.

    With ``skip_existing`` and no cursor yet, the current objects only seed the cursor.

    Raises:
        EventPostError: the events API refused them (the cursor then keeps the events that
            were accepted before, so only the rest is posted again).
        StoreError: listing failed.
    """
    stored = load_cursor(cursor_path, store.bucket, prefix)
    cursor = stored or Cursor(store.bucket, prefix)
    events, new = plan(cursor, store.list(prefix))
    if stored is None and skip_existing:
        log.info("seeded cursor %s with %d existing object(s)", cursor_path, len(new.seen))
        save_cursor(cursor_path, new)
        return []
    try:
        sink.post(events)
    except EventPostError as exc:
        if exc.accepted:
            save_cursor(cursor_path, cursor.with_events(events[:exc.accepted]))
        raise
    if stored is None or new.seen != stored.seen:
        save_cursor(cursor_path, new)
    return events


def run_poller(store: Store, sink: EventSink, cursor_path: Path, prefix: str,
               interval_s: float, *, stopper: Stopper | None = None,
               max_events: int | None = None, max_polls: int | None = None,
               skip_existing: bool = False) -> PollStats:
    """Poll every ``interval_s`` until stopped, ``max_polls`` polls or ``max_events`` events.

    A failed listing or post is logged and tried again at the next poll.
    """
    stopper = stopper or Stopper()
    stats = PollStats()
    while not stopper.stopped:
        try:
            events = poll_once(store, sink, cursor_path, prefix, skip_existing)
        except (EventPostError, StoreError) as exc:
            stats.failed_posts += isinstance(exc, EventPostError)
            log.error("poll of s3://%s/%s failed: %s; trying again in %.0fs", store.bucket,
                      prefix, exc, interval_s)
            events = []
        stats.polls += 1
        stats.events += len(events)
        stats.event_ids.extend(str(e.event_id) for e in events)
        if (max_polls is not None and stats.polls >= max_polls) or \
                (max_events is not None and stats.events >= max_events):
            break
        stopper.event.wait(interval_s)
    return stats
