"""The other way to build a version: swap shards of live batches, adding no batch.

``core.builder.build_version`` adds exactly one new batch; a compaction (``tasks.compact``)
adds none and replaces the shard lists of old batches, so its document is assembled here,
beside the builder and from the same parts (``BatchList``, ``Checkpoint``, ``VersionDoc``,
``core.layout``), and committed by ``core.builder.commit_version`` like every other version
(objects first, then ``versions/v<N>.json`` with If-None-Match). These two functions are the
only places a version document is assembled.

What the compaction version says, so that nothing downstream mistakes it for new data:

- ``batch`` is None: the version added no batch (``Manifest.new_batch`` None, ``new_rows``
  0, ``new()`` empty);
- every batch keeps its id, its ``version`` (the version that first published its rows),
  its id index (``ids_path``), its quarantine shards, sources and counts: only the batch
  list (its shards) is new. A shard keeps its ``split`` (train, holdout, or None for an
  older mixed shard: never merged with another split) and the version keeps the dataset's
  ``holdout_fraction``. The trainer decides "new" by a shard's batch version, so
  compacted rows stay replay rows; the duplicate check reads the same id files;
- the references are written into a new checkpoint (all batches, compacted or not), the
  document carrying none after it; totals are recomputed from the references and must
  equal the parent's rows, batches and quarantined counts;
- ``validation`` records the compaction (suite ``compaction``, rows rewritten, shards in
  and out); ``quarantine`` adds nothing.

A format-1 parent (one cumulative document) gets a batch list for every batch, as the
builder migrates one on the next ingest: compaction fixes an old dataset in place.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardline.core import layout
from shardline.core.builder import VersionDraft
from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest, code_version, now_iso
from shardline.core.parts import (
    BatchListRef,
    CheckpointRef,
    ObjectRef,
    QuarantineSummary,
    ShardEntry,
    Totals,
    ValidationSummary,
    to_dict,
)
from shardline.core.version_doc import BatchList, Checkpoint, VersionDoc, digest, encode

SUITE = "compaction"


@dataclass(frozen=True)
class Rewrite:
    """One batch's compacted shard list: the shards it replaces and what replaces them."""

    batch: str
    replaced: list[ShardEntry]
    outputs: list[ShardEntry]

    def apply(self, shards: list[ShardEntry]) -> list[ShardEntry]:
        """The batch's shard list with the replaced shards swapped for the outputs (placed
        where the first replaced shard was)."""
        gone = {s.path for s in self.replaced}
        if not gone <= {s.path for s in shards}:
            raise StoreError(f"batch {self.batch}: shards to replace are not in its list")
        out: list[ShardEntry] = []
        for s in shards:
            if s.path not in gone:
                out.append(s)
            elif self.outputs and s.path == self.replaced[0].path:
                out.extend(self.outputs)
        return out


def _content_ref(objects: dict[str, bytes], key: str, body: bytes) -> ObjectRef:
    objects[key] = body
    return ObjectRef(key=key, sha256=digest(body))


def _shared_refs(prefix: str, parent: Manifest, objects: dict[str, bytes]
                 ) -> tuple[ObjectRef, ObjectRef | None]:
    """The parent's schema and config references (format 1: written content-addressed)."""
    if parent.doc is not None:
        return parent.doc.schema, parent.doc.config
    schema = encode(to_dict(parent.schema))
    config = encode(parent.config)
    return (_content_ref(objects, layout.schema_key(prefix, digest(schema)[:32]), schema),
            _content_ref(objects, layout.config_key(prefix, digest(config)[:32]), config))


def _old_lists(parent: Manifest, run: str) -> list[tuple[BatchListRef | None, BatchList]]:
    """Every live batch of ``parent`` with its reference (None: format 1) and its list."""
    if parent.doc is not None:
        refs = parent.batch_lists
        return list(zip(refs, parent.read_lists(refs), strict=True))
    q = parent.quarantine.shards
    return [(None, BatchList(dataset=parent.dataset, batch=b.id, run=run, rows=b.rows,
                             quarantined=b.quarantined, ids_path=b.ids_path,
                             shards=[s for s in parent.shards if s.batch == b.id],
                             quarantine_shards=[s for s in q if s.batch == b.id]))
            for b in parent.batches]


