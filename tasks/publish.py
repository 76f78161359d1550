"""Publish: staged shards -> immutable keys -> a version, committed with If-None-Match: *.

Order is what makes it safe:
1. copy staged shards (server-side) to final keys that carry this run's id, so two
   publishers of the same batch never write the same key;
2. write the batch's id index (the ids later batches are checked against);
3. build the version (``shardline.core.builder``: the batch's shard list, a checkpoint when
   one is due), write the objects it references, check that every object this batch adds
   exists with its size (a HEAD each: a sweep on a host with a bad clock, or a person, may
   have removed one; older batches' objects were checked by their own commits and the
   sweep keeps what the latest version names), and commit ``versions/v<N+1>.json`` with
   ``If-None-Match: *``. The version exists from that moment, and only then. A missing
   object raises :class:`PublishIncomplete` with nothing committed; the driver converts the
   batch again, as after a lost race.
On a lost race (HTTP 412) the publisher re-reads the latest version: if its batch is in it,
someone published the same uploads and this run returns that version (deleting its own
copies); otherwise it rebases onto the new latest and tries the next number. Finally the
claim ledger is written and the staging folder removed.

A batch with corrections (``tasks.corrections``) also masks the parent's rows of its ids
(deletion vectors, located again on every attempt's parent).
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from shardline.core import layout
from shardline.core.builder import NewBatch, VersionDraft, build_version, commit_version
from shardline.core.config import DatasetConfig, config_to_dict
from shardline.core.errors import (
    ObjectExists,
    PublishConflict,
    PublishIncomplete,
    ShardlineError,
    StoreError,
)
from shardline.core.manifest import Manifest, latest_manifest, read_manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary
from shardline.core.schema import schema_info
from shardline.core.store import Store
from shardline.tasks.convert.shard_writer import WrittenShard
from shardline.tasks.convert.stage import Converted
from shardline.tasks.corrections import batch_ids, has_corrections, id_range, with_corrections
from shardline.tasks.ledger import load_published_ids, write_claim
from shardline.tasks.validate import ValidationReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Published:
    version: int
    manifest: str                  # s3:// URI
    created: bool                  # False: the batch was already published (by us or a racer)
    new_shards: list[ShardEntry]
    quarantine_shards: list[ShardEntry]
    rows_published: int
    rows_quarantined: int
    bytes: int
    rows_updated: int = 0          # published rows that replaced (corrected) older ones


def _entries(store: Store, cfg: DatasetConfig, conv: Converted
             ) -> tuple[list[tuple[str, ShardEntry]], list[tuple[str, ShardEntry]]]:
    """(staged key, final entry) pairs for data and quarantine shards."""
    bid, run = conv.batch.id, conv.run_id
    data: list[tuple[str, ShardEntry]] = []
    parts: dict[tuple[str | None, int | None], int] = {}
    for s in conv.data_shards:
        n = parts[s.split, s.label] = parts.get((s.split, s.label), -1) + 1
        part = {"batch": bid} | ({"label": str(s.label)} if s.label is not None else {})
        key = layout.shard_key(cfg.prefix, bid, s.label, n, run, s.split)
        data.append((s.path, _entry(key, s, bid, part, cfg.shards.compression)))
    quarantine = [
        (s.path, _entry(layout.quarantine_key(cfg.prefix, bid, i, run), s, bid, {"batch": bid},
                        cfg.shards.compression))
        for i, s in enumerate(conv.quarantine_shards)
    ]
    return data, quarantine


def _entry(path: str, s: WrittenShard, bid: str, part: dict[str, str], comp: str) -> ShardEntry:
    stats = {} if s.label_min is None else {"label": {"min": s.label_min, "max": s.label_max}}
    return ShardEntry(path=path, rows=s.rows, bytes=s.bytes, sha256=s.sha256, batch=bid,
                      partition=part, stats=stats, compression=comp, xxh3_128=s.xxh3_128,
                      label_counts=dict(s.label_counts), split=s.split)


def _copy_all(store: Store, pairs: list[tuple[str, str]]) -> None:
    def copy(pair: tuple[str, str]) -> None:
        try:
            store.copy(*pair)
        except StoreError as exc:
            if store.head(pair[0]) is None:
                raise PublishIncomplete(
                    f"{store.uri(pair[0])} was removed before publish copied it (a sweep or "
                    "a person); nothing was committed, the batch is converted again") from exc
            raise
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(copy, pairs))


def _check_named(store: Store, draft: VersionDraft, sized: dict[str, int | None]) -> None:
    """Every object this batch adds exists with its size, just before the commit."""
    want: dict[str, int | None] = {**sized, **{k: len(b) for k, b in draft.objects.items()}}

    def problem(item: tuple[str, int | None]) -> str | None:
        key, size = item
        info = store.head(key)
        if info is None:
            return f"{store.uri(key)} is missing"
        if size is not None and info.size != size:
            return f"{store.uri(key)} has {info.size} bytes, not {size}"
        return None
    with ThreadPoolExecutor(max_workers=8) as pool:
        bad = [p for p in pool.map(problem, want.items()) if p]
    if bad:
        raise PublishIncomplete(
            f"version {draft.doc.version}: {len(bad)} object(s) it names changed before the "
            f"commit (e.g. {bad[0]}; removed by a sweep or a person); nothing was committed, "
            "the batch is converted again")


def _check_rebase(store: Store, cfg: DatasetConfig, conv: Converted,
                  latest: Manifest | None) -> None:
    """Ids were de-duplicated against ``conv.base_version``; batches published since then
    must share neither ids nor sources with this one (a source whose rows were all
    quarantined has no id to collide on, but counting it twice breaks exactly-once)."""
    base = conv.base_version or 0      # ids were checked against the versions up to this
    seen = conv.batch.seen_version     # sources were counted as claimed up to this
    # detect runs before convert reads the latest version: a source published in between
    # had its rows quarantined as duplicate_id here, so sources are checked from detect on
    src_from = base if seen is None else min(seen, base)
    if latest is None or latest.version <= src_from:
        return
    newer = [b for b in latest.batches if b.version > base]
    mine = {(s.key, s.etag) for s in conv.batch.sources}
    # the batches' own lists, from the latest (the versions that added them may be expired)
    refs = [r for r in latest.batch_lists if r.version > src_from]
    for r, bl in zip(refs, latest.read_lists(refs), strict=True):
        theirs = {(s.key, s.etag) for s in bl.sources}
        shared = sorted(k for k, _ in mine & theirs)
        if shared:
            raise PublishConflict(
                f"batch {conv.batch.id}: {len(shared)} source(s) (e.g. {shared[0]}) were "
                f"published concurrently by version {r.version} after this run detected them; "
                "nothing was published. Re-run ingest: detect leaves them out now.")
    if not newer:
        return
    since = load_published_ids(store, newer)
    n = sum(pc.sum(pc.is_in(ids, value_set=since)).as_py() or 0     # one bucket at a time
            for ids in conv.iter_published_ids(store))
    if n:
        raise PublishConflict(
            f"batch {conv.batch.id}: {n} id(s) were published concurrently by version(s) "
            f"{[b.version for b in newer]} after this run checked for duplicates; nothing was "
            "published. Re-run ingest: the repeated ids will be quarantined as duplicate_id."
        )


def _new_batch(cfg: DatasetConfig, conv: Converted, data: list[ShardEntry],
               quarantine: list[ShardEntry], ids_path: str,
               ids: tuple[str, str] | None) -> NewBatch:
    return NewBatch(id=conv.batch.id, run=conv.run_id, shards=data, ids_path=ids_path,
                    quarantine_shards=quarantine, by_rule=conv.by_rule,
                    sources=[SourceEntry(s.key, s.etag, s.size, s.format)
                             for s in conv.batch.sources], stats=conv.stats(), id_range=ids)


def _draft(store: Store, cfg: DatasetConfig, latest: Manifest | None, batch: NewBatch,
           validation: ValidationSummary, fixes: pa.Array | None) -> VersionDraft:
    """The version after ``latest`` adding ``batch``; with ``fixes`` (the batch's ids, when
    it holds corrections) the parent's rows of those ids masked."""
    draft = build_version(cfg.prefix, dataset=cfg.name, schema=schema_info(cfg),
                          config=config_to_dict(cfg), parent=latest, batch=batch,
                          validation=validation, holdout_fraction=_fraction(cfg, batch))
    return draft if fixes is None else with_corrections(store, draft, latest, fixes,
                                                        batch.run)


