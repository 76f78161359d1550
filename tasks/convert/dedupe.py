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
from shardline.core.store import ObjectStore
from shardline.tasks.convert.shard_writer import WrittenShard, put_shard, quarantine_table

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Duplicate:
    meta_index: int       # index into the ok-rows table
    message: str


def find_duplicates(ok: pa.Table, published: pa.Array | np.ndarray) -> list[Duplicate]:
    """``ok`` has columns id, source_key, source_row (rows that passed the row checks);
    ``published`` is, for each row of ``ok``, whether its id is published (a boolean array,
    from ``ledger.published_in``), or the published ids themselves (small histories)."""
    if ok.num_rows == 0:
        return []
    order = pc.sort_indices(ok, sort_keys=[("source_key", "ascending"),
                                           ("source_row", "ascending")]).to_pylist()
    ids = ok.column("id").to_pylist()
    keys = ok.column("source_key").to_pylist()
    rows = ok.column("source_row").to_pylist()
    if isinstance(published, np.ndarray):
        if len(published) != ok.num_rows:
            raise ValueError(f"published mask has {len(published)} entries for "
                             f"{ok.num_rows} rows")
        in_published = published.tolist()
    else:
        in_published = pc.is_in(ok.column("id"), value_set=published).to_pylist() \
            if len(published) else [False] * ok.num_rows
    first: dict[str, int] = {}
    out = []
    for i in order:
        rid = ids[i]
        if in_published[i]:
            out.append(Duplicate(i, f"{keys[i]} row {rows[i]}: id {rid!r} is already in a "
                                    "published version; give the row a new id to add it"))
        elif rid in first:
            j = first[rid]
            out.append(Duplicate(i, f"{keys[i]} row {rows[i]}: id {rid!r} already appears at "
                                    f"{keys[j]} row {rows[j]} in this batch (that row was kept)"))
        else:
            first[rid] = i
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
