"""Duplicate ids: within the batch and against every published version.

Ids are only comparable once all rows are known, so this runs in the driver over the
metadata Spark returned (ids and row positions, no pixels). Against the published versions it
uses ``ledger.published_in``: the published id index is streamed one hash bucket of one
batch at a time, so the driver holds the new batch's ids, never the history's. The first
occurrence in (source key, row) order wins; later ones are quarantined as ``duplicate_id``,
as is any id already published. Only the staged shards that hold a duplicate are rewritten;
in the common case (no duplicates) nothing is read back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.idhash import id_hash64
from shardline.core.store import ObjectStore
from shardline.tasks.convert.shard_writer import WrittenShard, put_shard, quarantine_table

log = logging.getLogger(__name__)

_HASH_ROWS = 1 << 16


@dataclass(frozen=True)
class Duplicate:
    meta_index: int       # index into the ok-rows table
    message: str


def find_duplicates(ok: pa.Table, published: pa.Array | np.ndarray) -> list[Duplicate]:
    """``ok`` has columns id, source_key, source_row (rows that passed the row checks);
    ``published`` is, for each row of ``ok``, whether its id is published (a boolean array,
    from ``ledger.published_in``), or the published ids themselves (small histories).

    Vectorised: the rows are ordered and the repeated ids found with Arrow and numpy (a
    64-bit hash of each id narrows the candidates, equal strings decide), so the driver's
    Python work and memory follow the duplicates, not the batch (10M clean rows: no Python
    object per row)."""
    n = ok.num_rows
    if n == 0:
        return []
    if isinstance(published, np.ndarray):
        if len(published) != n:
            raise ValueError(f"published mask has {len(published)} entries for {n} rows")
        in_published = published.astype(bool, copy=False)
    elif len(published):
        in_published = pc.is_in(ok.column("id"), value_set=published).to_numpy(
            zero_copy_only=False).astype(bool)
    else:
        in_published = np.zeros(n, bool)
    order = pc.sort_indices(ok, sort_keys=[("source_key", "ascending"),
                                           ("source_row", "ascending")]).to_numpy()
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)                     # position of each row in (key, row) order
    ids_col = ok.column("id")
    hashes = np.concatenate([id_hash64(ids_col.slice(i, _HASH_ROWS))     # bounded scratch
                             for i in range(0, n, _HASH_ROWS)])
    _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero((counts[inverse] > 1) | in_published)
    if candidates.size == 0:
        return []
    candidates = candidates[np.argsort(rank[candidates], kind="stable")]
    pick = pa.array(candidates)
    ids = ok.column("id").take(pick).to_pylist()
    keys = ok.column("source_key").take(pick).to_pylist()
    rows = ok.column("source_row").take(pick).to_pylist()
    first: dict[str, int] = {}
    out = []
    for c, (i, rid) in enumerate(zip(candidates.tolist(), ids, strict=True)):
        if in_published[i]:
            out.append(Duplicate(i, f"{keys[c]} row {rows[c]}: id {rid!r} is already in a "
                                    "published version; give the row a new id to add it"))
        elif rid in first:
            j = first[rid]
            out.append(Duplicate(i, f"{keys[c]} row {rows[c]}: id {rid!r} already appears at "
                                    f"{keys[j]} row {rows[j]} in this batch (that row was kept)"))
        else:
            first[rid] = c
    return out


def remove_duplicates(store: ObjectStore, cfg: DatasetConfig, run_id: str, ok: pa.Table,
                      dups: list[Duplicate], shards: list[WrittenShard]
                      ) -> tuple[list[WrittenShard], WrittenShard]:
    """Rewrite the staged data shards that hold duplicates (without them) and write one
    quarantine shard of the duplicates. Returns (new data shard list, quarantine shard)."""
    drop: dict[str, set[int]] = {}
    qrows = []
    for d in dups:
        shard = ok.column("shard")[d.meta_index].as_py()
        drop.setdefault(shard, set()).add(ok.column("shard_row")[d.meta_index].as_py())
        label = ok.column("label")[d.meta_index].as_py()
        qrows.append(dict(source_key=ok.column("source_key")[d.meta_index].as_py(),
                          source_row=ok.column("source_row")[d.meta_index].as_py(),
                          id=ok.column("id")[d.meta_index].as_py(),
                          label=cfg.classes[label] if label is not None else None,
                          rule="duplicate_id", message=d.message))
    out = []
    for s in shards:
        if s.path not in drop:
            out.append(s)
            continue
        with ipc.open_file(pa.BufferReader(store.get_bytes(s.path))) as f:
            table = f.read_all()
        keep = pc.invert(pc.is_in(pa.array(range(table.num_rows), pa.int64()),
                                  value_set=pa.array(sorted(drop[s.path]), pa.int64())))
        kept = table.filter(keep)
        if kept.num_rows:
            out.append(put_shard(store, layout.staged_rewrite_key(s.path), kept,
                                 kind="data", compression=cfg.shards.compression,
                                 record_batch_rows=cfg.shards.record_batch_rows, label=s.label,
                                 split=s.split))
        store.delete([s.path])
    log.info("quarantined %d duplicate id(s); rewrote %d staged shard(s)", len(dups), len(drop))
    q = put_shard(store, layout.staged_duplicates_key(cfg.prefix, run_id),
                  quarantine_table(qrows),
                  kind="quarantine", compression=cfg.shards.compression,
                  record_batch_rows=cfg.shards.record_batch_rows)
    return out, q
