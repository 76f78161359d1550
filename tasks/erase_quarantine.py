"""An erasure's quarantined copies (``tasks.erase``): rows of the ids that ingest rejected
(a second upload of a published id as ``duplicate_id``, a row with a bad image, ...) hold
the id and the raw bytes (``core.schema.QUARANTINE_SCHEMA``: ``id``, ``raw``), so they go
too. No index says which quarantine shard holds an id: the quarantine shards of every live
batch with quarantined rows (the references count them) are read, digest-checked. Each one
holding an id is written again without those rows (dropped when none is left); the batch's
``quarantined`` count and the version's total drop by as many. The validation reports name
quarantined rows (examples, messages): after the commit each report naming an id is
rewritten without it (``redact_reports``).
"""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardline.core import layout
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry, content_digests
from shardline.core.replace import Rewrite
from shardline.core.store import Store
from shardline.tasks.compact_rewrite import read_shard
from shardline.tasks.convert.shard_writer import encode_ipc

WORKERS = 8


@dataclasses.dataclass(frozen=True)
class QuarantineHit:
    """Rows of the ids in one quarantine shard of ``batch``."""

    batch: str
    shard: ShardEntry
    rows: np.ndarray
    ids: frozenset[str]
    sources: frozenset[str]


def find_quarantined(store: Store, m: Manifest, ids: pa.Array) -> list[QuarantineHit]:
    """The quarantine shards of version ``m`` holding a row of ``ids``."""
    refs = [r for r in m.batch_lists if r.quarantined]
    todo = [(bl.batch, s) for bl in m.read_lists(refs) for s in bl.quarantine_shards]

    def scan(item: tuple[str, ShardEntry]) -> QuarantineHit:
        batch, s = item
        t = read_shard(store, s)
        pos = np.flatnonzero(pc.fill_null(pc.is_in(t.column("id"), value_set=ids), False)
                             .to_numpy(zero_copy_only=False))
        take = pa.array(pos)
        return QuarantineHit(batch, s, pos, frozenset(t.column("id").take(take).to_pylist()),
                             frozenset(t.column("source_key").take(take).to_pylist()))

    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(todo)))) as pool:
        return [h for h in pool.map(scan, todo) if len(h.rows)]


def rewrite_quarantined(store: Store, prefix: str, hits: list[QuarantineHit], tag: str,
                        compression: str, record_batch_rows: int) -> dict[str, Rewrite]:
    """Batch -> the rewrite of its quarantine shards (written to the store already)."""
    def one(item: tuple[int, QuarantineHit]) -> ShardEntry | None:
        i, h = item
        t = read_shard(store, h.shard)
        keep = np.ones(t.num_rows, bool)
        keep[h.rows] = False
        if not keep.any():
            return None
        buf = encode_ipc(t.filter(pa.array(keep)).combine_chunks(), compression,
                         record_batch_rows)
        key = layout.quarantine_key(prefix, h.batch, i, tag)
        store.put_bytes(key, memoryview(buf), content_type="application/vnd.apache.arrow.file")
        sha, xxh = content_digests(memoryview(buf))
        return dataclasses.replace(h.shard, path=key, rows=int(keep.sum()), bytes=buf.size,
                                   sha256=sha, xxh3_128=xxh)

    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(hits)))) as pool:
        written = list(pool.map(one, enumerate(hits)))
    out: dict[str, Rewrite] = {}
    for h, w in zip(hits, written, strict=True):
        rw = out.get(h.batch, Rewrite(h.batch, [], [], 0))
        out[h.batch] = Rewrite(h.batch, [*rw.replaced, h.shard],
                               [*rw.outputs, *([w] if w is not None else [])],
                               rw.masked_rows + len(h.rows))
    return out


def _redact(node: Any, ids: set[str]) -> Any:
    """``node`` (parsed JSON) without list items that are rows of ``ids`` (a dict whose
    ``id`` is one) and with each id in a string replaced by ``[erased]``."""
    if isinstance(node, dict):
        return {k: _redact(v, ids) for k, v in node.items()}
    if isinstance(node, list):
        return [_redact(v, ids) for v in node
                if not (isinstance(v, dict) and v.get("id") in ids)]
    if isinstance(node, str):
        for i in ids:
            node = node.replace(i, "[erased]")
    return node


def redact_reports(store: Store, prefix: str, ids: list[str]) -> list[str]:
    """Rewrite each validation report of the dataset (``reports/<run>/validation.json``)
    that names one of ``ids`` (its quarantined examples and refused rows; messages) without
    them; the keys rewritten. Reads every report: called only when quarantined copies were
    found (a published row is never in a report)."""
    wanted = set(ids)
    needles = [i.encode() for i in wanted]
    keys = [o.key for o in store.list(f"{prefix}/reports/") if o.key.endswith(".json")]

    def one(key: str) -> str | None:
        data = store.get_bytes(key)
        if not any(n in data for n in needles):
            return None
        store.put_bytes(key, json.dumps(_redact(json.loads(data), wanted)).encode(),
                        content_type="application/json")
        return key

    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(keys)))) as pool:
        return [k for k in pool.map(one, keys) if k is not None]
