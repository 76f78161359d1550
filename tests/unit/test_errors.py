"""Which errors a retry may fix: transient vs permanent, through wrapping layers."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from shardline.core.errors import (
    ConfigError,
    ObjectChanged,
    ObjectExists,
    PermanentStoreError,
    ServiceUnavailable,
    StoreError,
    TransientStoreError,
    is_transient,
)
from shardline.core.store_errors import is_transient_failure


def _wrapped(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:
        return exc


@pytest.mark.parametrize("exc,expected", [
    (TransientStoreError("get s3://b/k failed: timeout"), True),
    (ConnectionError("refused"), True),
    (TimeoutError(), True),
    (PermanentStoreError("NoSuchBucket"), False),
    (StoreError("no dataset versions under s3://b/lake/d/versions/"), False),
    (StoreError("manifest v3 has format 9"), False),
    (ObjectExists("s3://b/k already exists"), False),
    (ObjectChanged("s3://b/k changed"), False),
    (ConfigError("[train] lr: expected a number"), False),
    (ServiceUnavailable("S3", "http://h:1", "does not answer", "start it"), False),
    (ValueError("x"), False),
])
def test_only_transient_errors_are_retried(exc, expected):
    assert is_transient(exc) is expected


def test_a_store_error_wrapping_a_transient_one_is_transient():
    exc = _wrapped(StoreError("fetch s3://b/shard into the cache failed"),
                   TransientStoreError("read timeout"))
    assert is_transient(exc)
    # a layer that decided "permanent" wins over its cause
    assert not is_transient(_wrapped(PermanentStoreError("digest mismatch"),
                                     TransientStoreError("read timeout")))


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


@pytest.mark.parametrize("exc,expected", [
    (_client_error("SlowDown", 503), True),
    (_client_error("InternalError", 500), True),
    (_client_error("NoSuchBucket", 404), False),
    (_client_error("InvalidAccessKeyId", 403), False),
    (_client_error("AccessDenied", 403), False),
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
])
def test_botocore_failures_are_classified(exc, expected):
    assert is_transient_failure(exc) is expected


def test_service_unavailable_names_service_and_fix():
    exc = ServiceUnavailable("Spark Connect", "sc://127.0.0.1:15002", "does not answer",
                             "start it with `shardline up`")
    assert str(exc) == ("Spark Connect at sc://127.0.0.1:15002 does not answer; start it "
                        "with `shardline up`")
