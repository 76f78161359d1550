"""Change versions: rows masked by deletion vectors (a deletion, or a correction's old rows).

``build_deletion`` assembles the version after ``parent`` that adds no batch and masks rows;
``add_masks`` puts masks on any draft (a correction: ``core.builder.build_version`` adds the
corrected rows as a batch, ``add_masks`` masks the rows they replace). Both write one
deletion vector per touched shard and a new deletions index (``core.deletions``), subtract
the masked rows from the totals and record what changed (``VersionDoc.changes``). The draft
is committed by ``core.builder.commit_version`` like every version (objects, then the
document with If-None-Match). Cost: the touched shards' vectors plus one index listing every
live vector; nothing proportional to the dataset.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardline.core import layout
from shardline.core.builder import VersionDraft
from shardline.core.deletions import (
    ChangeSummary,
    DeletionRef,
    encode_index,
    encode_vector,
    index_ref,
)
from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest, code_version, now_iso
from shardline.core.parts import QuarantineSummary, ShardEntry, ValidationSummary
from shardline.core.version_doc import digest

SUITE = "deletion"


@dataclasses.dataclass(frozen=True)
class Masked:
    """New positions to mask in one live shard (not masked before)."""

    shard: ShardEntry
    rows: np.ndarray


def add_masks(draft: VersionDraft, parent: Manifest, masked: list[Masked], run: str,
              changes: ChangeSummary) -> VersionDraft:
    """``draft`` (the version after ``parent``) with ``masked`` rows masked as well.

    Raises:
        StoreError: a position is outside its shard or already masked.
    """
    version = draft.doc.version
    objects = dict(draft.objects)
    before = parent.masks({m.shard.path for m in masked})
    new_refs: list[DeletionRef] = []
    for m in masked:
        rows = np.unique(np.asarray(m.rows, np.int64))
        if len(rows) and (rows[0] < 0 or rows[-1] >= m.shard.rows):
            raise StoreError(f"{m.shard.path}: positions {rows[0]}..{rows[-1]} are outside "
                             f"its {m.shard.rows} rows; nothing was committed")
        again = np.intersect1d(rows, before.get(m.shard.path, np.empty(0, np.int64)))
        if len(again):
            raise StoreError(f"{m.shard.path}: row {int(again[0])} is masked already; "
                             "nothing was committed")
        if not len(rows):
            continue
        key = layout.deletion_vector_key(draft.prefix, m.shard.batch, m.shard.sha256, run,
                                         version)
        body = encode_vector(m.shard.path, m.shard.sha256, rows)
        objects[key] = body
        new_refs.append(DeletionRef(shard=m.shard.path, batch=m.shard.batch, key=key,
                                    sha256=digest(body), rows=len(rows), version=version))
    refs = [*parent.deletion_refs, *new_refs]
    ikey = layout.deletions_index_key(draft.prefix, version, run)
    objects[ikey] = encode_index(draft.doc.dataset, version, refs)
    n = sum(r.rows for r in new_refs)
    totals = dataclasses.replace(draft.doc.totals, rows=draft.doc.totals.rows - n)
    doc = dataclasses.replace(draft.doc, deletions=index_ref(ikey, objects[ikey], refs),
                              totals=totals, changes=changes)
    return dataclasses.replace(draft, doc=doc, objects=objects)


def build_deletion(prefix: str, parent: Manifest, masked: list[Masked], run: str,
                   changes: ChangeSummary) -> VersionDraft:
    """The version after ``parent`` that adds no batch and masks ``masked``."""
    p = parent.doc
    n = sum(len(np.unique(m.rows)) for m in masked)
    doc = dataclasses.replace(
        p, version=p.version + 1, parent=p.version, created_at=now_iso(),
        code_version=code_version(), batch=None, changes=None,
        validation=ValidationSummary(success=True, suites=[SUITE], evaluated=n,
                                     counts={"rows_deleted": changes.deleted,
                                             "rows_updated": changes.updated,
                                             "shards_touched": len(masked), "new_rows": 0}),
        quarantine=QuarantineSummary(rows=0, by_rule={}, total_rows=p.totals.quarantined))
    base = VersionDraft(prefix=prefix, doc=doc, objects={}, parent=parent)
    return add_masks(base, parent, masked, run, changes)


def is_change(m: Manifest) -> bool:
    """Whether version ``m`` masked rows (a deletion or a correction)."""
    return m.doc.changes is not None
