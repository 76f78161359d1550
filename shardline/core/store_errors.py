"""How object-store failures are classified: transient (a retry may fix) or permanent.

botocore raises ``ClientError`` (the service answered with an error code) or a
``BotoCoreError`` (no usable answer: connection refused, timeout, ...). Throttling and the
service's own 5xx failures, connections and timeouts are transient; everything else (no
such bucket/key, bad credentials, access denied) needs a person.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from shardline.core.errors import PermanentStoreError, StoreError, TransientStoreError


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


# Error codes a retry may fix (throttling, the service's own failures); HTTP 5xx also count.
TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                    "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable",
                    "RequestLimitExceeded", "503", "500", "502", "504"}
# Hints for codes a user can fix.
HINTS = {
    "NoSuchBucket": "the bucket does not exist: check SHARDLINE_BUCKET (or create it)",
    "InvalidAccessKeyId": "the access key is unknown: check AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "the secret key is wrong: check AWS_SECRET_ACCESS_KEY",
    "AccessDenied": "the credentials lack permission for this bucket/key",
    "403": "access denied: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and permissions",
    "NoCredentialsError": "no credentials: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                          "(or start the embedded stack with `shardline up`)",
}


def is_transient_failure(exc: Exception) -> bool:
    """Whether a botocore error may go away on retry (connection, timeout, 5xx, throttle)."""
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return error_code(exc) in TRANSIENT_CODES or status >= 500
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError

    return isinstance(exc, BotoConnectionError | HTTPClientError | ConnectionError |
                      TimeoutError) or body_fault(exc)


def body_fault(exc: BaseException) -> bool:
    """Whether a GET's body failed on the way (cut short, reset, stalled past the read
    timeout, or its bytes did not match the checksum S3 sent): the stored object is not
    to blame and reading it again may succeed. botocore retries the request, never the
    body, so the caller retries these (``ObjectStore.get_bytes``)."""
    from botocore.exceptions import ConnectionClosedError as Closed
    from botocore.exceptions import (
        FlexibleChecksumError,
        IncompleteReadError,
        ReadTimeoutError,
        ResponseStreamingError,
    )
    from urllib3.exceptions import ProtocolError

    return isinstance(exc, IncompleteReadError | FlexibleChecksumError | ReadTimeoutError |
                      ResponseStreamingError | Closed | ProtocolError | ConnectionError |
                      TimeoutError)


def store_failure(what: str, exc: Exception, hint: str = "",
                  endpoint_url: str | None = None) -> StoreError:
    """The typed error for a failed ``what`` (operation and object, e.g. ``get s3://b/k``):
    transient (a retry may fix) or permanent (wrong bucket or keys, missing object, ...),
    with the hint for its error code (else ``hint``) and, when transient, the endpoint."""
    msg = f"{what} failed: {exc}"
    code = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
    hint = HINTS.get(code, hint)
    if hint:
        msg += f"; {hint}"
    if is_transient_failure(exc):
        where = endpoint_url or "AWS S3"
        return TransientStoreError(f"{msg} (endpoint {where}; retrying may help)")
    return PermanentStoreError(msg)
