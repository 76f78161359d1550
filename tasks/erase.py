"""Erase rows by id (``shardline delete``, the default): a new version whose files no
longer hold them, so that expire + vacuum leave no object in the bucket with their bytes.

    find (tasks.erase_find: id files -> touched batches -> rows of the ids in their shards)
    -> rewrite each touched shard without those rows (tasks.compact_rewrite, copy-on-write)
       and each touched batch's id file without those ids; the same for the quarantine
       shards holding rejected copies of them (tasks.erase_quarantine)
    -> build the version (core.replace.build_compaction: the touched batch lists replaced)
    -> commit_version (If-None-Match on the next version key, as every publish)
    -> remove the raw uploads the rows came from, once the ledger says they were consumed,
       and the ids from the validation reports that name quarantined copies

The cost is the touched batches' id files and shards, not the dataset. Rows a deletion
vector masked already in a rewritten shard are dropped too (their vectors go); other
shards keep their vectors. The version records what it did in counts only
(``VersionDoc.changes``: rows deleted; ``validation.counts``: shards, id files, uploads):
no object keeps the erased ids, not even hashed (a hash of a guessable id is the id).

Ids that neither a live batch's id file nor a quarantine shard holds are refused before
anything is written (never ingested, or erased already: no file knows them any more).
On a lost race the erasure finds its ids again on the new latest version and retries.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from shardline.core import layout
from shardline.core.builder import VersionDraft, commit_or_lost
from shardline.core.config import DatasetConfig
from shardline.core.deletions import ChangeSummary, encode_index, index_ref
from shardline.core.errors import PublishConflict
from shardline.core.manifest import Manifest
from shardline.core.parts import ValidationSummary
from shardline.core.replace import ERASURE, Rewrite, build_compaction
from shardline.core.store import Store
from shardline.tasks.delete import DeleteRefused, latest_to_change
from shardline.tasks.erase_find import Found, find, rewrite
from shardline.tasks.erase_quarantine import redact_reports, rewrite_quarantined
from shardline.tasks.ledger import claimed_sources

log = logging.getLogger(__name__)

SUITE = ERASURE


@dataclass(frozen=True)
class EraseResult:
    dataset: str
    version: int | None             # the erasure version (None: nothing committed)
    parent: int
    created: bool
    rows_deleted: int
    shards_touched: int
    id_files_rewritten: int = 0
    quarantined_erased: int = 0      # rejected rows of the ids (their quarantine copies)
    uploads_removed: list[str] = field(default_factory=list)
    uploads_kept: list[str] = field(default_factory=list)    # changed since: not ingested
    attempts: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        kept = (f"; {len(self.uploads_kept)} upload(s) kept: replaced since and not "
                "ingested yet" if self.uploads_kept else "")
        return (f"{self.dataset} v{self.version}: {self.rows_deleted} row(s) erased; "
                f"{self.shards_touched} shard(s) and {self.id_files_rewritten} id file(s) "
                f"rewritten without them, {self.quarantined_erased} quarantined row(s) "
                f"erased, {len(self.uploads_removed)} raw upload(s) removed"
                f"{kept}. v{self.parent} and older still hold them until `shardline expire` "
                "and `shardline vacuum`")


def _refuse_unknown(cfg: DatasetConfig, version: int, unknown: list[str]) -> None:
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        raise DeleteRefused(
            f"dataset {cfg.name} v{version}: id {unknown[0]!r}{more} is in no live batch, "
            "published or quarantined (never ingested, or erased already); nothing was "
            "deleted. Remove it from the ids file and run the deletion again")


def build_erasure(store: Store, cfg: DatasetConfig, parent: Manifest, found: Found,
                  ids: pa.Array, run: str) -> tuple[VersionDraft, list[str]]:
    """The version after ``parent`` with the touched shards and id files rewritten, and
    the shards written for it (in the store already: to delete if the commit loses)."""
    prefix = cfg.prefix
    rewrites, id_files = rewrite(store, prefix, parent, found, ids, run,
                                 cfg.shards.compression, cfg.shards.record_batch_rows)
    tag = f"{run}-v{parent.version:06d}"
    for batch, q in rewrite_quarantined(store, prefix, found.quarantined, tag,
                                        cfg.shards.compression,
                                        cfg.shards.record_batch_rows).items():
        rw = rewrites.get(batch, Rewrite(batch, [], []))
        rewrites[batch] = dataclasses.replace(rw, quarantine=q)
    written = [s.path for rw in rewrites.values()
               for s in [*rw.outputs, *(rw.quarantine.outputs if rw.quarantine else [])]]
    gone = {s.path for rw in rewrites.values() for s in rw.replaced}
    left = [r for r in parent.deletion_refs if r.shard not in gone]
    counts = {"rows_deleted": found.rows, "shards_touched": len(gone),
              "id_files_rewritten": len(id_files),
              "quarantined_rows_erased": found.quarantined_rows, "new_rows": 0}
    validation = ValidationSummary(success=True, suites=[SUITE], evaluated=found.rows,
                                   counts=counts)
    draft = build_compaction(prefix, parent, rewrites, run, rows_rewritten=found.rows,
                             id_files=id_files, validation=validation,
                             masked_left=sum(r.rows for r in left), erased=found.rows)
    objects = dict(draft.objects)
    doc = dataclasses.replace(draft.doc, changes=ChangeSummary(kind="delete",
                                                               deleted=found.rows))
    if left:
        ikey = layout.deletions_index_key(prefix, doc.version, run)
        objects[ikey] = encode_index(doc.dataset, doc.version, left)
        doc = dataclasses.replace(doc, deletions=index_ref(ikey, objects[ikey], left))
    return dataclasses.replace(draft, doc=doc, objects=objects), written


def erase_ids(store: Store, cfg: DatasetConfig, ids: list[str], *, run_id: str | None = None,
              max_attempts: int = 50) -> EraseResult:
    """Publish the version after the latest whose files hold no row of ``ids``; then
    remove the consumed raw uploads that held them.

    Raises:
        DeleteRefused: an id is in no live batch's id file (the message names it).
        StoreError: the dataset has no version, or a touched shard is damaged.
        PublishConflict: ``max_attempts`` lost races in a row.
    """
    run = run_id or f"erase{uuid.uuid4().hex[:8]}"
    wanted = pa.array(list(dict.fromkeys(ids)), pa.string())
    for attempt in range(1, max_attempts + 1):
        latest = latest_to_change(store, cfg)
        found = find(store, latest, wanted)
        _refuse_unknown(cfg, latest.version, found.unknown)
        draft, written = build_erasure(store, cfg, latest, found, wanted, run)
        m = commit_or_lost(store, draft, [*draft.objects, *written])   # this attempt's
        if m is None:
            log.info("version %d was taken by a concurrent publisher (attempt %d); "
                     "finding the ids again", draft.doc.version, attempt)
            continue
        removed, kept = remove_uploads(store, cfg, found.sources)
        if found.quarantined:
            redact_reports(store, cfg.prefix, wanted.to_pylist())
        log.info("erased %d row(s) of %s: version %d (%s); %d raw upload(s) removed",
                 found.rows, cfg.name, m.version,
                 store.uri(layout.version_key(cfg.prefix, m.version)), len(removed))
        return EraseResult(cfg.name, m.version, latest.version, True, found.rows,
                           found.shards, len(found.batches), found.quarantined_rows,
                           removed, kept, attempt)
    raise PublishConflict(f"deletion in {cfg.name}: gave up after {max_attempts} lost races "
                          "for a version number; run it again")


def remove_uploads(store: Store, cfg: DatasetConfig, keys: set[str]) -> tuple[list[str],
                                                                               list[str]]:
    """Remove each upload in ``keys`` whose current object the ledger lists as consumed
    (its key and ETag claimed by a published version: every row of it was published or
    quarantined). One replaced since (another ETag: not ingested yet) or gone is left.
    (removed, kept) keys."""
    present = [i for i in (store.head(k) for k in sorted(keys)) if i is not None]
    if not present:
        return [], []                     # the ledger is read only when there is a choice
    claimed = claimed_sources(store, cfg)
    removed: list[str] = []
    kept: list[str] = []
    for info in present:
        (removed if (info.key, info.etag) in claimed else kept).append(info.key)
    store.delete(removed)
    return removed, kept
