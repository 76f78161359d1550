"""Detect: which uploads under the dataset's incoming prefix are new, as one batch.

A *source* is one unit of input: a single object (JSONL, CSV, Parquet, one image file of an
ImageFolder tree) or a whole Zarr group (every object under ``<name>.zarr/``). The batch id
is a hash of the sorted (key, ETag) list of its sources, so detecting the same uploads twice
yields the same batch, and publish turns a repeated batch into no new version.

What was already ingested is read from the claim ledger (``batches/<id>.json``, written after
each publish), repaired from the latest manifest for a batch whose ledger write was lost.
The core of it, :func:`new_sources`, is a pure function of (listing, claimed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from shardline.core.config import DatasetConfig
from shardline.core.errors import ObjectExists
from shardline.core.manifest import latest_manifest, read_manifest
from shardline.core.schema import batch_claim_key
from shardline.core.store import ObjectInfo, ObjectStore

log = logging.getLogger(__name__)

FORMATS = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet", ".pq": "parquet",
    ".png": "image", ".jpg": "image", ".jpeg": "image",
}


@dataclass(frozen=True)
class Source:
    """One unit of input. For a Zarr group ``key`` is the group prefix (ending in '/') and
    ``etag`` a hash over its members' keys and ETags."""

    key: str
    etag: str
    size: int
    format: str          # jsonl | csv | parquet | image | zarr | unknown


@dataclass(frozen=True)
class Batch:
    id: str
    sources: tuple[Source, ...]

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.sources)


def _zarr_root(key: str) -> str | None:
    parts = key.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.endswith(".zarr"):
            return "/".join(parts[: i + 1]) + "/"
    return None


def group_sources(listing: Iterable[ObjectInfo]) -> list[Source]:
    """Turn an object listing into sources, sorted by key. Folder markers (keys ending in
    '/') are skipped; files of an unknown type become ``unknown`` sources so that ingest
    quarantines them with a reason rather than ignoring them."""
    singles: list[Source] = []
    groups: dict[str, list[ObjectInfo]] = {}
    for o in listing:
        if o.key.endswith("/"):
            continue
        root = _zarr_root(o.key)
        if root is not None:
            groups.setdefault(root, []).append(o)
            continue
        ext = posixpath.splitext(o.key)[1].lower()
        singles.append(Source(o.key, o.etag, o.size, FORMATS.get(ext, "unknown")))
    for root, members in groups.items():
        h = hashlib.sha256()
        for m in sorted(members, key=lambda m: m.key):
            h.update(f"{m.key[len(root):]}\0{m.etag}\n".encode())
        singles.append(Source(root, h.hexdigest()[:32], sum(m.size for m in members), "zarr"))
    return sorted(singles, key=lambda s: s.key)


def batch_id(sources: Iterable[Source]) -> str:
    """Deterministic id of a set of sources: sha256 over sorted (key, ETag)."""
    h = hashlib.sha256()
    for s in sorted(sources, key=lambda s: s.key):
        h.update(f"{s.key}\0{s.etag}\n".encode())
    return h.hexdigest()[:16]


def new_sources(sources: Iterable[Source], claimed: set[tuple[str, str]]) -> Batch | None:
    """The batch of sources whose (key, ETag) is not claimed yet; ``None`` if there is none.
    An object re-uploaded with new content (new ETag) is new."""
    fresh = tuple(s for s in sources if (s.key, s.etag) not in claimed)
    return Batch(batch_id(fresh), fresh) if fresh else None


def claimed_sources(store: ObjectStore, cfg: DatasetConfig) -> set[tuple[str, str]]:
    """(key, ETag) of every source that entered a published version."""
    claimed: set[tuple[str, str]] = set()
    ledger_ids: set[str] = set()
    for o in store.list(f"{cfg.prefix}/batches/"):
        if not o.key.endswith(".json"):
            continue
        doc = store.get_json(o.key)
        ledger_ids.add(doc["batch"])
        claimed.update((s["key"], s["etag"]) for s in doc["sources"])
    latest = latest_manifest(store, cfg.prefix)
    if latest is not None:
        for b in latest.batches:
            if b.id not in ledger_ids:   # published, but its ledger write was lost
                log.warning("batch %s (v%d) has no ledger entry; reading its manifest",
                            b.id, b.version)
                m = read_manifest(store, cfg.prefix, b.version)
                claimed.update((s.key, s.etag) for s in m.sources)
    return claimed


def detect(store: ObjectStore, cfg: DatasetConfig) -> Batch | None:
    """List ``cfg.incoming`` and return the batch of new sources, or ``None``."""
    sources = group_sources(store.list(cfg.incoming))
    batch = new_sources(sources, claimed_sources(store, cfg))
    if batch is None:
        log.info("nothing new under s3://%s/%s (%d sources, all ingested)",
                 store.bucket, cfg.incoming, len(sources))
    else:
        log.info("batch %s: %d new source(s), %d bytes, of %d under s3://%s/%s", batch.id,
                 len(batch.sources), batch.bytes, len(sources), store.bucket, cfg.incoming)
    return batch


def write_claim(store: ObjectStore, cfg: DatasetConfig, batch: Batch, version: int) -> None:
    """Record in the ledger that ``batch`` entered ``version`` (idempotent)."""
    doc = {
        "batch": batch.id, "version": version,
        "sources": [{"key": s.key, "etag": s.etag, "size": s.size, "format": s.format}
                    for s in batch.sources],
    }
    # ObjectExists: a racing publisher (or an earlier attempt) wrote the same record
    with contextlib.suppress(ObjectExists):
        store.put_bytes(batch_claim_key(cfg.prefix, batch.id),
                        json.dumps(doc, indent=1).encode(), if_none_match=True,
                        content_type="application/json")
