"""The webhook receiver's JSON nesting check: linear, no recursion, strings ignored."""

from __future__ import annotations

import json

import pytest

from shardline.infra.events.webhook import nesting_exceeds


@pytest.mark.parametrize(("body", "limit", "exceeds"), [
    (b'{"a": [1, {"b": 2}]}', 3, False),
    (b'{"a": [1, {"b": 2}]}', 2, True),
    (b'{"k": "[[[[[[[[[[{{{{{{{{"}', 1, False),        # brackets inside a string
    (b'{"k": "\\\\"}', 1, False),                       # an escaped backslash ends the string
    (b'{"k": "\\"[[[["}', 1, False),                     # an escaped quote does not
    (b"[" * 100_000 + b"]" * 100_000, 32, True),          # where json.loads would recurse
    (b"[]" * 50_000, 1, False),                           # wide is not deep
])
def test_nesting_exceeds(body: bytes, limit: int, exceeds: bool) -> None:
    assert nesting_exceeds(body, limit) is exceeds


def test_a_real_notification_is_well_under_the_default_depth() -> None:
    doc = {"EventName": "s3:ObjectCreated:Put", "Key": "b/k", "Records": [
        {"s3": {"bucket": {"name": "b"}, "object": {"key": "k", "userMetadata": {"a": "b"}}}}]}
    assert not nesting_exceeds(json.dumps(doc).encode(), 6)
    assert nesting_exceeds(json.dumps(doc).encode(), 5)
