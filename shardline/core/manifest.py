"""The manifest: one JSON document per dataset version, the contract between ingest and trainer.

A version exists if and only if ``versions/vNNNNNN.json`` exists. It is written last, with
``If-None-Match: *``, after every shard it names is in place, so a reader that resolves
versions by listing ``versions/`` never sees a version whose shards are missing, and two
publishers can never both own a version number. Manifests are cumulative: version N lists
every live shard, so a reader needs one document, never a listing of ``shards/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import xxhash

from shardline import __version__
from shardline.core.errors import ObjectExists, StoreError
from shardline.core.schema import version_key, versions_prefix
from shardline.core.store import ObjectStore

FORMAT = 1
_VERSION_RE = re.compile(r"/v(\d{6})\.json$")


@dataclass(frozen=True)
class ShardEntry:
    """One immutable Arrow IPC file."""

    path: str                      # key within the bucket
    rows: int
    bytes: int
    sha256: str
    batch: str
    partition: dict[str, str]      # hive partition values, e.g. {"batch": "...", "label": "3"}
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)   # column -> {min, max}
    compression: str = "none"
    # Fast check of the same bytes (XXH3, 128 bit): what readers verify downloads and cached
    # files against. sha256 stays the shard's content address (cache file names, plan
    # fingerprints). Manifests written before this field existed have None here; readers
    # then verify the sha256.
    xxh3_128: str | None = None


def content_digests(data: bytes | bytearray | memoryview) -> tuple[str, str]:
    """``(sha256, xxh3_128)`` hex digests of a shard's bytes, as ``ShardEntry`` records them."""
    return hashlib.sha256(data).hexdigest(), xxhash.xxh3_128_hexdigest(data)


@dataclass(frozen=True)
class SourceEntry:
    key: str
    etag: str
    size: int
    format: str


@dataclass(frozen=True)
class BatchEntry:
    """A source batch that entered the dataset, and the version that added it."""

    id: str
    version: int
    rows: int
    quarantined: int
    ids_path: str                   # Arrow file with the published ids of this batch
    sources: int


@dataclass(frozen=True)
class Manifest:
    dataset: str
    version: int
    parent: int | None
    created_at: str
    schema: dict[str, Any]          # {"fingerprint", "fields", "ipc_b64", "shape", "classes"}
    shards: list[ShardEntry]
    new_shards: list[str]
    batches: list[BatchEntry]
    sources: list[SourceEntry]      # the source objects of this version's new batch
    validation: dict[str, Any]
    quarantine: dict[str, Any]      # {"rows", "by_rule", "total_rows", "shards": cumulative}
    code_version: str
    config: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT

    # -- derived ----------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def new_rows(self) -> int:
        new = set(self.new_shards)
        return sum(s.rows for s in self.shards if s.path in new)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def batch(self, batch_id: str) -> BatchEntry | None:
        return next((b for b in self.batches if b.id == batch_id), None)

    def new(self) -> list[ShardEntry]:
        new = set(self.new_shards)
        return [s for s in self.shards if s.path in new]

    def old(self) -> list[ShardEntry]:
        new = set(self.new_shards)
        return [s for s in self.shards if s.path not in new]

    # -- (de)serialisation ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        if d.get("format") != FORMAT:
            raise StoreError(
                f"manifest v{d.get('version')} has format {d.get('format')!r}; this shardline "
                f"reads format {FORMAT}: upgrade shardline"
            )
        q = dict(d["quarantine"])
        q["shards"] = [ShardEntry(**s) for s in q.get("shards", [])]
        return cls(
            **{
                **d,
                "shards": [ShardEntry(**s) for s in d["shards"]],
                "batches": [BatchEntry(**b) for b in d["batches"]],
                "sources": [SourceEntry(**s) for s in d["sources"]],
                "quarantine": q,
            }
        )


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@cache
def code_version() -> str:
    """shardline's version plus the git commit when running from a checkout."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+{sha}" if sha else __version__


def list_versions(store: ObjectStore, prefix: str) -> list[int]:
    """Committed version numbers, ascending (S3 listing is strongly consistent)."""
    out = []
    for o in store.list(versions_prefix(prefix)):
        m = _VERSION_RE.search(o.key)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def read_manifest(store: ObjectStore, prefix: str, version: int) -> Manifest:
    return Manifest.from_dict(store.get_json(version_key(prefix, version)))


def latest_manifest(store: ObjectStore, prefix: str) -> Manifest | None:
    versions = list_versions(store, prefix)
    return read_manifest(store, prefix, versions[-1]) if versions else None


def resolve_version(store: ObjectStore, prefix: str, version: int | None) -> Manifest:
    """``version`` or the latest; raises naming the dataset prefix when there is none."""
    versions = list_versions(store, prefix)
    if not versions:
        raise StoreError(
            f"no dataset versions under s3://{store.bucket}/{prefix}/versions/; run "
            "`shardline ingest` first"
        )
    if version is None:
        version = versions[-1]
    elif version not in versions:
        raise StoreError(
            f"dataset version {version} does not exist under s3://{store.bucket}/{prefix}/; "
            f"known versions: {versions}"
        )
    return read_manifest(store, prefix, version)


def commit_manifest(store: ObjectStore, prefix: str, manifest: Manifest) -> str:
    """Write the manifest with If-None-Match: *; the version exists from this moment.

    Raises:
        ObjectExists: another publisher already committed this version number.
    """
    key = version_key(prefix, manifest.version)
    store.put_json(key, manifest.to_dict(), if_none_match=True)
    return key


__all__ = [
    "BatchEntry", "Manifest", "ObjectExists", "ShardEntry", "SourceEntry", "code_version",
    "commit_manifest", "latest_manifest", "list_versions", "now_iso", "read_manifest",
    "resolve_version",
]
