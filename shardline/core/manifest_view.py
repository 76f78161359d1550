"""``Manifest``: one view of a dataset version (format 3; opened by
``shardline.core.manifest.read_manifest``, which reads the version document only).

Everything else is read when first used and then kept:

- totals, this version's batch, validation and quarantine counts: in the document;
- ``batches`` (every live batch): the document plus its checkpoint (one more GET);
- ``new()`` / ``sources``: this version's batch list only;
- ``shards`` / ``quarantine.shards``: every batch list (fetched in parallel, digest-checked);
- ``schema`` / ``config``: one content-addressed object each;
- ``deletion_refs`` / ``masks()``: the deletions index (one GET), then each deletion vector
  (``core.deletions``; rows readers never serve).

Documents and objects of formats 1 and 2 are refused (``UnsupportedFormat``, naming
``shardline migrate``); that command is the one reader of them.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

import numpy as np

from shardline.core import shard_table
from shardline.core.deletions import DeletionRef, decode_index, decode_vector, union
from shardline.core.parts import (
    BatchEntry,
    BatchListRef,
    QuarantineView,
    SchemaInfo,
    ShardEntry,
    SourceEntry,
    Totals,
)
from shardline.core.shard_table import ShardColumns
from shardline.core.version_doc import (
    FORMAT,
    BatchList,
    Checkpoint,
    UnsupportedFormat,
    VersionDoc,
    check_digest,
    decode,
)

Getter = Callable[[str], bytes]


class Manifest:
    """A dataset version as readers see it."""

    def __init__(self, doc: dict[str, Any], get: Getter, key: str = "manifest"):
        self.raw, self.key, self.format = doc, key, FORMAT
        self._get = get
        self._lists: dict[str, BatchList] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self.doc: VersionDoc = VersionDoc.from_dict(doc, key)
        self.dataset: str = self.doc.dataset
        self.version: int = self.doc.version
        self.parent: int | None = self.doc.parent
        self.created_at: str = self.doc.created_at
        self.code_version: str = self.doc.code_version
        self.validation = self.doc.validation

    # -- what the document holds ------------------------------------------------------
    @property
    def holdout_fraction(self) -> float | None:
        """The held-out fraction fixed at ingest (None: the split is not materialised)."""
        return self.doc.holdout_fraction

    @property
    def stats(self) -> dict[str, Any] | None:
        """Dataset-level per-field statistics (``core.field_stats``; None: not recorded)."""
        return self.doc.stats

    @property
    def fingerprint(self) -> str:
        return self.doc.fingerprint

    @property
    def totals(self) -> Totals:
        return self.doc.totals

    @property
    def rows(self) -> int:
        return self.totals.rows

    @property
    def bytes(self) -> int:
        return self.totals.bytes

    @cached_property
    def new_batch(self) -> BatchEntry | None:
        """The batch this version added."""
        ref = self.doc.own_ref
        return ref.entry() if ref else None

    @property
    def new_rows(self) -> int:
        ref = self.doc.own_ref
        return ref.rows if ref else 0

    @property
    def new_shard_count(self) -> int:
        """How many data shards this version added (no batch-list read)."""
        ref = self.doc.own_ref
        return ref.shards if ref else 0

    @cached_property
    def quarantine(self) -> QuarantineView:
        return QuarantineView(self.doc.quarantine, self._all_quarantine_shards)

    # -- read on first use -------------------------------------------------------------
    @cached_property
    def schema(self) -> SchemaInfo:
        ref = self.doc.schema
        return SchemaInfo.from_dict(decode(self.read_object(ref.key), ref.key, ref.sha256), ref.key)

    @cached_property
    def config(self) -> dict[str, Any]:
        ref = self.doc.config
        return {} if ref is None else decode(self.read_object(ref.key), ref.key, ref.sha256)

    @cached_property
    def batch_lists(self) -> list[BatchListRef]:
        """Every live batch-list reference, oldest first."""
        before: list[BatchListRef] = []
        ck = self.doc.checkpoint
        if ck is not None:
            before = Checkpoint.from_dict(decode(self.read_object(ck.key), ck.key, ck.sha256),
                                          ck.key).batch_lists
        return before + self.doc.batch_lists

    @cached_property
    def batches(self) -> list[BatchEntry]:
        return [r.entry() for r in self.batch_lists]

    def batch(self, batch_id: str) -> BatchEntry | None:
        return next((b for b in self.batches if b.id == batch_id), None)

    @cached_property
    def shards(self) -> list[ShardEntry]:
        """Every live data shard, oldest batch first."""
        return self.shard_columns.entries()

    @cached_property
    def shard_columns(self) -> ShardColumns:
        """Every live data shard as columns, oldest batch first: what readers of every shard
        use (the trainer's plan); the Arrow batch lists are not turned into entries."""
        refs = self.batch_lists
        with ThreadPoolExecutor(max_workers=max(1, min(32, len(refs)))) as pool:
            datas = list(pool.map(lambda r: self.read_object(r.key), refs))
        tables = []
        for r, data in zip(refs, datas, strict=True):
            check_digest(data, r.key, r.sha256)
            if not shard_table.is_arrow(data):
                raise UnsupportedFormat(r.key, 2, "batch list (JSON)")
            tables.append(shard_table.decode(data, r.key)[1])
        return ShardColumns.from_tables(tables)

    @property
    def new_shards(self) -> list[str]:
        return [s.path for s in self.new()]

    def new(self) -> list[ShardEntry]:
        """This version's new data shards (its own batch list only)."""
        ref = self.doc.own_ref
        return [] if ref is None else self.read_lists([ref])[0].shards

    def new_quarantine(self) -> list[ShardEntry]:
        """This version's new quarantine shards (its own batch list only)."""
        ref = self.doc.own_ref
        return [] if ref is None else self.read_lists([ref])[0].quarantine_shards

    @cached_property
    def sources(self) -> list[SourceEntry]:
        """The source objects of this version's batch."""
        ref = self.doc.own_ref
        return [] if ref is None else self.read_lists([ref])[0].sources

    def read_lists(self, refs: Iterable[BatchListRef]) -> list[BatchList]:
        """The batch lists of ``refs`` (cached; missing ones fetched in parallel)."""
        refs = list(refs)
        todo = [r for r in refs if r.key not in self._lists]
        if todo:
            def load(r: BatchListRef) -> BatchList:
                return BatchList.from_bytes(self.read_object(r.key), r.key, r.sha256)
            with ThreadPoolExecutor(max_workers=min(32, len(todo))) as pool:
                for r, bl in zip(todo, pool.map(load, todo), strict=True):
                    self._lists[r.key] = bl
        return [self._lists[r.key] for r in refs]

    def _all_quarantine_shards(self) -> list[ShardEntry]:
        return [s for bl in self.read_lists(self.batch_lists) for s in bl.quarantine_shards]

    # -- deletion vectors ----------------------------------------------------------------
    @cached_property
    def deletion_refs(self) -> list[DeletionRef]:
        """Every live deletion vector reference (empty: no row is masked)."""
        ref = self.doc.deletions
        return [] if ref is None else decode_index(self.read_object(ref.key), ref)

    @property
    def deleted_rows(self) -> int:
        """Rows masked in this version (a document read only)."""
        return 0 if self.doc.deletions is None else self.doc.deletions.rows

    def masks(self, shards: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """Masked row positions (ascending) by shard path, for ``shards`` (default: every
        masked shard); a shard without a vector is absent. Vectors are read in parallel
        once and kept."""
        want = None if shards is None else set(shards)
        refs = [r for r in self.deletion_refs if want is None or r.shard in want]
        todo = [r for r in refs if r.key not in self._vectors]
        if todo:
            with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
                for r, rows in zip(todo, pool.map(
                        lambda r: decode_vector(self.read_object(r.key), r), todo), strict=True):
                    self._vectors[r.key] = rows
        by_shard: dict[str, list[np.ndarray]] = {}
        for r in refs:
            by_shard.setdefault(r.shard, []).append(self._vectors[r.key])
        return {k: union(v) for k, v in by_shard.items()}

    def read_object(self, key: str) -> builtins.bytes:
        """The bytes of an object this version references."""
        return self._get(key)

    def to_dict(self) -> dict[str, Any]:
        """The document as committed."""
        return self.raw