def build_compaction(prefix: str, parent: Manifest, rewrites: dict[str, Rewrite], run: str,
                     *, rows_rewritten: int) -> VersionDraft:
    """The version after ``parent`` with the batch lists of ``rewrites`` replaced."""
    objects: dict[str, bytes] = {}
    version = parent.version + 1
    schema_ref, config_ref = _shared_refs(prefix, parent, objects)
    refs: list[BatchListRef] = []
    by_id = {b.id: b for b in parent.batches}
    for old_ref, old in _old_lists(parent, run):
        rw = rewrites.get(old.batch)
        if old_ref is not None and rw is None:
            refs.append(old_ref)          # untouched: the same object, the same digest
            continue
        shards = old.shards if rw is None else rw.apply(old.shards)
        new = BatchList(dataset=parent.dataset, batch=old.batch, run=run, rows=old.rows,
                        quarantined=old.quarantined, ids_path=old.ids_path, shards=shards,
                        quarantine_shards=old.quarantine_shards, sources=old.sources)
        if sum(s.rows for s in shards) != old.rows:
            raise StoreError(f"batch {old.batch}: compacted shards hold "
                             f"{sum(s.rows for s in shards)} rows, the batch {old.rows}")
        body = new.to_arrow()
        key = layout.batch_list_key(prefix, old.batch, run)
        objects[key] = body
        entry = by_id[old.batch]
        refs.append(BatchListRef(batch=old.batch, version=entry.version, key=key,
                                 sha256=digest(body), rows=old.rows, shards=len(shards),
                                 bytes=new.bytes, quarantined=old.quarantined,
                                 ids_path=old.ids_path,
                                 sources=old_ref.sources if old_ref else entry.sources))
    missing = set(rewrites) - {r.batch for r in refs}
    if missing:
        raise StoreError(f"batches {sorted(missing)} are not live in version {parent.version}")
    totals = Totals(rows=sum(r.rows for r in refs), shards=sum(r.shards for r in refs),
                    bytes=sum(r.bytes for r in refs), batches=len(refs),
                    quarantined=sum(r.quarantined for r in refs))
    was = parent.totals
    if (totals.rows, totals.batches, totals.quarantined) != (was.rows, was.batches,
                                                             was.quarantined):
        raise StoreError(f"compaction of version {parent.version} would change its totals "
                         f"{was} to {totals}; nothing was committed")
    ck = Checkpoint(dataset=parent.dataset, version=version, batch_lists=refs, totals=totals)
    ck_body = encode(ck.to_dict())
    ck_key = layout.checkpoint_key(prefix, version, run)
    objects[ck_key] = ck_body
    replaced = sum(len(rw.replaced) for rw in rewrites.values())
    added = sum(len(rw.outputs) for rw in rewrites.values())
    doc = VersionDoc(
        dataset=parent.dataset, version=version, parent=parent.version,
        created_at=now_iso(), code_version=code_version(), batch=None,
        fingerprint=parent.fingerprint, schema=schema_ref, config=config_ref,
        checkpoint=CheckpointRef(key=ck_key, sha256=digest(ck_body), version=version,
                                 batches=len(refs)),
        batch_lists=[],
        validation=ValidationSummary(
            success=True, suites=[SUITE], evaluated=rows_rewritten,
            counts={"rows_rewritten": rows_rewritten, "shards_in": replaced,
                    "shards_out": added, "batches": len(rewrites), "new_rows": 0}),
        quarantine=QuarantineSummary(rows=0, by_rule={}, total_rows=totals.quarantined),
        totals=totals, holdout_fraction=parent.holdout_fraction)
    return VersionDraft(prefix=prefix, doc=doc, objects=objects, parent=parent)


def is_compaction(m: Manifest) -> bool:
    """Whether version ``m`` is a compaction (it added no batch; only the lists changed)."""
    return m.doc is not None and m.doc.batch is None and SUITE in m.doc.validation.suites
