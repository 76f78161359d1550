"""The object-store interface the pipeline is written against, and what its methods share.

``Store`` lists the operations the code really uses; :class:`~shardline.core.store.ObjectStore`
implements it over the S3 API and :class:`~shardline.core.folder_store.FolderStore` over a
local folder (unit tests, benchmarks); :class:`~shardline.core.counting_store.CountingStore`
wraps either and counts. Code that moves objects takes a ``Store`` (a Spark job carries it
to its workers: the S3 store pickles as its settings); code that needs S3 itself
(``pyarrow.fs``, bucket checks) takes an ``ObjectStore``.

The semantics every implementation keeps (``tests/integration/test_store_contract.py`` checks them
on both): keys are flat strings and ``list`` matches a string prefix in key order; ranges
are inclusive; ``If-None-Match: *`` raises :class:`ObjectExists`, a stale ``If-Match`` raises
:class:`ObjectChanged`; a missing object raises :class:`PermanentStoreError` on ``get``
and is ``None`` on ``head``; failures are :class:`StoreError` naming the operation and object.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

from shardline.core.errors import PermanentStoreError
from shardline.core.store_records import ByteStream, ObjectInfo

Sink = Callable[[memoryview], object]


class Received(NamedTuple):
    """What :meth:`Store.read_into` delivered: the byte count, and whether the bytes went
    from the socket straight into the caller's buffer (the S3 store's fast path)."""

    size: int
    direct: bool


class Store(Protocol):
    """A bucket of objects: the operations shardline's stages, trainer and tools use."""

    bucket: str

    def uri(self, key: str) -> str:
        """Where ``key`` lives, for messages (``s3://bucket/key``, a path)."""

    def fsspec_url(self, key: str) -> tuple[str, dict[str, Any]]:
        """``(url, storage_options)`` through which fsspec (zarr) reaches ``key``."""

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order; with
        ``start_after``, only keys after it (S3 ``ListObjectsV2`` ``StartAfter``)."""

    def list_prefixes(self, prefix: str) -> builtins.list[str]:
        """Immediate "sub-folders" of ``prefix`` (common prefixes up to the next '/')."""

    def head(self, key: str) -> ObjectInfo | None:
        """The object's record, or None when it does not exist."""

    def get_bytes(self, key: str, range_: tuple[int, int] | None = None, *,
                  if_match: str | None = None) -> bytes:
        """The object's bytes (or the inclusive range ``range_``), of the version
        ``if_match`` names when given (else :class:`ObjectChanged`)."""

    def stream(self, key: str, *, if_match: str | None = None, chunk_bytes: int = 8 << 20,
               ) -> tuple[ObjectInfo, ByteStream]:
        """One read of the whole object: its record now, its bytes as chunks."""

    def read_into(self, key: str, buf: memoryview, sink: Sink) -> Received:
        """Receive the whole object through ``buf``: each filled part is handed to
        ``sink`` (valid only during the call) before ``buf`` is reused."""

    def get_json(self, key: str) -> Any:
        ...

    def put_bytes(self, key: str, data: bytes | bytearray | memoryview, *,
                  if_none_match: bool = False, if_match: str | None = None,
                  content_type: str = "application/octet-stream") -> str:
        """Write an object; returns its ETag. ``if_none_match``: only if absent
        (else :class:`ObjectExists`); ``if_match``: only over that ETag (else
        :class:`ObjectChanged`)."""

    def put_json(self, key: str, obj: Any, **kwargs: Any) -> str:
        ...

    def upload_file(self, key: str, path: str) -> None:
        """Write a local file as an object without holding it in memory (unconditional)."""

    def copy(self, src: str, dst: str) -> None:
        ...

    def delete(self, keys: Iterable[str]) -> int:
        """Delete ``keys`` (missing ones are no error); returns how many were asked."""


class JsonMethods(Store):
    """``get_json``/``put_json`` over a store's ``get_bytes``/``put_bytes`` (one encoding for
    every implementation, and a wrapper's counts see the bytes); the implementations'
    base class."""

    def get_json(self, key: str) -> Any:
        data = self.get_bytes(key)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise PermanentStoreError(f"{self.uri(key)} is not valid JSON: {exc}") from exc

    def put_json(self, key: str, obj: Any, **kwargs: Any) -> str:
        body = json.dumps(obj, indent=1, sort_keys=True, default=str).encode()
        return self.put_bytes(key, body, content_type="application/json", **kwargs)


__all__ = ["ByteStream", "JsonMethods", "ObjectInfo", "Received", "Sink", "Store"]
