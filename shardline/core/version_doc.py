"""Format 3: the version document and the immutable objects it references.

Learned from Iceberg (snapshot -> manifest list -> manifests) and Delta Lake (log +
checkpoints), cut down to what one writer per commit and S3 conditional writes need:

- a **batch list** (``manifests/batch=<id>-<run>.arrow``) per published batch: its data and
  quarantine shard entries and its source objects, as Arrow IPC columns (format 3; see
  ``shardline.core.shard_table``).
  Written once, before the commit; never changed. Its size is the batch's, not the history's.
- a **checkpoint** (``manifests/checkpoint-v<N>-<run>.json``): every live batch-list
  reference up to version N, written by the publisher of N+1 when the reference list of the
  parent has reached ``CHECKPOINT_EVERY`` entries.
- the **version document** (``versions/v<N>.json``, the commit, If-None-Match: *): parent,
  schema and config references, the checkpoint reference, the batch-list references added
  since that checkpoint (this version's last), this version's validation and quarantine
  summary, and the totals. Between checkpoints it grows by one reference per version; after
  one it is back to one reference.

Every reference carries the sha256 of the referenced bytes; readers check it, so a document
and the objects it names can never be mixed up silently. JSON objects are compact with sorted
keys: the same content is the same bytes.

Only format 3 is read. Datasets written in formats 1 (one cumulative JSON document per
version) and 2 (JSON batch lists) are rewritten once by ``shardline migrate``
(``shardline.tasks.migrate``, the one place that reads them); anything else is refused with
``UnsupportedFormat``, naming the format found and that command.
"""

from __future__ import annotations

import builtins
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from shardline.core import shard_table
from shardline.core.deletions import ChangeSummary, DeletionsRef
from shardline.core.errors import PermanentStoreError, StoreError
from shardline.core.parts import (
    BatchListRef,
    CheckpointRef,
    ObjectRef,
    QuarantineSummary,
    ShardEntry,
    SourceEntry,
    Totals,
    ValidationSummary,
    from_dict,
    to_dict,
)

# 3: batch lists are Arrow IPC (2: the same documents with JSON batch lists; 1: one
# cumulative JSON manifest; both upgraded by ``shardline migrate``).
FORMAT = 3
READABLE_FORMATS = (3,)
MIGRATE = "shardline migrate --config F"
# Delta Lake checkpoints every 10 commits; the same bound keeps a version document at most
# 10 batch-list references long.
CHECKPOINT_EVERY = 10


