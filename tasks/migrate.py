"""Migrate: rewrite a dataset written in manifest format 1 or 2 as format 3, once; the one
reader of those formats (every other reader refuses them: ``core.version_doc``).

- Format 1: one cumulative JSON document per version (every shard and batch, the schema,
  config and quarantine shards inline; the version's own sources inline).
- Format 2: the format-3 document and checkpoint shapes with JSON batch lists
  (``manifests/batch=<id>-<run>.json``); format-3 documents written during the move from 2
  to 3 may still name format-2 checkpoints and JSON lists.

The latest version N becomes version N+1 (``core.replace.replacement``, committed with
If-None-Match like every version): an Arrow batch list for every batch not in one, a format-3
checkpoint of all. No row, shard, id file or source changes, and every batch keeps the
version that first published it, so a trainer finds nothing new. Versions up to N stay as
they are (history is immutable). A second run finds format 3 and writes nothing. Objects go
under keys no version names yet, with If-None-Match, and the run id derives from N
(``migrate-v<N>``): a run killed at any write re-runs to the same keys, bytes and version.
Ingest cannot race it (it refuses an old-format latest version); two migrations commit the
same content and the loser finds format 3.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shardline.core import layout
from shardline.core.builder import add_object, batch_list_ref, commit_version
from shardline.core.config import DatasetConfig
from shardline.core.errors import ObjectExists, PublishConflict, StoreError
from shardline.core.latest import advance_hint, latest_version, read_hint
from shardline.core.parts import (
    BatchEntry,
    BatchListRef,
    QuarantineSummary,
    SchemaInfo,
    ShardEntry,
    SourceEntry,
    Totals,
    ValidationSummary,
    from_dict,
    to_dict,
)
from shardline.core.replace import replacement
from shardline.core.store import Store
from shardline.core.version_doc import (
    FORMAT,
    BatchList,
    Checkpoint,
    UnsupportedFormat,
    VersionDoc,
    decode,
)

log = logging.getLogger(__name__)
READABLE_FORMATS = (1, 2, FORMAT)      # here, and only here
SUITE = "migration"


@dataclass(frozen=True)
class MigrateResult:
    dataset: str
    parent: int                 # the latest version before the run
    found: int                  # its format (the oldest among it and what it names)
    version: int | None         # the migration version (None: nothing to migrate)
    batches: int
    rewritten: int              # batch lists written anew as Arrow
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def migrate(store: Store, cfg: DatasetConfig, *, max_attempts: int = 5) -> MigrateResult:
    """Rewrite the latest version of ``cfg``'s dataset as format 3 (see the module docstring).

    Raises:
        StoreError: no version, an unknown format, or a damaged object (nothing committed).
        PublishConflict: ``max_attempts`` lost races in a row.
    """
    t0 = time.perf_counter()
    for _ in range(max_attempts):
        n = latest_version(store, cfg.prefix)
        if n is None:
            raise StoreError(f"no dataset versions under s3://{store.bucket}/{cfg.prefix}/"
                             "versions/; nothing to migrate")
        objects: dict[str, bytes] = {}
        doc, found, refs, rewritten = _load(store, cfg.prefix, n, f"migrate-v{n}", objects)
        if found == FORMAT:
            if read_hint(store, cfg.prefix) != n:     # a run killed after its commit
                advance_hint(store, cfg.prefix, n)
            log.info("%s v%d is format %d: nothing to migrate", cfg.name, n, FORMAT)
            return MigrateResult(cfg.name, n, FORMAT, None, len(refs), 0,
                                 time.perf_counter() - t0)
        validation = ValidationSummary(success=True, suites=[SUITE], counts={
            "from_format": found, "batches": len(refs), "batch_lists_rewritten": rewritten,
            "new_rows": 0})
        draft = replacement(cfg.prefix, doc, refs, objects, f"migrate-v{n}", validation)
        try:
            commit_version(store, draft)
        except ObjectExists:
            continue            # another migration committed N+1: read it again
        log.info("migrated %s v%d (format %d) to format %d as version %d (%d batch lists "
                 "rewritten)", cfg.name, n, found, FORMAT, n + 1, rewritten)
        return MigrateResult(cfg.name, n, found, n + 1, len(refs), rewritten,
                             time.perf_counter() - t0)
    raise PublishConflict(f"migration of {cfg.name}: gave up after {max_attempts} lost races "
                          f"for a version number; run it again")


def _load(store: Store, prefix: str, version: int, run: str, objects: dict[str, bytes]
          ) -> tuple[VersionDoc, int, list[BatchListRef], int]:
    """Version ``version`` in any readable format, as (its document as format 3, the oldest
    format found, an Arrow batch-list reference per live batch, how many were written anew
    into ``objects``)."""
    key = layout.version_key(prefix, version)
    raw = decode(store.get_bytes(key), key)
    if raw.get("format") not in READABLE_FORMATS:
        raise UnsupportedFormat(key, raw.get("format"), "version document")
    if raw["format"] == 1:
        return _format1(store, prefix, raw, key, run, objects)
    doc = VersionDoc.from_dict({**raw, "format": FORMAT}, key)
    found, refs = int(raw["format"]), list(doc.batch_lists)
    if doc.checkpoint is not None:
        ck = doc.checkpoint
        d = _checked(decode(store.get_bytes(ck.key), ck.key, ck.sha256), ck.key, "checkpoint")
        found = min(found, int(d["format"]))
        refs = Checkpoint.from_dict({**d, "format": FORMAT}, ck.key).batch_lists + refs
    old = [r for r in refs if not r.key.endswith(".arrow")]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(old)))) as pool:
        lists = dict(zip([r.key for r in old], pool.map(
            lambda r: _json_list(decode(store.get_bytes(r.key), r.key, r.sha256), r.key, run),
            old), strict=True))
    refs = [r if r.key not in lists else dataclasses.replace(
        batch_list_ref(prefix, objects, r.version, lists[r.key]), sources=r.sources)
        for r in refs]
    return doc, min(found, 2) if old else found, refs, len(old)


def _checked(d: dict[str, Any], key: str, kind: str) -> dict[str, Any]:
    if d.get("format") not in (2, FORMAT) or d.get("kind") != kind:
        raise UnsupportedFormat(key, d.get("format"), kind.replace("_", " "))
    return d


def _json_list(d: dict[str, Any], key: str, run: str) -> BatchList:
    """A format-2 (JSON) batch list, as a format-3 one written by ``run``."""
    def entries(name: str) -> list[ShardEntry]:
        return [ShardEntry.from_dict(s, key) for s in d.get(name, [])]
    return from_dict(BatchList, {
        **_checked(d, key, "batch_list"), "format": FORMAT, "run": run,
        "shards": entries("shards"), "quarantine_shards": entries("quarantine_shards"),
        "sources": [SourceEntry.from_dict(s, key) for s in d.get("sources", [])]}, key)


def _format1(store: Store, prefix: str, raw: dict[str, Any], key: str, run: str,
             objects: dict[str, bytes]) -> tuple[VersionDoc, int, list[BatchListRef], int]:
    """A cumulative format-1 document: a batch list per batch, schema and config objects."""
    schema = SchemaInfo.from_dict(raw.get("schema"), key)
    shards = [ShardEntry.from_dict(s, key) for s in raw.get("shards", [])]
    batches = [BatchEntry.from_dict(b, key) for b in raw.get("batches", [])]
    q = raw.get("quarantine", {})
    qshards = [ShardEntry.from_dict(s, key) for s in q.get("shards", [])]

    def sources(b: BatchEntry) -> list[SourceEntry]:   # in the document that added it
        k = layout.version_key(prefix, b.version)
        d = raw if k == key else decode(store.get_bytes(k), k)
        return [SourceEntry.from_dict(s, k) for s in d.get("sources", [])
                ] if d.get("format") == 1 else []
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(batches)))) as pool:
        found = list(pool.map(sources, batches))
    refs = [dataclasses.replace(batch_list_ref(prefix, objects, b.version, BatchList(
        dataset=raw["dataset"], batch=b.id, run=run, rows=b.rows, quarantined=b.quarantined,
        ids_path=b.ids_path, shards=[s for s in shards if s.batch == b.id],
        quarantine_shards=[s for s in qshards if s.batch == b.id], sources=src)),
        sources=b.sources) for b, src in zip(batches, found, strict=True)]
    doc = VersionDoc(
        dataset=raw["dataset"], version=int(raw["version"]), parent=raw.get("parent"),
        created_at=raw.get("created_at", ""), code_version=raw.get("code_version", ""),
        batch=None, fingerprint=schema.fingerprint,
        schema=add_object(objects, lambda d: layout.schema_key(prefix, d), to_dict(schema)),
        config=add_object(objects, lambda d: layout.config_key(prefix, d), raw.get("config", {})),
        checkpoint=None, batch_lists=[],
        validation=ValidationSummary.from_dict(raw.get("validation", {}), key),
        quarantine=QuarantineSummary(),   # the parent's own counts: not carried over
        totals=Totals(rows=sum(s.rows for s in shards), shards=len(shards),
                      bytes=sum(s.bytes for s in shards), batches=len(batches),
                      quarantined=sum(b.quarantined for b in batches)))
    return doc, 1, refs, len(refs)
