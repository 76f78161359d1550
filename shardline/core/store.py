"""Object-store access through the S3 API (AWS, MinIO, or the embedded moto server).

The S3 implementation of :class:`~shardline.core.store_api.Store`: one small class over a
boto3 client. It adds what the pipeline relies on and boto3 leaves
to the caller: conditional writes that raise typed errors (``If-None-Match: *`` is how a
manifest commits), listing as plain records, and errors that name bucket, key and the
operation. Transient failures are retried by botocore's standard retry mode, not here.

``ObjectStore`` is cheap to rebuild from :class:`StoreSettings`, which is what Spark tasks
and loader threads do (clients are not shared across processes).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from shardline.core.config import StoreSettings
from shardline.core.errors import (
    ObjectChanged,
    ObjectDeleted,
    ObjectExists,
    StoreError,
    TransientStoreError,
)
from shardline.core.receive import Body
from shardline.core.store_api import JsonMethods, Received, Sink, Store
from shardline.core.store_errors import HINTS, body_fault, error_code, store_failure
from shardline.core.store_records import ByteStream, ObjectInfo

log = logging.getLogger(__name__)

_RETRY = BotoConfig(
    retries={"mode": "standard", "max_attempts": 6},
    connect_timeout=10,
    read_timeout=120,
    max_pool_connections=32,
)


class ObjectStore(JsonMethods):
    """A bucket reached through the S3 API (the :class:`Store` the pipeline runs on)."""

    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.endpoint_url,
            aws_access_key_id=settings.access_key,
            aws_secret_access_key=settings.secret_key,
            region_name=settings.region,
            config=_RETRY.merge(BotoConfig(
                retries={"mode": "standard", "max_attempts": settings.max_attempts},
                connect_timeout=settings.connect_timeout_s,
                read_timeout=settings.read_timeout_s)),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its settings (a boto3 client is not picklable): a result holding the
        store opens its own client where it is unpickled (another task, a Spark worker)."""
        return (type(self), (self.settings,))

    # -- naming -----------------------------------------------------------------------
    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def fsspec_url(self, key: str) -> tuple[str, dict[str, Any]]:
        return self.uri(key), self.s3fs_options()

    def _fail(self, op: str, key: str, exc: Exception, hint: str = "") -> StoreError:
        """A typed error naming the operation and object: transient (retry may fix) or
        permanent (wrong bucket, keys, missing object, ...)."""
        return store_failure(f"{op} s3://{self.bucket}/{key}", exc, hint,
                             self.settings.endpoint_url)

    # -- bucket -----------------------------------------------------------------------
    def check_bucket(self) -> None:
        """Raise unless the bucket exists and the credentials may read it (one HEAD).

        Raises:
            PermanentStoreError: no such bucket, or access denied (names the variable to fix).
            TransientStoreError: the endpoint does not answer.
        """
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = error_code(exc)
            hint = {"404": HINTS["NoSuchBucket"], "NotFound": HINTS["NoSuchBucket"]}.get(
                code, "")
            raise self._fail("head bucket", "", exc, hint) from exc
        except BotoCoreError as exc:
            raise self._fail("head bucket", "", exc) from exc

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (the embedded stack and tests use this)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
                raise self._fail("head bucket", "", exc) from exc
        except BotoCoreError as exc:
            raise self._fail("head bucket", "", exc) from exc
        else:
            return
        try:
            self.client.create_bucket(Bucket=self.bucket)
        except ClientError as exc2:
            if error_code(exc2) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._fail("create bucket", "", exc2) from exc2
        except BotoCoreError as exc2:
            raise self._fail("create bucket", "", exc2) from exc2

    # -- reads ------------------------------------------------------------------------
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` in key order (after ``start_after`` if given)."""
        after = {"StartAfter": start_after} if start_after else {}
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, **after
            )
            for page in pages:
                for o in page.get("Contents", []):
                    yield ObjectInfo(
                        key=o["Key"],
                        etag=o["ETag"].strip('"'),
                        size=int(o["Size"]),
                        last_modified=o["LastModified"],
                    )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc,
                             "check SHARDLINE_BUCKET, the endpoint and credentials") from exc

    def list_prefixes(self, prefix: str) -> builtins.list[str]:
        """Immediate sub-folders of ``prefix`` (common prefixes with delimiter '/')."""
        out: builtins.list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, Delimiter="/"
            )
            for page in pages:
                out.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from exc
        return out

    def head(self, key: str) -> ObjectInfo | None:
        try:
            r = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._fail("head", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("head", key, exc) from exc
        return ObjectInfo(key, r["ETag"].strip('"'), int(r["ContentLength"]), r["LastModified"])

    def get_bytes(self, key: str, range_: tuple[int, int] | None = None, *,
                  if_match: str | None = None) -> bytes:
        """Whole object (or the inclusive byte range ``range_``).

        Raises:
            ObjectChanged: ``if_match`` was given and the object's ETag differs (HTTP 412).
        """
        attempts = self.settings.max_attempts
        for attempt in range(1, attempts + 1):
            response = self._get(key, range_, if_match)
            try:
                return response["Body"].read()
            except Exception as exc:     # noqa: BLE001 - classified just below
                with contextlib.suppress(Exception):  # never back into the pool half-read
                    response["Body"].close()
                if not body_fault(exc):
                    if isinstance(exc, BotoCoreError):
                        raise self._fail("get", key, exc) from exc
                    raise
                if attempt == attempts:  # the object is not blamed: the network is
                    raise TransientStoreError(
                        f"get s3://{self.bucket}/{key}: the response body failed on each "
                        f"of {attempts} attempts (last: {type(exc).__name__}: "
                        f"{str(exc)[:200]}); a network fault, not the object (endpoint "
                        f"{self.settings.endpoint_url or 'AWS S3'}; retrying may help)"
                    ) from exc
                log.warning("get s3://%s/%s: body fault on attempt %d of %d (%s); reading "
                            "again", self.bucket, key, attempt, attempts, type(exc).__name__)
        raise AssertionError("unreachable")

    def stream(self, key: str, *, if_match: str | None = None, chunk_bytes: int = 8 << 20,
               ) -> tuple[ObjectInfo, ByteStream]:
        """Start one GET of the whole object: its info (ETag, size) at once, its bytes as
        chunks while they arrive, so a large object is scanned without being held whole.
        Use the stream in a ``with`` block: leaving it early ends the transfer.

        Raises:
            ObjectChanged: ``if_match`` was given and the object's ETag differs (HTTP 412).
        """
        response = self._get(key, None, if_match)
        info = ObjectInfo(key, str(response["ETag"]).strip('"'), int(response["ContentLength"]),
                          response["LastModified"])
        return info, ByteStream(response["Body"], chunk_bytes,
                                lambda exc: self._fail("get", key, exc))

    def _get(self, key: str, range_: tuple[int, int] | None, if_match: str | None
             ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if range_ is not None:
            kwargs["Range"] = f"bytes={range_[0]}-{range_[1]}"
        if if_match is not None:
            kwargs["IfMatch"] = f'"{if_match}"'
        try:
            return dict(self.client.get_object(**kwargs))
        except ClientError as exc:
            code = error_code(exc)
            if code in ("NoSuchKey", "404"):
                if if_match is not None:     # pinned to a listed version: it vanished
                    raise ObjectDeleted(
                        f"s3://{self.bucket}/{key} was deleted since it was listed (ETag "
                        f"{if_match})") from exc
                raise self._fail("get", key, exc, "the object does not exist") from exc
            if if_match is not None and code in ("PreconditionFailed", "412"):
                raise ObjectChanged(
                    f"s3://{self.bucket}/{key} is no longer the version with ETag {if_match} "
                    "(overwritten since it was listed); re-run so that it is listed again"
                ) from exc
            raise self._fail("get", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("get", key, exc) from exc

    def read_into(self, key: str, buf: memoryview, sink: Sink) -> Received:
        """One GET received through ``buf`` (from the socket straight into it where the
        response allows: :mod:`shardline.core.receive`), each part handed to ``sink``.

        Read to the end (only then does botocore's own path check length and CRC), so the
        connection goes back to the pool."""
        body = Body(self._get(key, None, None)["Body"], self.uri(key))
        size, complete = 0, False
        try:
            while n := body.readinto(buf):
                sink(buf[:n])
                size += n
            complete = True
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("get", key, exc) from exc
        except OSError as exc:      # reset or stalled on the socket; a full disk goes up
            if not body_fault(exc):
                raise
            raise self._fail("get", key, exc) from exc
        finally:
            body.finish(complete)
        return Received(size, body.direct)

    # -- writes -----------------------------------------------------------------------
    def put_bytes(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        content_type: str = "application/octet-stream",
    ) -> str:
        """Write an object; returns its ETag.

        Raises:
            ObjectExists: ``if_none_match`` and the key already exists (HTTP 412).
            ObjectChanged: ``if_match`` was given and the current ETag differs (HTTP 412).
        """
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket, "Key": key, "Body": bytes(data), "ContentType": content_type,
        }
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        if if_match is not None:
            kwargs["IfMatch"] = f'"{if_match}"'
        try:
            return str(self.client.put_object(**kwargs)["ETag"]).strip('"')
        except ClientError as exc:
            code = error_code(exc)
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                if if_none_match:
                    raise ObjectExists(f"s3://{self.bucket}/{key} already exists") from exc
                raise ObjectChanged(
                    f"s3://{self.bucket}/{key} changed since it was read (expected ETag "
                    f"{if_match}); re-read and retry"
                ) from exc
            raise self._fail("put", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("put", key, exc) from exc

    def upload_file(self, key: str, path: str) -> None:
        """Write a local file as an object, streamed from disk (multipart above 8 MB, parts
        in parallel: boto3's managed transfer), so its size never has to fit in memory.
        Unconditional: for staged objects, not for commits."""
        try:
            self.client.upload_file(path, self.bucket, key)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("upload", key, exc) from exc
        except S3UploadFailedError as exc:    # wraps the part's error: classify that one
            cause = exc.__cause__ or exc.__context__
            inner = cause if isinstance(cause, ClientError | BotoCoreError) else exc
            raise self._fail("upload", key, inner) from exc

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy within the bucket."""
        try:
            self.client.copy_object(
                Bucket=self.bucket, Key=dst, CopySource={"Bucket": self.bucket, "Key": src}
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("copy", f"{src} -> {dst}", exc) from exc

    def delete(self, keys: Iterable[str]) -> int:
        """Delete keys in batches of 1000; returns how many were asked to go."""
        keys = list(keys)
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            try:
                self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._fail("delete", chunk[0], exc) from exc
        return len(keys)

    # -- other clients on the same settings --------------------------------------------
    def s3fs_options(self) -> dict[str, Any]:
        """``storage_options`` for fsspec/s3fs (zarr, pandas) on the same endpoint."""
        st = self.settings
        # the store's own retry policy and timeouts (botocore standard mode, max_attempts),
        # not s3fs's defaults; s3fs's wrapper still retries what botocore does not (payloads)
        opts: dict[str, Any] = {
            "client_kwargs": {"region_name": st.region},
            "config_kwargs": {"retries": {"mode": "standard", "max_attempts": st.max_attempts},
                              "connect_timeout": st.connect_timeout_s,
                              "read_timeout": st.read_timeout_s},
        }
        if self.settings.endpoint_url:
            opts["endpoint_url"] = self.settings.endpoint_url
        if self.settings.access_key:
            opts["key"] = self.settings.access_key
            opts["secret"] = self.settings.secret_key
        return opts


__all__ = ["ByteStream", "ObjectInfo", "ObjectStore", "Store", "StoreSettings"]