def encode(obj: dict[str, Any]) -> bytes:
    """Canonical bytes of a document or object (compact JSON, sorted keys)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()


def digest(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def decode(data: bytes, key: str, expect_sha256: str | None = None) -> dict[str, Any]:
    """Parse ``data`` read from ``key``; with ``expect_sha256``, check the bytes first."""
    check_digest(data, key, expect_sha256)
    try:
        out = json.loads(data)
    except ValueError as exc:
        raise StoreError(f"{key} is not valid JSON: {exc}") from exc
    if not isinstance(out, dict):
        raise StoreError(f"{key}: expected a JSON object, got {type(out).__name__}")
    return out


def check_digest(data: bytes, key: str, expect_sha256: str | None) -> None:
    """Raise unless ``data`` (read from ``key``) has the recorded sha256 (None: no check)."""
    if expect_sha256 is not None:
        got = digest(data)
        if got != expect_sha256:
            raise StoreError(
                f"{key}: sha256 {got} differs from {expect_sha256} recorded by the version "
                "that references it; the object was changed after it was published. Restore "
                "it from a backup or publish the data again under a new dataset version"
            )


def drop_unset(refs: list[dict[str, Any]]) -> None:
    """Leave out a batch-list reference's optional fields that are unset, so documents
    written before they existed keep their bytes."""
    for ref in refs:
        for name in ("stats", "id_min", "id_max"):
            if ref.get(name) is None:
                ref.pop(name, None)


class UnsupportedFormat(PermanentStoreError):
    """A manifest object in a format this shardline does not read (``found``)."""

    def __init__(self, key: str, found: Any, what: str = "manifest") -> None:
        self.found = found
        if found in (1, 2):
            fix = (f"upgrade the dataset once with `{MIGRATE}` (F: its config file), then "
                   "run this again")
        else:
            fix = "it was written by a newer shardline or is not a manifest: upgrade shardline"
        super().__init__(f"{key}: {what} format {found!r}; this shardline reads format "
                         f"{FORMAT} only: {fix}")


def check_format(d: dict[str, Any], key: str, what: str = "manifest") -> None:
    if d.get("format") not in READABLE_FORMATS:
        raise UnsupportedFormat(key, d.get("format"), what)


def _check_kind(d: dict[str, Any], kind: str, key: str) -> None:
    check_format(d, key, kind.replace("_", " "))
    if d.get("kind") != kind:
        raise StoreError(f"{key}: expected a {kind}, found kind {d.get('kind')!r}; the "
                         "object is damaged or misplaced: restore it from a backup")


@dataclass(frozen=True)
class BatchList:
    """The shards, quarantine shards and sources of one published batch."""

    dataset: str
    batch: str
    run: str
    rows: int
    quarantined: int
    ids_path: str
    shards: list[ShardEntry]
    quarantine_shards: list[ShardEntry] = field(default_factory=list)
    sources: list[SourceEntry] = field(default_factory=list)
    format: int = FORMAT
    kind: str = "batch_list"

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def to_arrow(self) -> builtins.bytes:
        """The batch list as Arrow IPC bytes (format 3)."""
        meta = {"format": self.format, "kind": self.kind, "dataset": self.dataset,
                "batch": self.batch, "run": self.run, "rows": self.rows,
                "quarantined": self.quarantined, "ids_path": self.ids_path,
                "sources": [to_dict(s) for s in self.sources]}
        return shard_table.encode(meta, self.shards, self.quarantine_shards)

    @classmethod
    def from_bytes(cls, data: builtins.bytes, key: str,
                   expect_sha256: str | None = None) -> BatchList:
        """A batch list from its Arrow IPC bytes (a JSON one is format 2: refused)."""
        check_digest(data, key, expect_sha256)
        if not shard_table.is_arrow(data):
            raise UnsupportedFormat(key, 2, "batch list (JSON)")
        meta, table = shard_table.decode(data, key)
        _check_kind(meta, "batch_list", key)
        shards, quarantine = shard_table.split_entries(table)
        return from_dict(cls, {
            **meta, "shards": shards, "quarantine_shards": quarantine,
            "sources": [SourceEntry.from_dict(s, key) for s in meta.get("sources", [])],
        }, key)


@dataclass(frozen=True)
class Checkpoint:
    """Every live batch-list reference of the dataset at ``version``, oldest first."""

    dataset: str
    version: int
    batch_lists: list[BatchListRef]
    totals: Totals
    format: int = FORMAT
    kind: str = "checkpoint"

    def to_dict(self) -> dict[str, Any]:
        out = to_dict(self)
        drop_unset(out.get("batch_lists", []))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], key: str) -> Checkpoint:
        _check_kind(d, "checkpoint", key)
        return from_dict(cls, {
            **d,
            "batch_lists": [BatchListRef.from_dict(r, key) for r in d.get("batch_lists", [])],
            "totals": Totals.from_dict(d.get("totals"), key),
        }, key)


@dataclass(frozen=True)
class VersionDoc:
    """The committed document of one version."""

    dataset: str
    version: int
    parent: int | None
    created_at: str
    code_version: str
    batch: str | None               # the batch this version added (None: no new batch)
    fingerprint: str                # schema fingerprint (compared without reading ``schema``)
    schema: ObjectRef
    config: ObjectRef | None
    checkpoint: CheckpointRef | None
    batch_lists: list[BatchListRef]  # live references after the checkpoint, oldest first
    validation: ValidationSummary
    quarantine: QuarantineSummary
    totals: Totals
    format: int = FORMAT
    # The dataset's held-out fraction, fixed by the first version that materialised the
    # split (held-out rows in their own shards) and copied to every later one. None: no
    # version has materialised it yet (every shard is mixed; readers choose the fraction).
    holdout_fraction: float | None = None
    # Dataset-level per-field statistics (typed fields; ``core.field_stats``): the parent's
    # merged with this version's batch, so O(1) per version. None: not recorded.
    stats: dict[str, Any] | None = None
    # Rows masked by deletion vectors (``core.deletions``): the live index, copied by every
    # later version until a compaction applies it. None: no row is masked.
    deletions: DeletionsRef | None = None
    # What a deletion or correction version changed (None: an ingest or compaction).
    changes: ChangeSummary | None = None

    @property
    def own_ref(self) -> BatchListRef | None:
        """The reference to the batch list this version added."""
        return next((r for r in reversed(self.batch_lists)
                     if r.batch == self.batch and r.version == self.version), None)

    def to_dict(self) -> dict[str, Any]:
        out = to_dict(self)
        # optional parts: documents without them keep their bytes
        for optional in ("stats", "deletions", "changes"):
            if out.get(optional) is None:
                out.pop(optional, None)
        drop_unset(out.get("batch_lists", []))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], key: str) -> VersionDoc:
        check_format(d, key, "version document")
        ckpt, conf = d.get("checkpoint"), d.get("config")
        dels, changes = d.get("deletions"), d.get("changes")
        return from_dict(cls, {
            **d,
            "deletions": None if dels is None else DeletionsRef.from_dict(dels, key),
            "changes": None if changes is None else ChangeSummary.from_dict(changes, key),
            "schema": ObjectRef.from_dict(d.get("schema"), key),
            "config": None if conf is None else ObjectRef.from_dict(conf, key),
            "checkpoint": None if ckpt is None else CheckpointRef.from_dict(ckpt, key),
            "batch_lists": [BatchListRef.from_dict(r, key) for r in d.get("batch_lists", [])],
            "validation": ValidationSummary.from_dict(d.get("validation"), key),
            "quarantine": QuarantineSummary.from_dict(d.get("quarantine", {}), key),
            "totals": Totals.from_dict(d.get("totals", {}), key),
        }, key)
