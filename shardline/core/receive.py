"""Receiving a GET's body into a caller's buffer with as few copies as the stack allows
(the S3 store's ``read_into``; the trainer's shard cache receives through it).

botocore's ``StreamingBody.readinto`` goes through urllib3 2.x, whose ``readinto`` is a
``read(len(b))`` (a new bytes object) followed by a copy into ``b``: two copies of every
byte in Python's process before the caller writes it. When the response is plain (no
content encoding that urllib3 would have to undo, nothing buffered by urllib3 yet),
``http.client``'s own ``readinto`` on the same response receives from the socket straight
into the buffer (one copy, the kernel's); botocore's body also computes the CRC32 the
server sends, which this path leaves to the manifest's digest. On a 2-core machine that
cut the client CPU of receiving 150 MB on 4 threads by 25-55% (docs/benchmarks.md, "First
epoch from the object store"). Anything unexpected about the response falls back to
botocore's path.

What botocore's path checks on the way (the length against Content-Length, its CRC when
the server sends one) the caller checks itself on this path (the shard cache: the byte
count and the digest of its manifest entry, over the bytes as received).
"""

from __future__ import annotations

import http.client
from typing import Any

from shardline.core.errors import TransientStoreError


class Body:
    """One GET's body: ``readinto(buf)`` until it returns 0, then ``finish(complete)``."""

    def __init__(self, body: Any, where: str) -> None:
        self._body, self.where = body, where
        self._raw: Any = getattr(body, "_raw_stream", None)
        self._fp = direct_response(self._raw)
        self.direct = self._fp is not None

    def readinto(self, buf: memoryview) -> int:
        if self._fp is None:
            return int(self._body.readinto(buf))
        try:
            return int(self._fp.readinto(buf))
        except (http.client.HTTPException, OSError) as exc:
            # cut, reset or stalled on the way: a network fault, not the object
            raise TransientStoreError(f"{self.where}: the connection failed while "
                                      f"receiving the object: {exc!r}") from exc

    def finish(self, complete: bool) -> None:
        """Give the connection back for reuse when the body was read to its end through
        ``http.client`` (it closes its side at the end), otherwise close it."""
        if self._fp is not None and complete and self._fp.isclosed():
            self._raw.release_conn()
        else:
            self._body.close()


def direct_response(raw: Any) -> http.client.HTTPResponse | None:
    """``raw``'s ``http.client`` response when reading it directly is safe, else None."""
    fp = getattr(raw, "_fp", None)
    if not isinstance(fp, http.client.HTTPResponse):
        return None
    encoding = str(raw.headers.get("content-encoding", "")).strip().lower()
    buffered = getattr(raw, "_decoded_buffer", None)
    if (encoding not in ("", "identity") or getattr(raw, "_fp_bytes_read", 1) != 0
            or buffered is None or len(buffered) != 0):
        return None
    return fp