def _fraction(cfg: DatasetConfig, batch: NewBatch) -> float | None:
    """The held-out fraction the batch's shards were split with (None: unsplit shards)."""
    return cfg.holdout_fraction if any(s.split for s in batch.shards) else None


def publish(store: Store, cfg: DatasetConfig, conv: Converted,
            report: ValidationReport, max_attempts: int = 50) -> Published:
    """Make ``conv`` a new version (or find the version that already holds its batch)."""
    if not report.success:
        raise ShardlineError(f"batch {conv.batch.id} did not pass validation; not publishing")
    data, quarantine = _entries(store, cfg, conv)
    ids_path = layout.ids_key(cfg.prefix, conv.batch.id, conv.run_id)
    ids = batch_ids(store, conv.ids_key)          # O(new): the batch's own id file
    batch = _new_batch(cfg, conv, [e for _, e in data], [e for _, e in quarantine], ids_path,
                       id_range(ids))
    validation = ValidationSummary.from_dict(report.summary(), f"batch {conv.batch.id}")
    copied: list[str] = []
    fixes = ids if has_corrections(cfg, conv.batch) else None
    for attempt in range(max_attempts):
        latest = latest_manifest(store, cfg.prefix)
        done = latest.batch(conv.batch.id) if latest else None
        if done is not None:
            # Our own commit whose reply was lost (a 5xx after the write, then 412 on the
            # retry): its objects are the version's, never delete them (issue 11 chaos).
            own = done.ids_path == ids_path
            log.info("batch %s is already published in version %d%s", conv.batch.id,
                     done.version, " (by this run)" if own else "; publishing nothing")
            if not own:
                store.delete(copied)
            write_claim(store, cfg, conv.batch, done.version)
            _drop_staging(store, cfg, conv.run_id)
            m = read_manifest(store, cfg.prefix, done.version)
            return _result(store, cfg, m, created=own)
        _check_rebase(store, cfg, conv, latest)
        if not copied:
            _copy_all(store, [(src, e.path) for src, e in data + quarantine])
            store.copy(conv.ids_key, ids_path)   # the id file the duplicate check staged
            copied = [e.path for _, e in data + quarantine] + [ids_path]
        sized: dict[str, int | None] = {e.path: e.bytes for _, e in data + quarantine}
        sized[ids_path] = None
        draft = _draft(store, cfg, latest, batch, validation, fixes)
        copied += draft.run_objects
        try:
            m = commit_version(store, draft, check=functools.partial(
                _check_named, store, draft, sized))
        except ObjectExists:
            log.info("version %d was taken by a concurrent publisher (attempt %d); retrying",
                     draft.doc.version, attempt + 1)
            if draft.new_checkpoint:      # no document references it (the batch list is
                store.delete([draft.new_checkpoint])   # reused by the next attempt)
            continue
        log.info("published %s version %d: %d new rows in %d shards (%d rows total)",
                 cfg.name, m.version, m.new_rows, len(m.new_shards), m.rows)
        write_claim(store, cfg, conv.batch, m.version)
        _drop_staging(store, cfg, conv.run_id)
        return _result(store, cfg, m, created=True)
    raise PublishConflict(f"batch {conv.batch.id}: gave up after {max_attempts} lost races "
                          "for a version number; re-run ingest")


def _result(store: Store, cfg: DatasetConfig, m: Manifest, created: bool) -> Published:
    new = m.new()
    return Published(version=m.version,
                     manifest=store.uri(layout.version_key(cfg.prefix, m.version)),
                     created=created, new_shards=new, quarantine_shards=m.new_quarantine(),
                     rows_published=sum(s.rows for s in new),
                     rows_quarantined=m.quarantine.rows, bytes=sum(s.bytes for s in new),
                     rows_updated=m.doc.changes.updated if m.doc.changes else 0)


def _drop_staging(store: Store, cfg: DatasetConfig, run_id: str) -> None:
    stage = layout.staging_prefix(cfg.prefix, run_id)
    store.delete(o.key for o in store.list(stage))
