"""What the object store hands out besides bytes: ``ObjectInfo`` (a listing or HEAD record)
and ``ByteStream`` (one GET's body as chunks). Both re-exported by :mod:`shardline.core.store`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError

from shardline.core.errors import StoreError


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    etag: str
    size: int
    last_modified: datetime


class ByteStream:
    """The body of one GET (or an open file) as chunks of ``chunk_bytes`` (the last may be
    shorter)."""

    def __init__(self, body: Any, chunk_bytes: int,
                 fail: Callable[[Exception], StoreError]) -> None:
        self.body, self.chunk_bytes, self.fail = body, chunk_bytes, fail

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            chunk = self.body.read(self.chunk_bytes)
        except (BotoCoreError, OSError) as exc:
            self.close()
            raise self.fail(exc) from exc
        if not chunk:
            self.close()
            raise StopIteration
        return bytes(chunk)

    def close(self) -> None:
        self.body.close()

    def __enter__(self) -> ByteStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
