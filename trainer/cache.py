"""A bounded local cache of whole shard files, content-addressed by their sha256.

A shard is downloaded to ``<sha256>.<random>.part`` while its digest is computed on the fly,
compared with the manifest, and only then renamed to ``<sha256>.arrow`` (``os.replace`` is
atomic), so a reader can never see a partial file under the final name. Files are reused
across epochs, runs and datasets (same bytes, same name). A cached file is re-hashed the
first time each cache instance uses it (so a file corrupted on disk between runs is
refetched, never used); a changed size or mtime triggers a re-hash within a run too.

The digest checked is the manifest's XXH3-128 (~20 GB/s on one core) when the entry has
one, else its sha256 (~1.8 GB/s: on a small machine it cost more CPU than receiving the
bytes). Transfer errors are also caught by S3's own CRC, which botocore checks on every
GET that returns one; the digest here ties the bytes to the manifest and catches a
corrupted or truncated cache file. Each fetch thread receives into one reused buffer
(``Store.read_into``; the S3 store's goes straight from the socket where the response
allows: ``shardline.core.receive``), hashes and writes from it. (Reserving the file's
blocks up front with ``posix_fallocate`` was measured and dropped: a cold first epoch of
753 MB went from 1.17x to 0.37x a raw GET.)

A download whose bytes do not match is fetched again, up to three times: different wrong
bytes each time are a fault on the way (the error says the download kept failing); the same
wrong bytes twice are what the store holds (the error says the shard was modified and how to
repair it). A full disk evicts cached shards to make room and tries once more, then fails
naming the folder and ``SHARDLINE_CACHE_DIR``.

The size bound is enforced by least-recently-used eviction after each download (files are
touched on use). Unlinking a file that a reader still has memory-mapped is safe on POSIX:
the mapping stays valid; the file is just fetched again when next needed.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import mmap
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from shardline.core.errors import ShardlineError, StoreError, TransientStoreError
from shardline.core.manifest import ShardEntry
from shardline.core.store import Store
from shardline.trainer.trust import UntrustedInput, check_digest

log = logging.getLogger(__name__)

_CHUNK = 4 << 20
_STALE_PART_S = 3600.0
# Downloads of one shard whose bytes do not match the manifest before giving up (the same
# wrong bytes twice end it at once: that is the stored object, not the network).
_ATTEMPTS = 3
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class CacheFull(ShardlineError):
    """The cache's disk is full even after evicting every cached shard."""


@dataclass
class CacheStats:
    hits: int = 0
    fetched: int = 0
    refetched_corrupt: int = 0
    evicted: int = 0
    bytes_fetched: int = 0
    received_direct: int = 0       # fetches received by http.client's readinto (core/receive.py)
    fetch_seconds: float = 0.0


def expected_digest(entry: ShardEntry) -> tuple[str, str]:
    """``(algorithm, hex digest)`` that ``entry``'s bytes are verified against."""
    if entry.xxh3_128:
        return "xxh3_128", entry.xxh3_128
    return "sha256", entry.sha256


def _hasher(algorithm: str) -> Any:
    return xxhash.xxh3_128() if algorithm == "xxh3_128" else hashlib.sha256()


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file's bytes (through a read-only map: no copy into Python)."""
    h = _hasher(algorithm)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                h.update(m)
    return str(h.hexdigest())


