"""A store that counts what passes through it: requests and bytes per operation and per
kind of key, around any :class:`~shardline.core.store_api.Store` (the S3 store, a folder).

What tests and the scale benchmark measure deterministically (times vary with the
machine's load): how many reads of the history a stage makes, not how long they take.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from shardline.core.store_api import JsonMethods, Received, Sink, Store
from shardline.core.store_records import ByteStream, ObjectInfo


def _same(store: Store) -> Store:
    return store


class Counts:
    """Requests and bytes per (operation, ``kind(key)``: default the key itself);
    thread-safe."""

    def __init__(self, kind: Callable[[str], str] = str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        self.ops: dict[str, dict[str, list[int]]] = {}

    def add(self, op: str, key: str, nbytes: int = 0, n: int = 1) -> None:
        with self._lock:
            cell = self.ops.setdefault(op, {}).setdefault(self.kind(key), [0, 0])
            cell[0] += n
            cell[1] += nbytes

    def n(self, op: str, kind: str | None = None) -> int:
        """Requests of ``op`` (of one ``kind``, else of all)."""
        cells = self.ops.get(op, {})
        return sum(v[0] for k, v in cells.items() if kind is None or k == kind)

    def to_dict(self) -> dict[str, dict[str, dict[str, int]]]:
        """{op: {kind: {"n": requests (list: entries), "bytes": bytes}}}"""
        return {op: {k: {"n": v[0], "bytes": v[1]} for k, v in sorted(kinds.items())}
                for op, kinds in sorted(self.ops.items())}


class CountingStore(JsonMethods):
    """``inner`` with every call counted in ``counts`` (by kind of key: :class:`Counts`).
    Ops: get (bytes read, ranged or whole, streams and receives), head, list
    (one request per page of 1,000 entries) and list_entries, put (upload and copy
    included, by their own names), delete. Anything else (an S3 store's ``settings``, ...)
    is the inner store's."""

    def __init__(self, inner: Store, counts: Counts | None = None) -> None:
        self.inner = inner
        self.counts = counts if counts is not None else Counts()
        self.bucket = inner.bucket

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the store it wraps: counts belong to the process that counts (a Spark
        job or a result that carries the store elsewhere reads and writes uncounted)."""
        return (_same, (self.inner,))

    def __getattr__(self, name: str) -> Any:
        if name == "inner":           # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def uri(self, key: str) -> str:
        return self.inner.uri(key)

    def fsspec_url(self, key: str) -> tuple[str, dict[str, Any]]:
        return self.inner.fsspec_url(key)       # fsspec's own requests are not counted

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        n = 0
        try:
            for o in self.inner.list(prefix, start_after):
                n += 1
                self.counts.add("list_entries", o.key)
                yield o
        finally:
            self.counts.add("list", prefix, 0, 1 + max(0, n - 1) // 1000)

    def list_prefixes(self, prefix: str) -> builtins.list[str]:
        self.counts.add("list", prefix)
        return self.inner.list_prefixes(prefix)

    def head(self, key: str) -> ObjectInfo | None:
        self.counts.add("head", key)
        return self.inner.head(key)

    def get_bytes(self, key: str, range_: tuple[int, int] | None = None, *,
                  if_match: str | None = None) -> bytes:
        data = self.inner.get_bytes(key, range_, if_match=if_match)
        self.counts.add("get", key, len(data))
        return data

    def stream(self, key: str, *, if_match: str | None = None, chunk_bytes: int = 8 << 20,
               ) -> tuple[ObjectInfo, ByteStream]:
        info, chunks = self.inner.stream(key, if_match=if_match, chunk_bytes=chunk_bytes)
        self.counts.add("get", key, info.size)
        return info, chunks

    def read_into(self, key: str, buf: memoryview, sink: Sink) -> Received:
        got = self.inner.read_into(key, buf, sink)
        self.counts.add("get", key, got.size)
        return got

    def put_bytes(self, key: str, data: bytes | bytearray | memoryview, *,
                  if_none_match: bool = False, if_match: str | None = None,
                  content_type: str = "application/octet-stream") -> str:
        etag = self.inner.put_bytes(key, data, if_none_match=if_none_match, if_match=if_match,
                                    content_type=content_type)
        self.counts.add("put", key, memoryview(data).nbytes)
        return etag

    def upload_file(self, key: str, path: str) -> None:
        self.inner.upload_file(key, path)
        self.counts.add("upload", key)

    def copy(self, src: str, dst: str) -> None:
        self.inner.copy(src, dst)
        self.counts.add("copy", dst)

    def delete(self, keys: Iterable[str]) -> int:
        keys = builtins.list(keys)
        for k in keys:
            self.counts.add("delete", k)
        return self.inner.delete(keys)


__all__ = ["CountingStore", "Counts"]
