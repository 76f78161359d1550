"""The object store as a local folder: the :class:`~shardline.core.store_api.Store` that
unit tests and benchmarks run on (dagster's snapshot resource beside the real one).

Key ``a/b/c`` is the file ``<root>/a/b/c``. What S3 guarantees, this keeps, so code tested
here behaves the same on a bucket (``tests/integration/test_store_contract.py`` runs both):

- A write is atomic: the bytes go to a temporary file under ``<root>/.folder-store/``, then
  ``os.replace`` puts it under its key, so a reader sees the old object or the new one.
- Conditional writes are decided under an exclusive ``flock`` of ``<root>/.folder-store/lock``
  (every write, copy and delete takes it), so ``If-None-Match``/``If-Match`` hold across
  threads and processes (Spark's Python workers write through their own instances).
- An ETag names one write of an object: a hash of its inode, size and modification time
  (kept strictly increasing per key), read with ``stat``, so ``head`` and ``list`` of large
  files cost no read of their bytes. Unlike S3's MD5, rewriting identical bytes gives a new
  ETag (a re-upload looks new; nothing here relies on the contrary).
- Failures raise the S3 store's types: a missing object is a :class:`PermanentStoreError`
  naming the key, a lost condition :class:`ObjectExists` / :class:`ObjectChanged`.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from shardline.core.errors import (
    ObjectChanged,
    ObjectDeleted,
    ObjectExists,
    PermanentStoreError,
)
from shardline.core.store_api import JsonMethods, Received, Sink
from shardline.core.store_records import ByteStream, ObjectInfo

_PRIVATE = ".folder-store"      # temporary files and the lock; never a key


def _etag(st: os.stat_result) -> str:
    return hashlib.md5(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode(),
                       usedforsecurity=False).hexdigest()


class FolderStore(JsonMethods):
    """Objects as files under ``root`` (created if missing)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        (self.root / _PRIVATE).mkdir(parents=True, exist_ok=True)
        self.bucket = f"folder:{self.root}"

    def uri(self, key: str) -> str:
        return str(self.root / key)

    def fsspec_url(self, key: str) -> tuple[str, dict[str, Any]]:
        return str(self._path(key)), {"auto_mkdir": True}

    def _path(self, key: str, prefix: bool = False) -> Path:
        parts = key.split("/")
        if prefix:
            parts = parts[:-1]        # a prefix may end anywhere, even in a name
        if (not prefix and not key) or key.startswith("/") or parts[:1] == [_PRIVATE] or any(
                p in ("", ".", "..") for p in parts):
            raise PermanentStoreError(
                f"{'prefix' if prefix else 'key'} {key!r} cannot name a file under {self.root}: "
                "use '/'-separated names without empty, '.' or '..' parts")
        return self.root.joinpath(*parts)

    def _fail(self, op: str, key: str, exc: Exception) -> PermanentStoreError:
        hint = "; the object does not exist" if isinstance(exc, FileNotFoundError) else ""
        return PermanentStoreError(f"{op} {self.uri(key)} failed: {exc}{hint}")

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(key, _etag(st), st.st_size,
                          datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / _PRIVATE / "lock", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            yield             # closing the file releases the lock

    # -- reads ------------------------------------------------------------------------
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        base = self._path(prefix, prefix=True)
        keys = []
        for folder, dirs, files in os.walk(base):
            if Path(folder) == self.root and _PRIVATE in dirs:
                dirs.remove(_PRIVATE)
            rel = Path(folder).relative_to(self.root).as_posix()
            keys += [n if rel == "." else f"{rel}/{n}" for n in files]
        after = (start_after or "").encode()     # S3 orders keys by their UTF-8 bytes
        for key in sorted((k for k in keys if k.startswith(prefix) and k.encode() > after),
                          key=str.encode):
            info = self.head(key)
            if info is not None:          # deleted since the walk: S3 would not list it
                yield info

    def list_prefixes(self, prefix: str) -> builtins.list[str]:
        out = {prefix + rest.partition("/")[0] + "/" for rest in
               (o.key[len(prefix):] for o in self.list(prefix)) if "/" in rest}
        return sorted(out)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return self._info(key, st) if stat.S_ISREG(st.st_mode) else None

    def _open(self, key: str, if_match: str | None) -> tuple[io.BufferedReader, os.stat_result]:
        try:
            f = open(self._path(key), "rb")  # noqa: SIM115 - handed to the caller
        except FileNotFoundError as exc:
            if if_match is not None:           # pinned to a listed version: it vanished
                raise ObjectDeleted(f"{self.uri(key)} was deleted since it was listed "
                                    f"(ETag {if_match})") from exc
            raise self._fail("get", key, exc) from exc
        except OSError as exc:
            raise self._fail("get", key, exc) from exc
        st = os.fstat(f.fileno())
        if if_match is not None and _etag(st) != if_match:
            f.close()
            raise ObjectChanged(f"{self.uri(key)} is no longer the version with ETag "
                                f"{if_match} (overwritten since it was listed); re-run so "
                                "that it is listed again")
        return f, st

    def get_bytes(self, key: str, range_: tuple[int, int] | None = None, *,
                  if_match: str | None = None) -> bytes:
        f, st = self._open(key, if_match)
        with f:
            if range_ is None:
                return f.read()
            first, last = range_
            if first < 0 or last < first or first >= st.st_size:
                raise PermanentStoreError(
                    f"get {self.uri(key)} failed: range {first}-{last} is not satisfiable "
                    f"for {st.st_size} bytes")
            f.seek(first)
            return f.read(last - first + 1)

    def stream(self, key: str, *, if_match: str | None = None, chunk_bytes: int = 8 << 20,
               ) -> tuple[ObjectInfo, ByteStream]:
        f, st = self._open(key, if_match)
        return self._info(key, st), ByteStream(f, chunk_bytes,
                                               lambda exc: self._fail("get", key, exc))

    def read_into(self, key: str, buf: memoryview, sink: Sink) -> Received:
        f, _ = self._open(key, None)
        size = 0
        with f:
            while n := f.readinto(buf):
                sink(buf[:n])
                size += n
        return Received(size, False)

    # -- writes -----------------------------------------------------------------------
    def _write(self, key: str, fill: Callable[[BinaryIO], object], op: str = "put",
               if_none_match: bool = False, if_match: str | None = None) -> str:
        path = self._path(key)
        tmp = self.root / _PRIVATE / f"{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                fill(f)
            with self._locked():
                try:
                    old: os.stat_result | None = path.stat()
                except (FileNotFoundError, NotADirectoryError):
                    old = None
                if if_none_match and old is not None:
                    raise ObjectExists(f"{self.uri(key)} already exists")
                if if_match is not None and (old is None or _etag(old) != if_match):
                    raise ObjectChanged(f"{self.uri(key)} changed since it was read (expected "
                                        f"ETag {if_match}); re-read and retry")
                stamp = max(time.time_ns(), old.st_mtime_ns + 1 if old else 0)
                os.utime(tmp, ns=(stamp, stamp))
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, path)
                return _etag(path.stat())
        except OSError as exc:
            raise self._fail(op, key, exc) from exc
        finally:
            tmp.unlink(missing_ok=True)

    def put_bytes(self, key: str, data: bytes | bytearray | memoryview, *,
                  if_none_match: bool = False, if_match: str | None = None,
                  content_type: str = "application/octet-stream") -> str:
        return self._write(key, lambda f: f.write(data), "put", if_none_match, if_match)

    def upload_file(self, key: str, path: str) -> None:
        with open(path, "rb") as src:
            self._write(key, lambda f: shutil.copyfileobj(src, f, 4 << 20), "upload")

    def copy(self, src: str, dst: str) -> None:
        f, _ = self._open(src, None)
        with f:
            self._write(dst, lambda out: shutil.copyfileobj(f, out, 4 << 20), "copy")

    def delete(self, keys: Iterable[str]) -> int:
        keys = builtins.list(keys)
        with self._locked():
            for key in keys:
                path = self._path(key)
                with contextlib.suppress(FileNotFoundError, NotADirectoryError,
                                         IsADirectoryError):   # S3: nothing to delete
                    path.unlink()
                with contextlib.suppress(OSError):   # S3 has no folders: drop empty ones
                    while path.parent != self.root:
                        path = path.parent
                        path.rmdir()
        return len(keys)


__all__ = ["FolderStore"]
