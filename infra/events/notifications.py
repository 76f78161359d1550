"""Read S3 bucket-notification documents (AWS via SQS, or MinIO via webhook).

Both use the same shape::

    {"Records": [{"eventName": "ObjectCreated:Put",             # MinIO: "s3:ObjectCreated:Put"
                  "s3": {"bucket": {"name": "b"},
                         "object": {"key": "incoming/a+b.json",  # URL-encoded, '+' = space
                                    "size": 12, "eTag": "9dd4..."}}}]}

MinIO adds ``EventName`` and ``Key`` at the top level. AWS sends one ``s3:TestEvent`` (no
``Records``) when a notification is configured; S3 -> SNS -> SQS wraps the document in an
SNS envelope (``{"Type": "Notification", "Message": "<json>"}``). Only ``ObjectCreated:*``
records of real objects (not folder markers) become events.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_plus

from shardline.core.errors import ShardlineError
from shardline.infra.events.model import ObjectCreated, is_upload


class NotificationError(ShardlineError):
    """A document is not an S3 bucket notification; the message names the field."""


def _field(record: dict[str, Any], path: tuple[str, ...], where: str) -> Any:
    value: Any = record
    for name in path:
        if not isinstance(value, dict) or name not in value:
            raise NotificationError(f"{where}: record has no {'.'.join(path)}; expected an "
                                    "S3 bucket notification record")
        value = value[name]
    return value


def _record(record: Any, where: str) -> ObjectCreated | None:
    if not isinstance(record, dict):
        raise NotificationError(f"{where}: a record must be a JSON object, got "
                                f"{type(record).__name__}")
    name = str(_field(record, ("eventName",), where)).removeprefix("s3:")
    if not name.startswith("ObjectCreated:"):
        return None
    bucket = _field(record, ("s3", "bucket", "name"), where)
    key = unquote_plus(str(_field(record, ("s3", "object", "key"), where)))
    obj = _field(record, ("s3", "object"), where)
    etag = obj.get("eTag") or obj.get("etag") or obj.get("ETag")
    size = obj.get("size")
    if not etag or not isinstance(size, int) or isinstance(size, bool):
        raise NotificationError(f"{where}: ObjectCreated record for s3://{bucket}/{key} needs "
                                f"s3.object.eTag and an integer s3.object.size, got "
                                f"eTag={etag!r}, size={size!r}")
    if not is_upload(key):
        return None
    return ObjectCreated(str(bucket), key, size, str(etag))


def unwrap(doc: Any) -> Any:
    """The notification inside an SNS envelope, or ``doc`` itself."""
    if isinstance(doc, dict) and doc.get("Type") == "Notification" and "Message" in doc:
        try:
            return json.loads(doc["Message"])
        except (TypeError, ValueError) as exc:
            raise NotificationError(f"SNS envelope whose Message is not JSON: {exc}") from exc
    return doc


def is_test_event(doc: Any) -> bool:
    """The ``s3:TestEvent`` S3 sends when a notification is configured (no ``Records``)."""
    return isinstance(doc, dict) and doc.get("Event") == "s3:TestEvent" and "Records" not in doc


def parse_notification(doc: Any, where: str = "notification") -> list[ObjectCreated]:
    """The uploads a notification reports: [] for a test event or records of other kinds.

    Args:
        doc: the decoded JSON document (SNS envelope allowed).
        where: what the document is, for error messages (e.g. "SQS message 3f2a...").

    Raises:
        NotificationError: not a bucket notification, or a record lacks a needed field.
    """
    doc = unwrap(doc)
    if is_test_event(doc):
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("Records"), list):
        shape = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
        raise NotificationError(f"{where}: expected an S3 bucket notification with a "
                                f"'Records' list, got {shape}")
    events = [_record(r, f"{where} record {i}") for i, r in enumerate(doc["Records"])]
    return [e for e in events if e is not None]
