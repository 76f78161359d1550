"""A seekable, read-only file over ranged GETs of one object version.

What Arrow's and Parquet's readers need to read a footer and a few record batches or row
groups without fetching the whole object: the Parquet slicer and reader of ingest, and the
duplicate check's bucketed id index."""

from __future__ import annotations

import io

from shardline.core.errors import StoreError
from shardline.core.store import Store


class RangedObject(io.RawIOBase):
    """A read-only, seekable file over one version of an object: each read is a ranged GET
    with ``If-Match``, so pyarrow reads a Parquet footer or a few row groups without
    fetching the whole object, and never mixes two versions of it."""

    def __init__(self, store: Store, key: str, size: int, etag: str) -> None:
        super().__init__()
        self.store, self.key, self.size, self.etag = store, key, size, etag
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.pos + size)
        if end <= self.pos:
            return b""
        data = self.store.get_bytes(self.key, (self.pos, end - 1), if_match=self.etag)
        if len(data) != end - self.pos:
            raise StoreError(f"{self.store.uri(self.key)}: asked for bytes "
                             f"{self.pos}..{end - 1}, got {len(data)} bytes; re-run")
        self.pos = end
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)
