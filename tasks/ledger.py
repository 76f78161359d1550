"""The ledger: what has been published, read and written by the stages through this module.

- Claims (``batches/<id>.json``): which sources (key, ETag) entered which version. Written
  by publish after each commit (``If-None-Match``, so a repeat is harmless), read by detect
  to tell new uploads from ingested ones; a batch whose claim write was lost is repaired
  from the latest manifest, which names every published batch.
- Claims checkpoints (``ledger/claims-<n>.arrow``): the claims of ``n`` batches in one
  Arrow file (batch, key, etag). Detect lists the claim documents (one LIST page per 1,000
  batches), reads the newest checkpoint and GETs only the documents it does not cover, in
  parallel; once :data:`CHECKPOINT_AFTER` (10) documents are uncovered it writes the next
  checkpoint (``If-None-Match``: racing writers of the same ``n`` write the same claims).
  So a detect costs O(new batches) GETs, not one GET per batch ever published.
- The id index (``ids/batch=<id>-<run>.arrow``): the ids each published batch holds, in
  hash buckets (``shardline.tasks.id_index``), which convert checks a new batch against for
  duplicates (bucket by bucket, memory flat in the history) and publish re-checks after a
  race.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import ObjectExists
from shardline.core.manifest import BatchEntry, latest_manifest
from shardline.core.store import Store
from shardline.tasks import id_index
from shardline.tasks.batch import Batch

log = logging.getLogger(__name__)


# -- claims -------------------------------------------------------------------------------
# uncovered claim documents that make detect write a checkpoint: Delta Lake's checkpoint
# interval (10 commits), so a detect GETs at most 9 claim documents whatever the history
CHECKPOINT_AFTER = 10
KEEP_CHECKPOINTS = 2       # the newest ones; a reader may still be reading the one before
_CLAIMS_SCHEMA = pa.schema([("batch", pa.string()), ("key", pa.string()),
                            ("etag", pa.string())])


def claimed_sources(store: Store, cfg: DatasetConfig) -> set[tuple[str, str]]:
    """(key, ETag) of every source that entered a published version."""
    return claimed_as_of(store, cfg)[0]


def claimed_as_of(store: Store, cfg: DatasetConfig) -> tuple[set[tuple[str, str]], int]:
    """``claimed_sources`` and the latest version it covers (0: no version): every source
    of that version and of the versions before it is in the set."""
    docs_prefix = layout.batches_prefix(cfg.prefix)
    docs: dict[str, str] = {}                      # batch id -> claim document key
    for o in store.list(docs_prefix):
        name = o.key[len(docs_prefix):]
        if name.endswith(".json") and "/" not in name:
            docs[name[:-len(".json")]] = o.key
    checkpoints = sorted(o.key for o in store.list(layout.claims_checkpoint_prefix(cfg.prefix))
                         if o.key.endswith(".arrow"))
    claims: dict[str, list[tuple[str, str]]] = {}
    if checkpoints:
        claims = _read_checkpoint(store, checkpoints[-1])
    missing = sorted(set(docs) - set(claims))
    with ThreadPoolExecutor(max_workers=16) as pool:
        for doc in pool.map(store.get_json, [docs[b] for b in missing]):
            claims[str(doc["batch"])] = [(s["key"], s["etag"]) for s in doc["sources"]]
    if len(missing) >= CHECKPOINT_AFTER:
        _write_checkpoint(store, cfg, claims, checkpoints)
    claimed = {ks for sources in claims.values() for ks in sources}
    latest = latest_manifest(store, cfg.prefix)
    if latest is not None:   # batches published whose ledger write was lost
        lost = [r for r in latest.batch_lists if r.batch not in claims]
        for r, bl in zip(lost, latest.read_lists(lost), strict=True):
            log.warning("batch %s (v%d) has no ledger entry; reading its batch list",
                        r.batch, r.version)
            claimed.update((s.key, s.etag) for s in bl.sources)
    return claimed, latest.version if latest is not None else 0


def _read_checkpoint(store: Store, key: str) -> dict[str, list[tuple[str, str]]]:
    with ipc.open_file(pa.BufferReader(store.get_bytes(key))) as f:
        t = f.read_all()
    out: dict[str, list[tuple[str, str]]] = {}
    for b, k, e in zip(t.column("batch").to_pylist(), t.column("key").to_pylist(),
                       t.column("etag").to_pylist(), strict=True):
        out.setdefault(b, []).append((k, e))
    return out


def _write_checkpoint(store: Store, cfg: DatasetConfig,
                      claims: dict[str, list[tuple[str, str]]], older: list[str]) -> None:
    rows: dict[str, list[Any]] = {"batch": [], "key": [], "etag": []}
    for b in sorted(claims):
        for k, e in claims[b]:
            rows["batch"].append(b)
            rows["key"].append(k)
            rows["etag"].append(e)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, _CLAIMS_SCHEMA) as w:
        w.write_table(pa.table(rows, schema=_CLAIMS_SCHEMA))
    key = layout.claims_checkpoint_key(cfg.prefix, len(claims))
    with contextlib.suppress(ObjectExists):
        store.put_bytes(key, sink.getvalue().to_pybytes(), if_none_match=True)
        log.info("ledger checkpoint %s: claims of %d batches", key, len(claims))
    store.delete([k for k in older if k < key][:-(KEEP_CHECKPOINTS - 1) or None])


def write_claim(store: Store, cfg: DatasetConfig, batch: Batch, version: int) -> None:
    """Record in the ledger that ``batch`` entered ``version`` (idempotent)."""
    doc = {
        "batch": batch.id, "version": version,
        "sources": [{"key": s.key, "etag": s.etag, "size": s.size, "format": s.format}
                    for s in batch.sources],
    }
    # ObjectExists: a racing publisher (or an earlier attempt) wrote the same record
    with contextlib.suppress(ObjectExists):
        store.put_bytes(layout.batch_claim_key(cfg.prefix, batch.id),
                        json.dumps(doc, indent=1).encode(), if_none_match=True,
                        content_type="application/json")


# -- the id index -------------------------------------------------------------------------
IDS_SCHEMA = id_index.IDS_SCHEMA


def published_in(store: Store, batches: Iterable[BatchEntry], ids: pa.Array
                 ) -> np.ndarray:
    """For each of ``ids``, whether a published batch of ``batches`` holds it. Streams the
    id files bucket by bucket: the driver never holds the published ids."""
    return id_index.published_mask(store, [b.ids_path for b in batches], ids)


def load_published_ids(store: Store, batches: Iterable[BatchEntry]) -> pa.Array:
    """Every id the published ``batches`` hold, in memory: only for a few batches (the ones
    published during a run, see ``tasks.publish``); the duplicate check over the whole
    history uses ``published_in``."""
    parts = []
    for b in batches:
        with ipc.open_file(pa.BufferReader(store.get_bytes(b.ids_path))) as f:
            parts.append(f.read_all().column("id"))
    return pa.chunked_array(parts, pa.string()).combine_chunks() if parts else \
        pa.array([], pa.string())


def write_ids(store: Store, key: str, ids: pa.Array) -> None:
    """Write a batch's id index file: uncompressed Arrow IPC, one ``id`` column, record
    batch ``k`` holding the ids of hash bucket ``k``."""
    store.put_bytes(key, id_index.encode_ids(ids))
