"""Corrections: uploads under ``<incoming>corrections/`` replace the published rows with the
same ids (Delta Lake's ``MERGE ... WHEN MATCHED UPDATE``, as a new version).

A correction upload goes through ingest like any other (detect, convert, validate): its
rows become a new batch, so the trainer sees them as new data. Two things differ:

- the duplicate check (``tasks.convert.dedupe``) keeps a correction row whose id is
  published (any other row with a published id is ``duplicate_id``) and quarantines one
  whose id is not as ``unknown_id``: every row still ends exactly once;
- publish (``tasks.publish``) masks the rows being replaced: it locates the batch's ids in
  the parent version (``tasks.locate``: the id index, then only the touched batches'
  shards) and adds a deletion vector per touched shard (``core.change.add_masks``); the
  document records ``changes: {kind: correct, updated: N}``. A lost race locates again on
  the new latest version. A correction row whose id a deletion removed (its rows all
  masked) is masked too (counted as ``deleted``): a correction never brings a deleted id
  back (after a compaction the id is out of the id index: such a row is ``unknown_id``).
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.builder import VersionDraft
from shardline.core.change import Masked, add_masks
from shardline.core.config import DatasetConfig
from shardline.core.deletions import ChangeSummary
from shardline.core.manifest import Manifest
from shardline.core.store import Store
from shardline.core.version_doc import BatchList
from shardline.tasks.batch import Batch
from shardline.tasks.locate import locate, read_ids_of

log = logging.getLogger(__name__)


def has_corrections(cfg: DatasetConfig, batch: Batch) -> bool:
    return any(layout.is_correction(cfg.incoming, s.key) for s in batch.sources)


def batch_ids(store: Store, ids_key: str) -> pa.Array:
    """Every id of a batch's id file (``tasks.id_index`` format)."""
    table = ipc.open_file(pa.py_buffer(store.get_bytes(ids_key))).read_all()
    return table.column("id").combine_chunks()


def id_range(ids: pa.Array) -> tuple[str, str] | None:
    """The smallest and largest of ``ids`` (the batch's zone map; None: no id)."""
    if not len(ids):
        return None
    mm = pc.min_max(ids)
    return str(mm["min"].as_py()), str(mm["max"].as_py())


def with_corrections(store: Store, draft: VersionDraft, parent: Manifest | None,
                     ids: pa.Array, run: str) -> VersionDraft:
    """``draft`` (adding a batch holding corrections) with the parent's live rows of the
    batch's ids masked. The batch's other ids are new (the duplicate check refused any
    other published id), so every row found is a row being replaced."""
    if parent is None or not len(ids):
        return draft
    found = locate(store, parent, ids)
    kept_deleted = _own_rows(store, draft, found.already_masked)
    if not found.masked and not kept_deleted:
        return draft
    if kept_deleted:
        log.warning("%d correction row(s) name ids whose rows were deleted (e.g. %r): they "
                    "stay deleted, masked in the new version", sum(len(m.rows) for m in
                                                                  kept_deleted),
                    found.already_masked[0])
    return add_masks(draft, parent, [*found.masked, *kept_deleted], run, ChangeSummary(
        kind="correct", updated=found.rows,
        deleted=sum(len(m.rows) for m in kept_deleted)))


def _own_rows(store: Store, draft: VersionDraft, ids: list[str]) -> list[Masked]:
    """The rows of ``draft``'s own batch whose id is one of ``ids`` (ids a deletion
    removed: a correction does not bring them back)."""
    ref = draft.doc.own_ref
    if not ids or ref is None:
        return []
    want = pa.array(ids, pa.string())
    out = []
    for s in BatchList.from_bytes(draft.objects[ref.key], ref.key).shards:
        col, _ = read_ids_of(store, s)
        pos = np.flatnonzero(pc.is_in(col, value_set=want).to_numpy(zero_copy_only=False))
        if len(pos):
            out.append(Masked(s, pos))
    return out
