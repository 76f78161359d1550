"""``Manifest``: one view of a dataset version over format-1, 2 and 3 documents (opened by
``shardline.core.manifest.read_manifest``, which reads the version document only).

Everything else is read when first used and then kept:

- totals, this version's batch, validation and quarantine counts: in the document;
- ``batches`` (every live batch): the document plus its checkpoint (one more GET);
- ``new()`` / ``sources``: this version's batch list only;
- ``shards`` / ``quarantine.shards``: every batch list (fetched in parallel, digest-checked);
  ``shards_since(v)`` reads only the lists of batches added after ``v``;
- ``schema`` / ``config``: one content-addressed object each.

Format 1 (written before format 2 existed) is one cumulative document: every live shard, every
batch, the schema and config inline. It loads through the same class.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

from shardline.core import shard_table
from shardline.core.errors import StoreError
from shardline.core.format1 import legacy_doc
from shardline.core.parts import (
    BatchEntry,
    BatchListRef,
    QuarantineSummary,
    QuarantineView,
    SchemaInfo,
    ShardEntry,
    SourceEntry,
    Totals,
    ValidationSummary,
)
from shardline.core.shard_table import ShardColumns
from shardline.core.version_doc import (
    READABLE_FORMATS,
    BatchList,
    Checkpoint,
    VersionDoc,
    check_digest,
    decode,
)

Getter = Callable[[str], bytes]


class Manifest:
    """A dataset version as readers see it (format 1 or 2)."""

    def __init__(self, doc: dict[str, Any] | None = None, get: Getter | None = None,
                 key: str = "manifest", **legacy: Any):
        if doc is None:
            doc = legacy_doc(legacy)
        fmt = doc.get("format")
        if fmt not in READABLE_FORMATS:
            raise StoreError(f"{key} has format {fmt!r}; this shardline reads formats "
                             f"{list(READABLE_FORMATS)}: upgrade shardline")
        if fmt != 1 and get is None:
            raise StoreError(f"{key} is a format-{fmt} version document: it needs a way to read "
                             "the objects it references (pass get=store.get_bytes)")
        self.raw, self.key, self.format = doc, key, int(fmt)
        self._get: Getter = get or _no_getter
        self._lists: dict[str, BatchList] = {}
        self.doc: VersionDoc | None = VersionDoc.from_dict(doc, key) if fmt != 1 else None
        self.dataset: str = doc["dataset"]
        self.version: int = int(doc["version"])
        self.parent: int | None = doc.get("parent")
        self.created_at: str = doc.get("created_at", "")
        self.code_version: str = doc.get("code_version", "")
        self.validation = (self.doc.validation if self.doc else
                           ValidationSummary.from_dict(doc.get("validation", {}), key))
        if self.doc is None:
            self._v1_shards = [ShardEntry.from_dict(s, key) for s in doc["shards"]]
            self._v1_batches = [BatchEntry.from_dict(b, key) for b in doc["batches"]]

    def __repr__(self) -> str:
        return f"Manifest({self.dataset!r} v{self.version}, format {self.format})"

    # -- what the document holds ------------------------------------------------------
    @property
    def holdout_fraction(self) -> float | None:
        """The held-out fraction fixed at ingest (None: the split is not materialised)."""
        return self.doc.holdout_fraction if self.doc else None

    @property
    def stats(self) -> dict[str, Any] | None:
        """Dataset-level per-field statistics (``core.field_stats``; None: not recorded)."""
        return self.doc.stats if self.doc else None

    @property
    def fingerprint(self) -> str:
        return self.doc.fingerprint if self.doc else str(self.raw["schema"]["fingerprint"])

    @cached_property
    def totals(self) -> Totals:
        if self.doc:
            return self.doc.totals
        return Totals(rows=sum(s.rows for s in self._v1_shards), shards=len(self._v1_shards),
                      bytes=sum(s.bytes for s in self._v1_shards),
                      batches=len(self._v1_batches),
                      quarantined=sum(b.quarantined for b in self._v1_batches))

    @property
    def rows(self) -> int:
        return self.totals.rows

    @property
    def bytes(self) -> int:
        return self.totals.bytes

    @cached_property
    def new_batch(self) -> BatchEntry | None:
        """The batch this version added."""
        if self.doc:
            ref = self.doc.own_ref
            return ref.entry() if ref else None
        new = set(self.raw.get("new_shards", []))
        ids = {s.batch for s in self._v1_shards if s.path in new}
        return next((b for b in reversed(self._v1_batches) if b.id in ids or b.version ==
                     self.version), None)

    @property
    def new_rows(self) -> int:
        if self.doc:
            ref = self.doc.own_ref
            return ref.rows if ref else 0
        return sum(s.rows for s in self.new())

    @property
    def new_shard_count(self) -> int:
        """How many data shards this version added (no batch-list read)."""
        if self.doc:
            ref = self.doc.own_ref
            return ref.shards if ref else 0
        return len(self.raw.get("new_shards", []))

    @cached_property
    def quarantine(self) -> QuarantineView:
        if self.doc:
            return QuarantineView(self.doc.quarantine, self._all_quarantine_shards)
        q = self.raw.get("quarantine", {})
        return QuarantineView(
            QuarantineSummary(rows=q.get("rows", 0), by_rule=q.get("by_rule", {}),
                              total_rows=q.get("total_rows", self.totals.quarantined)),
            lambda: [ShardEntry.from_dict(s, self.key) for s in q.get("shards", [])])

    # -- read on first use -------------------------------------------------------------
    @cached_property
    def schema(self) -> SchemaInfo:
        if self.doc is None:
            return SchemaInfo.from_dict(self.raw["schema"], self.key)
        ref = self.doc.schema
        return SchemaInfo.from_dict(decode(self.read_object(ref.key), ref.key, ref.sha256), ref.key)

    @cached_property
    def config(self) -> dict[str, Any]:
        if self.doc is None:
            return dict(self.raw.get("config", {}))
        ref = self.doc.config
        return {} if ref is None else decode(self.read_object(ref.key), ref.key, ref.sha256)

    @cached_property
    def batch_lists(self) -> list[BatchListRef]:
        """Every live batch-list reference, oldest first (format 2 only)."""
        if self.doc is None:
            raise StoreError(f"{self.key} is a format-1 manifest: it has no batch lists")
        before: list[BatchListRef] = []
        ck = self.doc.checkpoint
        if ck is not None:
            before = Checkpoint.from_dict(decode(self.read_object(ck.key), ck.key, ck.sha256),
                                          ck.key).batch_lists
        return before + self.doc.batch_lists

    @cached_property
    def batches(self) -> list[BatchEntry]:
        if self.doc is None:
            return self._v1_batches
        return [r.entry() for r in self.batch_lists]

    def batch(self, batch_id: str) -> BatchEntry | None:
        return next((b for b in self.batches if b.id == batch_id), None)

    @cached_property
    def shards(self) -> list[ShardEntry]:
        """Every live data shard, oldest batch first."""
        if self.doc is None:
            return self._v1_shards
        if self.format == 2:
            return [s for bl in self.read_lists(self.batch_lists) for s in bl.shards]
        return self.shard_columns.entries()

    @cached_property
    def shard_columns(self) -> ShardColumns:
        """Every live data shard as columns, oldest batch first: what readers of every shard
        use (the trainer's plan). Arrow batch lists are not turned into entries; JSON ones
        (format 2) and format-1 manifests are."""
        if self.doc is None or self.format == 2:
            return ShardColumns.from_entries(self.shards)
        refs = self.batch_lists
        with ThreadPoolExecutor(max_workers=max(1, min(32, len(refs)))) as pool:
            datas = list(pool.map(lambda r: self.read_object(r.key), refs))
        tables = []
        for r, data in zip(refs, datas, strict=True):
            if not shard_table.is_arrow(data):      # a format-2 list a format-3 doc kept
                bl = BatchList.from_bytes(data, r.key, r.sha256)
                self._lists[r.key] = bl
                tables.append(shard_table.as_table(bl.shards))
                continue
            check_digest(data, r.key, r.sha256)
            tables.append(shard_table.decode(data, r.key)[1])
        return ShardColumns.from_tables(tables)

    def shards_since(self, version: int | None) -> list[ShardEntry]:
        """Data shards of the batches added after ``version`` (all for None), reading only
        their batch lists."""
        if self.doc is None:
            added = {b.id for b in self._v1_batches if version is None or b.version > version}
            return [s for s in self._v1_shards if s.batch in added]
        refs = [r for r in self.batch_lists if version is None or r.version > version]
        return [s for bl in self.read_lists(refs) for s in bl.shards]

    @property
    def new_shards(self) -> list[str]:
        return [s.path for s in self.new()]

    def new(self) -> list[ShardEntry]:
        """This version's new data shards (format 2: its own batch list only)."""
        if self.doc is None:
            new = set(self.raw.get("new_shards", []))
            return [s for s in self._v1_shards if s.path in new]
        ref = self.doc.own_ref
        return [] if ref is None else self.read_lists([ref])[0].shards

    def new_quarantine(self) -> list[ShardEntry]:
        """This version's new quarantine shards (format 2: its own batch list only)."""
        if self.doc is None:
            bid = self.new_batch.id if self.new_batch else None
            return [s for s in self.quarantine.shards if s.batch == bid]
        ref = self.doc.own_ref
        return [] if ref is None else self.read_lists([ref])[0].quarantine_shards

    def old(self) -> list[ShardEntry]:
        new = set(self.new_shards)
        return [s for s in self.shards if s.path not in new]

    @cached_property
    def sources(self) -> list[SourceEntry]:
        """The source objects of this version's batch."""
        if self.doc is None:
            return [SourceEntry.from_dict(s, self.key) for s in self.raw.get("sources", [])]
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

    def read_object(self, key: str) -> builtins.bytes:
        """The bytes of an object this version references (format 2)."""
        return self._get(key)

    def to_dict(self) -> dict[str, Any]:
        """The document as committed."""
        return self.raw


def _no_getter(key: str) -> bytes:
    raise StoreError(f"{key}: this manifest was opened without a way to read objects")
