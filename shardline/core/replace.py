"""The other way to build a version: swap shards of live batches, adding no batch.

``core.builder.build_version`` adds exactly one new batch; a compaction (``tasks.compact``)
and a migration (``tasks.migrate``) add none and replace the lists of old batches, so their
documents are assembled here (``replacement``),
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
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from shardline.core.builder import VersionDraft, batch_list_ref, write_checkpoint
from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest, code_version, now_iso
from shardline.core.parts import (
    BatchListRef,
    QuarantineSummary,
    ShardEntry,
    Totals,
    ValidationSummary,
)
from shardline.core.version_doc import Checkpoint, VersionDoc

SUITE = "compaction"
ERASURE = "erasure"          # the suite of an erasure's version (``tasks.erase``)


@dataclass(frozen=True)
class Rewrite:
    """One batch's compacted shard list: the shards it replaces and what replaces them."""

    batch: str
    replaced: list[ShardEntry]
    outputs: list[ShardEntry]
    masked_rows: int = 0            # rows of ``replaced`` that deletion vectors masked
    # an erasure's rewrite of the batch's quarantine shards (``masked_rows``: rows erased)
    quarantine: Rewrite | None = None

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


def replacement(prefix: str, parent: VersionDoc, refs: list[BatchListRef],
                objects: dict[str, bytes], run: str, validation: ValidationSummary,
                *, masked_left: int = 0, erased: int = 0, erased_quarantined: int = 0
                ) -> VersionDraft:
    """The version after ``parent`` whose live batches are ``refs``, all in a new checkpoint
    (written by ``run``), adding no batch. ``objects``: the new batch lists already in it.
    ``masked_left``: rows of ``refs`` deletion vectors still mask (an erasure keeps the
    vectors of shards it does not rewrite); ``erased``: live rows the version removes,
    ``erased_quarantined``: quarantined rows.

    Raises:
        StoreError: the rows, batches or quarantined rows would differ from the parent's
            (less ``erased`` rows).
    """
    totals = Totals(rows=sum(r.rows for r in refs) - masked_left,
                    shards=sum(r.shards for r in refs),
                    bytes=sum(r.bytes for r in refs), batches=len(refs),
                    quarantined=sum(r.quarantined for r in refs))
    was = parent.totals
    if (totals.rows, totals.batches, totals.quarantined) != (
            was.rows - erased, was.batches, was.quarantined - erased_quarantined):
        raise StoreError(f"a new version of {parent.dataset} v{parent.version} would change "
                         f"its totals {was} to {totals}; nothing was committed")
    version = parent.version + 1
    ck = write_checkpoint(prefix, objects, Checkpoint(
        dataset=parent.dataset, version=version, batch_lists=refs, totals=totals), run)
    doc = VersionDoc(
        dataset=parent.dataset, version=version, parent=parent.version,
        created_at=now_iso(), code_version=code_version(), batch=None,
        fingerprint=parent.fingerprint, schema=parent.schema, config=parent.config,
        checkpoint=ck, batch_lists=[], validation=validation,
        quarantine=QuarantineSummary(rows=0, by_rule={}, total_rows=totals.quarantined),
        totals=totals, holdout_fraction=parent.holdout_fraction, stats=parent.stats)
    return VersionDraft(prefix=prefix, doc=doc, objects=objects)


def build_compaction(prefix: str, parent: Manifest, rewrites: dict[str, Rewrite], run: str,
                     *, rows_rewritten: int,
                     id_files: dict[str, tuple[str, bytes]] | None = None,
                     validation: ValidationSummary | None = None,
                     masked_left: int = 0, erased: int = 0) -> VersionDraft:
    """The version after ``parent`` with the batch lists of ``rewrites`` replaced.
    ``id_files``: batch -> (key, bytes) of a new id file for it (its masked rows' ids
    left out, ``tasks.compact_ids``; an erasure's ids, ``tasks.erase``), written with the
    version and named by it. ``validation`` (default: the compaction's), ``masked_left``
    and ``erased``: an erasure builds on this too (see ``replacement``)."""
    objects: dict[str, bytes] = {}
    id_files = id_files or {}
    refs: list[BatchListRef] = []
    old_refs = parent.batch_lists
    touched = [r for r in old_refs if r.batch in rewrites]        # only those are read
    lists = dict(zip([r.batch for r in touched], parent.read_lists(touched), strict=True))
    for old_ref in old_refs:
        rw = rewrites.get(old_ref.batch)
        if rw is None:
            refs.append(old_ref)          # untouched: the same object, the same digest
            continue
        old = lists[old_ref.batch]
        shards = rw.apply(old.shards)
        if sum(s.rows for s in shards) != old.rows - rw.masked_rows:
            raise StoreError(f"batch {old.batch}: compacted shards hold "
                             f"{sum(s.rows for s in shards)} rows, the batch {old.rows} of "
                             f"which {rw.masked_rows} masked")
        new = dataclasses.replace(old, run=run, shards=shards, rows=old.rows - rw.masked_rows)
        if old.batch in id_files:
            key, body = id_files[old.batch]
            objects[key] = body
            new = dataclasses.replace(new, ids_path=key)
        if rw.quarantine is not None:
            q = rw.quarantine
            new = dataclasses.replace(new, quarantine_shards=q.apply(old.quarantine_shards),
                                      quarantined=old.quarantined - q.masked_rows)
        # the id range may name a deleted id
        dropped = rw.masked_rows > 0 or old.batch in id_files
        refs.append(dataclasses.replace(batch_list_ref(prefix, objects, old_ref.version, new),
                                        sources=old_ref.sources, stats=old_ref.stats,
                                        id_min=None if dropped else old_ref.id_min,
                                        id_max=None if dropped else old_ref.id_max))
    missing = set(rewrites) - {r.batch for r in refs}
    if missing:
        raise StoreError(f"batches {sorted(missing)} are not live in version {parent.version}")
    replaced = sum(len(rw.replaced) for rw in rewrites.values())
    added = sum(len(rw.outputs) for rw in rewrites.values())
    validation = validation or ValidationSummary(
        success=True, suites=[SUITE], evaluated=rows_rewritten,
        counts={"rows_rewritten": rows_rewritten, "shards_in": replaced,
                "shards_out": added, "batches": len(rewrites), "new_rows": 0})
    erased_q = sum(rw.quarantine.masked_rows for rw in rewrites.values() if rw.quarantine)
    draft = replacement(prefix, parent.doc, refs, objects, run, validation,
                        masked_left=masked_left, erased=erased, erased_quarantined=erased_q)
    return dataclasses.replace(draft, parent=parent)


def is_compaction(m: Manifest) -> bool:
    """Whether version ``m`` is a compaction (it added no batch; only the lists changed)."""
    return m.doc.batch is None and SUITE in m.doc.validation.suites


def is_erasure(m: Manifest) -> bool:
    """Whether version ``m`` is an erasure (rows removed from rewritten shards; it keeps no
    id of them)."""
    return m.doc.batch is None and ERASURE in m.doc.validation.suites
