"""Event documents and bucket-notification parsing (pure; the servers are in
tests/integration/test_events.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from shardline.infra.events.model import EVENT_NAME, ObjectCreated
from shardline.infra.events.notifications import NotificationError, parse_notification


def record(key: str, name: str = "ObjectCreated:Put", etag: str = "abc", size: Any = 4,
           bucket: str = "bkt") -> dict[str, Any]:
    return {"eventName": name, "s3": {"bucket": {"name": bucket},
                                      "object": {"key": key, "size": size, "eTag": etag}}}


def test_event_document_is_a_function_of_the_object_version() -> None:
    a = ObjectCreated("bkt", "incoming/a.json", 4, '"ABC"')
    b = ObjectCreated("bkt", "incoming/a.json", 4, "abc")
    assert a == b and a.event_id == b.event_id
    # Pinned: a changed id would make every duplicate after an upgrade look new.
    assert a.event_id == uuid.UUID("ddfbae63-7664-5cdb-af40-c57ac3e11cd6")
    doc = a.to_event()
    assert doc["event"] == EVENT_NAME and doc["id"] == str(a.event_id)
    assert doc["resource"]["prefect.resource.id"] == "s3://bkt/incoming/a.json"
    assert doc["payload"] == {"bucket": "bkt", "key": "incoming/a.json", "size": 4,
                              "etag": "abc"}
    other = ObjectCreated("bkt", "incoming/a.json", 4, "abd")
    assert other.event_id != a.event_id


def test_s3_records_decode_keys_and_keep_only_created_objects() -> None:
    doc = {"Records": [record("incoming%2Fa+b%2Bc.json"),
                       record("incoming/x", "ObjectRemoved:Delete"),
                       record("incoming/dir/", size=0), record("incoming/caf%C3%A9.csv")]}
    events = parse_notification(doc)
    assert [e.key for e in events] == ["incoming/a b+c.json", "incoming/café.csv"]


def test_minio_shape_and_sns_envelope_give_the_same_events() -> None:
    s3_doc = {"Records": [record("incoming/a.json")]}
    minio = {"EventName": "s3:ObjectCreated:Put", "Key": "bkt/incoming/a.json",
             "Records": [record("incoming/a.json", name="s3:ObjectCreated:Put")]}
    sns = {"Type": "Notification", "Message": json.dumps(s3_doc)}
    assert parse_notification(s3_doc) == parse_notification(minio) == parse_notification(sns)


def test_test_event_is_no_upload() -> None:
    assert parse_notification({"Service": "Amazon S3", "Event": "s3:TestEvent",
                               "Bucket": "bkt"}) == []


@pytest.mark.parametrize(("doc", "match"), [
    ({"hello": 1}, r"expected an S3 bucket notification with a 'Records' list, got \['hello'\]"),
    ([1, 2], "got list"),
    ({"Records": [{"eventName": "ObjectCreated:Put"}]},
     r"record 0: record has no s3.bucket.name"),
    ({"Records": [record("a", etag="")]}, r"s3://bkt/a needs s3.object.eTag"),
    ({"Records": [record("a", size="4")]}, r"integer s3.object.size, got eTag='abc', size='4'"),
])
def test_malformed_notifications_name_the_field(doc: Any, match: str) -> None:
    with pytest.raises(NotificationError, match=match):
        parse_notification(doc, "SQS message m-1")