class ShardCache:
    """Whole-shard files under ``root``, at most ``max_bytes`` in total (LRU)."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int, store: Store) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(max_bytes)
        self.store = store
        self.stats = CacheStats()
        self._verified: dict[str, tuple[int, int]] = {}   # sha -> (size, mtime_ns) when hashed
        self._lock = threading.Lock()
        self._local = threading.local()                     # per fetch thread: receive buffer
        self._sweep_parts()

    def path_for(self, entry: ShardEntry) -> Path:
        """``<root>/<sha256>.arrow``; the digest is checked first (``trainer.trust``), so a
        manifest field can never name a file outside the cache folder.

        Raises:
            UntrustedInput: the entry's sha256 (or xxh3_128) is not lowercase hex of its
                length."""
        where = f"manifest entry for {self.store.uri(entry.path)}"
        check_digest(entry.sha256, "sha256", where)
        if entry.xxh3_128 is not None:
            check_digest(entry.xxh3_128, "xxh3_128", where)
        path = self.root / f"{entry.sha256}.arrow"
        if path.parent != self.root:       # cannot happen after the check; never trust it
            raise UntrustedInput(f"{where}: cache path {path} is outside {self.root}")
        return path

    def ensure(self, entry: ShardEntry) -> Path:
        """Local path of a verified copy of ``entry``, fetching it when missing or corrupt.

        Raises:
            StoreError: the object cannot be read, or its bytes never match the manifest.
        """
        path = self.path_for(entry)
        if self._usable(path, entry):
            self.stats.hits += 1
            return path
        self._fetch(entry, path)
        self._evict(keep=path)
        return path

    def _usable(self, path: Path, entry: ShardEntry) -> bool:
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        stamp = (st.st_size, st.st_mtime_ns)
        algorithm, digest = expected_digest(entry)
        if self._verified.get(entry.sha256) == stamp or (
            st.st_size == entry.bytes and file_digest(path, algorithm) == digest
        ):
            self._verified[entry.sha256] = (st.st_size, self._touch(path))
            return True
        log.warning("cached shard %s (for %s) is corrupt or partial "
                    "(size %d, expected %d): refetching", path, self.store.uri(entry.path),
                    st.st_size, entry.bytes)
        self.stats.refetched_corrupt += 1
        self._unlink(path)
        return False

    def _unlink(self, path: Path) -> None:
        """Delete a cache file: only ever a ``*.arrow`` entry directly inside the folder (a
        symbolic link placed there is removed itself, never what it points to)."""
        if path.parent != self.root or path.suffix != ".arrow":
            raise UntrustedInput(f"refusing to delete {path}: not a shard file directly "
                                 f"inside the cache folder {self.root}")
        path.unlink(missing_ok=True)

    def _fetch(self, entry: ShardEntry, path: Path) -> None:
        t0 = time.perf_counter()
        algorithm, expected = expected_digest(entry)
        seen: list[tuple[str, int]] = []
        for attempt in range(1, _ATTEMPTS + 1):
            tmp = path.with_name(f"{entry.sha256}.{uuid.uuid4().hex[:8]}.part")
            try:
                try:
                    digest, size = self._download_with_room(entry, tmp, algorithm)
                except TransientStoreError as exc:   # cut, reset, stalled: not the shard
                    if attempt == _ATTEMPTS:
                        raise TransientStoreError(
                            f"{self.store.uri(entry.path)}: the download kept failing: "
                            f"{_ATTEMPTS} downloads, the last with {exc}") from exc
                    log.warning("%s: download failed (%s; attempt %d of %d)",
                                self.store.uri(entry.path), exc, attempt, _ATTEMPTS)
                    continue
                if digest == expected and size == entry.bytes:
                    os.replace(tmp, path)
                    break
            finally:
                tmp.unlink(missing_ok=True)
            log.warning("%s: downloaded %d bytes with %s %s, manifest says %d "
                        "bytes / %s (attempt %d of %d)", self.store.uri(entry.path), size,
                        algorithm, digest, entry.bytes, expected, attempt, _ATTEMPTS)
            if (digest, size) in seen:
                # The same wrong bytes twice: that is what the store holds, not a network
                # fault. Another download would only repeat them.
                raise StoreError(
                    f"{self.store.uri(entry.path)} does not match its manifest entry: two "
                    f"downloads gave the same {algorithm} {digest}, {size} bytes (expected "
                    f"{expected}, {entry.bytes} bytes): the stored shard was modified after "
                    "it was published; re-publish the dataset version (or restore the "
                    "object), and check what writes under the dataset's prefix")
            seen.append((digest, size))
        else:
            got = ", ".join(f"{d[:12]}.. {n} bytes" for d, n in seen)
            raise StoreError(
                f"{self.store.uri(entry.path)}: the download kept failing: {_ATTEMPTS} "
                f"downloads, each with other bytes ({algorithm}: {got}; expected "
                f"{expected}, {entry.bytes} bytes): the network or a proxy on the way "
                "corrupts or cuts responses; the stored shard is not shown to be modified. "
                "Run again; if it persists, check the path to the object store")
        st = path.stat()
        self._verified[entry.sha256] = (st.st_size, st.st_mtime_ns)
        with self._lock:
            self.stats.fetched += 1
            self.stats.bytes_fetched += size
            self.stats.fetch_seconds += time.perf_counter() - t0

    def _download_with_room(self, entry: ShardEntry, tmp: Path,
                            algorithm: str) -> tuple[str, int]:
        """:meth:`_download`; on a full disk, evict cached shards to make room for this one
        and try once more, then fail naming the folder and the settings that move it."""
        try:
            return self._download(entry.path, tmp, algorithm)
        except OSError as exc:
            if exc.errno not in _NO_SPACE:
                raise
            tmp.unlink(missing_ok=True)
            freed = self._make_room(entry.bytes)
            log.warning("shard cache %s: disk full while receiving %s; evicted %d cached "
                        "shards, trying again", self.root, self.store.uri(entry.path), freed)
            try:
                return self._download(entry.path, tmp, algorithm)
            except OSError as again:
                if again.errno not in _NO_SPACE:
                    raise
                free = shutil.disk_usage(self.root).free
                raise CacheFull(
                    f"shard cache {self.root} is out of disk space: {entry.bytes} bytes "
                    f"needed for {self.store.uri(entry.path)}, {free} free after evicting "
                    f"{freed} cached shards; point SHARDLINE_CACHE_DIR at a larger volume "
                    "(or free space there, or lower train.cache_max_gb / "
                    "SHARDLINE_CACHE_MAX_GB below what the disk holds)") from again

    def _make_room(self, needed: int) -> int:
        """Evict least recently used shards until ``needed`` bytes are free or none is left;
        returns how many were evicted."""
        evicted = 0
        with self._lock:
            files = []
            for p in self.root.glob("*.arrow"):
                try:
                    files.append((p.stat().st_mtime_ns, p))
                except FileNotFoundError:
                    continue
            for _, p in sorted(files):
                if shutil.disk_usage(self.root).free >= needed:
                    break
                p.unlink(missing_ok=True)
                self._verified.pop(p.stem, None)
                self.stats.evicted += 1
                evicted += 1
        return evicted

    def _download(self, key: str, tmp: Path, algorithm: str) -> tuple[str, int]:
        """Receive ``key`` into ``tmp``, hashing as it arrives."""
        h = _hasher(algorithm)
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = memoryview(bytearray(_CHUNK))
        with open(tmp, "wb") as f:
            def sink(view: memoryview) -> None:
                h.update(view)
                f.write(view)
            got = self.store.read_into(key, buf, sink)
        if got.direct:
            with self._lock:
                self.stats.received_direct += 1
        return str(h.hexdigest()), got.size

    @staticmethod
    def _touch(path: Path) -> int:
        """Mark ``path`` as recently used; returns its new mtime in ns.

        atime is unreliable (noatime mounts), so LRU order is kept in mtime."""
        now = time.time_ns()
        try:
            os.utime(path, ns=(now, now))
            return path.stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def _evict(self, keep: Path) -> None:
        with self._lock:
            files = []
            for p in self.root.glob("*.arrow"):
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                files.append((st.st_mtime_ns, st.st_size, p))
            total = sum(size for _, size, _ in files)
            for _, size, p in sorted(files):
                if total <= self.max_bytes:
                    break
                if p == keep:
                    continue
                p.unlink(missing_ok=True)
                self._verified.pop(p.stem, None)
                total -= size
                self.stats.evicted += 1
            if total > self.max_bytes:
                log.warning("shard cache %s holds %d bytes, over its bound of %d: one shard is "
                            "larger than the cache; raise train.cache_max_gb", self.root, total,
                            self.max_bytes)

    def _sweep_parts(self) -> None:
        """Remove partial downloads left by killed processes (older than an hour)."""
        now = time.time()
        for p in self.root.glob("*.part"):
            try:
                if now - p.stat().st_mtime > _STALE_PART_S:
                    p.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
