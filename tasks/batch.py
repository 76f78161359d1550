"""The batch types: a :class:`Source` (one unit of input) and a :class:`Batch` (the new
sources one ingest run converts), and the batch id.

A source is a single object (JSONL, CSV, Parquet, one image file of an ImageFolder tree) or
a whole Zarr group (every object under ``<name>.zarr/``). The batch id is a hash of the
sorted (key, ETag) list of its sources, so detecting the same uploads twice yields the same
batch, and publish turns a repeated batch into no new version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """One unit of input. For a Zarr group ``key`` is the group prefix (ending in '/') and
    ``etag`` a hash over its members' keys and ETags."""

    key: str
    etag: str
    size: int
    format: str          # a key of tasks.convert.formats.FORMATS, or "unknown"


@dataclass(frozen=True)
class Batch:
    id: str
    sources: tuple[Source, ...]
    # the latest version whose sources detect counted as claimed (0: none yet; None: not
    # known, e.g. a batch built by hand): publish checks the batches after it for sources
    # this batch shares with them (tasks.publish)
    seen_version: int | None = None

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.sources)


def batch_id(sources: Iterable[Source]) -> str:
    """Deterministic id of a set of sources: sha256 over sorted (key, ETag)."""
    h = hashlib.sha256()
    for s in sorted(sources, key=lambda s: s.key):
        h.update(f"{s.key}\0{s.etag}\n".encode())
    return h.hexdigest()[:16]
