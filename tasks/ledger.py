"""The ledger: what has been published, read and written by the stages through this module.

- Claims (``batches/<id>.json``): which sources (key, ETag) entered which version. Written
  by publish after each commit (``If-None-Match``, so a repeat is harmless), read by detect
  to tell new uploads from ingested ones; a batch whose claim write was lost is repaired
  from the latest manifest, which names every published batch.
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

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import ObjectExists
from shardline.core.manifest import BatchEntry, latest_manifest, read_manifest
from shardline.core.store import ObjectStore
from shardline.tasks import id_index
from shardline.tasks.batch import Batch

log = logging.getLogger(__name__)


# -- claims -------------------------------------------------------------------------------
def claimed_sources(store: ObjectStore, cfg: DatasetConfig) -> set[tuple[str, str]]:
    """(key, ETag) of every source that entered a published version."""
    claimed: set[tuple[str, str]] = set()
    ledger_ids: set[str] = set()
    for o in store.list(layout.batches_prefix(cfg.prefix)):
        if not o.key.endswith(".json"):
            continue
        doc = store.get_json(o.key)
        ledger_ids.add(doc["batch"])
        claimed.update((s["key"], s["etag"]) for s in doc["sources"])
    latest = latest_manifest(store, cfg.prefix)
    if latest is not None:
        for b in latest.batches:
            if b.id not in ledger_ids:   # published, but its ledger write was lost
                log.warning("batch %s (v%d) has no ledger entry; reading its manifest",
                            b.id, b.version)
                m = read_manifest(store, cfg.prefix, b.version)
                claimed.update((s.key, s.etag) for s in m.sources)
    return claimed


def write_claim(store: ObjectStore, cfg: DatasetConfig, batch: Batch, version: int) -> None:
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


def published_in(store: ObjectStore, batches: Iterable[BatchEntry], ids: pa.Array
                 ) -> np.ndarray:
    """For each of ``ids``, whether a published batch of ``batches`` holds it. Streams the
    id files bucket by bucket: the driver never holds the published ids."""
    return id_index.published_mask(store, [b.ids_path for b in batches], ids)


def load_published_ids(store: ObjectStore, batches: Iterable[BatchEntry]) -> pa.Array:
    """Every id the published ``batches`` hold, in memory: only for a few batches (the ones
    published during a run, see ``tasks.publish``); the duplicate check over the whole
    history uses ``published_in``."""
    parts = []
    for b in batches:
        with ipc.open_file(pa.BufferReader(store.get_bytes(b.ids_path))) as f:
            parts.append(f.read_all().column("id"))
    return pa.chunked_array(parts, pa.string()).combine_chunks() if parts else \
        pa.array([], pa.string())


def write_ids(store: ObjectStore, key: str, ids: pa.Array) -> None:
    """Write a batch's id index file: uncompressed Arrow IPC, one ``id`` column, record
    batch ``k`` holding the ids of hash bucket ``k``."""
    store.put_bytes(key, id_index.encode_ids(ids))
