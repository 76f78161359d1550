"""The polling sensor's core, ``plan(cursor, listing) -> (events, cursor)``, over cursor
scenarios, and the cursor file. No server: listings are plain records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from shardline.core.errors import ShardlineError
from shardline.infra.events.model import ObjectCreated
from shardline.infra.events.poll import Cursor, default_cursor_path, load_cursor, plan, save_cursor

BUCKET, PREFIX = "lake-bucket", "incoming/"


@dataclass(frozen=True)
class Obj:
    key: str
    etag: str
    size: int = 10


def empty() -> Cursor:
    return Cursor(BUCKET, PREFIX)


def keys(events: list[ObjectCreated]) -> list[str]:
    return [e.key for e in events]


def run(cursor: Cursor, listing: list[Obj]) -> tuple[list[ObjectCreated], Cursor]:
    """One poll; also checks the invariant that the new cursor is exactly the listing."""
    events, new = plan(cursor, listing)
    assert dict(new.seen) == {o.key: o.etag.strip('"') for o in listing if not o.key.endswith("/")}
    assert (new.bucket, new.prefix) == (BUCKET, PREFIX)
    return events, new


def test_first_run_emits_every_object_once() -> None:
    listing = [Obj("incoming/a.json", '"e1"', 3), Obj("incoming/b.csv", "e2", 5)]
    events, cursor = run(empty(), listing)
    assert events == [ObjectCreated(BUCKET, "incoming/a.json", 3, "e1"),
                      ObjectCreated(BUCKET, "incoming/b.csv", 5, "e2")]
    assert events[0].resource_id == f"s3://{BUCKET}/incoming/a.json"


def test_no_change_emits_nothing() -> None:
    listing = [Obj("incoming/a.json", "e1"), Obj("incoming/b.csv", "e2")]
    _, cursor = run(empty(), listing)
    events, again = run(cursor, listing)
    assert events == [] and again == cursor


def test_new_object_is_the_only_event() -> None:
    _, cursor = run(empty(), [Obj("incoming/a.json", "e1")])
    events, _ = run(cursor, [Obj("incoming/a.json", "e1"), Obj("incoming/c.json", "e3")])
    assert keys(events) == ["incoming/c.json"]


def test_reupload_with_new_etag_is_a_new_event_with_a_new_id() -> None:
    first, cursor = run(empty(), [Obj("incoming/a.json", "e1")])
    events, cursor = run(cursor, [Obj("incoming/a.json", "e9", 20)])
    assert keys(events) == ["incoming/a.json"] and events[0].size == 20
    assert events[0].event_id != first[0].event_id
    assert cursor.seen["incoming/a.json"] == "e9"
    # The same ETag again (a quoted listing ETag, as S3 returns it) is not new.
    assert plan(cursor, [Obj("incoming/a.json", '"e9"')])[0] == []


def test_deleted_object_leaves_the_cursor_and_is_new_when_uploaded_again() -> None:
    first, cursor = run(empty(), [Obj("incoming/a.json", "e1"), Obj("incoming/b.json", "e2")])
    events, cursor = run(cursor, [Obj("incoming/b.json", "e2")])
    assert events == [] and "incoming/a.json" not in cursor.seen
    events, _ = run(cursor, [Obj("incoming/a.json", "e1"), Obj("incoming/b.json", "e2")])
    # Uploaded again: an event, with the same id as before (same bytes, same ETag).
    assert keys(events) == ["incoming/a.json"] and events[0].event_id == first[0].event_id


def test_folder_markers_are_not_uploads() -> None:
    events, cursor = run(empty(), [Obj("incoming/", "d41d"), Obj("incoming/x/", "d41d"),
                                   Obj("incoming/x/a.json", "e1")])
    assert keys(events) == ["incoming/x/a.json"] and list(cursor.seen) == ["incoming/x/a.json"]


def test_accepted_part_of_a_failed_post_is_remembered() -> None:
    _, cursor = run(empty(), [Obj("incoming/a.json", "e1")])
    events, _ = run(cursor, [Obj("incoming/a.json", "e1"), Obj("incoming/b.json", "e2"),
                             Obj("incoming/c.json", "e3")])
    partial = cursor.with_events(events[:1])  # b accepted, c not
    retry, _ = plan(partial, [Obj("incoming/a.json", "e1"), Obj("incoming/b.json", "e2"),
                              Obj("incoming/c.json", "e3")])
    assert keys(retry) == ["incoming/c.json"]


def test_cursor_survives_a_restart(tmp_path: Path) -> None:
    path = default_cursor_path(tmp_path, BUCKET, PREFIX)
    assert load_cursor(path, BUCKET, PREFIX) is None
    _, cursor = run(empty(), [Obj("incoming/a b+c.json", "e1"), Obj("incoming/ü.json", "e2")])
    save_cursor(path, cursor)
    loaded = load_cursor(path, BUCKET, PREFIX)
    assert loaded == cursor
    assert plan(loaded, [Obj("incoming/a b+c.json", "e1"), Obj("incoming/ü.json", "e2")])[0] == []
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_cursor_of_another_prefix_or_a_broken_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cursor.json"
    save_cursor(path, Cursor(BUCKET, "other/", {"other/a": "e1"}))
    with pytest.raises(ShardlineError, match=r"belongs to s3://lake-bucket/other/.*--cursor"):
        load_cursor(path, BUCKET, PREFIX)
    path.write_text("{not json")
    with pytest.raises(ShardlineError, match=r"cannot be read.*delete it"):
        load_cursor(path, BUCKET, PREFIX)
    path.write_text(json.dumps({"format": 99}))
    with pytest.raises(ShardlineError, match="not a format-1 cursor"):
        load_cursor(path, BUCKET, PREFIX)
