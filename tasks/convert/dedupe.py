"""Duplicate ids: within the batch and against every published version.

Ids are only comparable once all rows are known, so this runs in the driver over the row
files the Spark tasks wrote (ids and row positions, no pixels; ``rowfiles``), one range of
id hash buckets at a time: equal ids share a bucket, so the driver holds one chunk of the
new batch's ids, never the whole batch. Against the published versions it uses
``id_index.published_mask`` for the chunk: the published id index is streamed one hash
bucket of one batch at a time, so the driver never holds the history's ids either. The first
occurrence in (source key, row) order wins; later ones are quarantined as ``duplicate_id``,
as is any id already published. Only the staged shards that hold a duplicate are rewritten;
in the common case (no duplicates) nothing is read back.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.idhash import id_hash64
from shardline.core.store import Store
from shardline.tasks.convert.columns import table_stats
from shardline.tasks.convert.rowfiles import RowFile, plan_chunks, read_buckets
from shardline.tasks.convert.shard_writer import WrittenShard, put_shard, quarantine_table
from shardline.tasks.id_index import BUCKETS_KEY, ID_BUCKETS, IDS_SCHEMA, published_mask

log = logging.getLogger(__name__)

_HASH_ROWS = 1 << 16


@dataclass(frozen=True)
class Duplicate:
    meta_index: int       # index into the ok-rows table
    message: str
    rule: str = "duplicate_id"      # or "unknown_id": a correction of an unpublished id


def find_duplicates(ok: pa.Table, published: pa.Array | np.ndarray,
                    correction: np.ndarray | None = None) -> list[Duplicate]:
    """``ok`` has columns id, source_key, source_row (rows that passed the row checks);
    ``published`` is, for each row of ``ok``, whether its id is published (a boolean array,
    from ``ledger.published_in``), or the published ids themselves (small histories).
    ``correction``: which rows come from corrections (their id must be published: one that
    is not is ``unknown_id``; a published one is kept, to replace the published row).

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
    fix = np.zeros(n, bool) if correction is None else correction.astype(bool, copy=False)
    unknown = fix & ~in_published
    in_published = in_published & ~fix          # a correction of a published id is kept
    order = _key_row_order(ok)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)                     # position of each row in (key, row) order
    ids_col = ok.column("id")
    hashes = np.concatenate([id_hash64(ids_col.slice(i, _HASH_ROWS))     # bounded scratch
                             for i in range(0, n, _HASH_ROWS)])
    _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero((counts[inverse] > 1) | in_published | unknown)
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
        if unknown[i]:
            out.append(Duplicate(i, f"{keys[c]} row {rows[c]}: id {rid!r} is not in any "
                                    "published version, so there is no row to correct; check "
                                    "the id, or upload the row outside corrections/ to add it",
                                 "unknown_id"))
        elif in_published[i]:
            out.append(Duplicate(i, f"{keys[c]} row {rows[c]}: id {rid!r} is already in a "
                                    "published version; give the row a new id to add it, or "
                                    "upload it under corrections/ to replace that row"))
        elif rid in first:
            j = first[rid]
            out.append(Duplicate(i, f"{keys[c]} row {rows[c]}: id {rid!r} already appears at "
                                    f"{keys[j]} row {rows[j]} in this batch (that row was kept)"))
        else:
            first[rid] = c
    return out


def _key_row_order(ok: pa.Table) -> np.ndarray:
    """Row positions in (source key, source row) order. A dictionary-encoded key column (the
    row files') is ranked through its dictionaries (a few keys), not sorted as strings."""
    keys = ok.column("source_key")
    if not pa.types.is_dictionary(keys.type):
        return pc.sort_indices(ok, sort_keys=[("source_key", "ascending"),
                                              ("source_row", "ascending")]).to_numpy()
    chunks = [c for c in keys.chunks if len(c)]
    names = sorted({v for c in chunks for v in c.dictionary.to_pylist()})
    pos = {v: i for i, v in enumerate(names)}
    key_rank = np.concatenate([
        np.array([pos[v] for v in c.dictionary.to_pylist()], np.int64)[
            c.indices.to_numpy(zero_copy_only=False)] for c in chunks])
    rows = ok.column("source_row").to_numpy()
    return np.lexsort((rows, key_rank))


@dataclass
class Deduped:
    """What the duplicate check left: data shards (rewritten where they held duplicates),
    the quarantine shard(s) of the duplicates, where each duplicate sat (shard -> rows,
    8 bytes a duplicate) and the staged id file of the ids to publish."""

    data: list[WrittenShard]
    quarantine: list[WrittenShard]
    dropped: dict[str, np.ndarray]
    ids_key: str
    ids: int                         # ids in the id file (rows to publish)
    by_rule: dict[str, int] = field(default_factory=dict)   # rows dropped, per rule

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.dropped.values())


def dedupe_batch(store: Store, cfg: DatasetConfig, run_id: str, files: list[RowFile],
                 published_paths: list[str], shards: list[WrittenShard], ids_key: str,
                 max_rows: int | None = None) -> Deduped:
    """The duplicate check over the tasks' row files, one range of id buckets at a time
    (equal ids share a bucket, so each chunk is checked on its own): the driver holds one
    chunk of passed rows (at most ~``max_rows``), never the batch. Writes the batch's id file
    (``id_index`` format, record batch ``k`` = bucket ``k``) as it goes, and one quarantine
    shard of duplicates per chunk that has any."""
    chunks = plan_chunks(files, max_rows)
    whole = len(chunks) == 1
    dropped: dict[str, list[np.ndarray]] = {}
    quarantine: list[WrittenShard] = []
    n_ids = 0
    by_rule: dict[str, int] = {}
    schema = IDS_SCHEMA.with_metadata({BUCKETS_KEY: str(ID_BUCKETS).encode(),
                                       b"hash": b"xxh3_64"})
    with tempfile.TemporaryDirectory(prefix="shardline-ids-") as tmp:
        path = os.path.join(tmp, "ids.arrow")
        with ipc.new_file(path, schema) as w:
            for c, buckets in enumerate(chunks):
                ok, bucket_of = read_buckets(store, files, buckets, whole=whole,
                                             columns=_DEDUPE_COLUMNS, passed_only=True)
                mask = published_mask(store, published_paths, ok.column("id"),
                                       whole=None if whole else False, buckets=bucket_of)
                dups = find_duplicates(ok, mask, _corrections(cfg, ok))
                for d in dups:
                    by_rule[d.rule] = by_rule.get(d.rule, 0) + 1
                keep = np.ones(ok.num_rows, bool)
                if dups:
                    idx = np.array([d.meta_index for d in dups], np.int64)
                    keep[idx] = False
                    q = _quarantine_dups(store, cfg, run_id, ok, dups, c)
                    quarantine.append(q)
                    hit = ok.select(["shard", "shard_row"]).take(pa.array(idx))
                    for shard, rows in _group_rows(hit).items():
                        dropped.setdefault(shard, []).append(rows)
                ids = ok.column("id")
                for k in buckets:
                    sel = pa.array((bucket_of == k) & keep)
                    w.write_batch(pa.record_batch([ids.filter(sel).combine_chunks()],
                                                  schema=schema))
                n_ids += int(keep.sum())
        store.upload_file(ids_key, path)      # streamed from disk: never O(ids) in memory
    drop = {k: np.unique(np.concatenate(v)) for k, v in dropped.items()}
    data = rewrite_shards(store, cfg, shards, drop) if drop else shards
    if drop:
        log.info("quarantined %d duplicate id(s); rewrote %d staged shard(s)",
                 sum(len(v) for v in drop.values()), len(drop))
    return Deduped(data, quarantine, drop, ids_key, n_ids, by_rule)


def _corrections(cfg: DatasetConfig, ok: pa.Table) -> np.ndarray | None:
    """Which rows of ``ok`` come from corrections (None: no row does)."""
    keys = pc.cast(ok.column("source_key"), pa.string())
    hit = pc.starts_with(keys, pattern=layout.corrections_prefix(cfg.incoming))
    out = hit.to_numpy(zero_copy_only=False).astype(bool)
    return out if out.any() else None


_DEDUPE_COLUMNS = ["id", "label", "source_key", "source_row", "shard", "shard_row"]


def _group_rows(hit: pa.Table) -> dict[str, np.ndarray]:
    shard = pc.cast(hit.column("shard"), pa.string()).to_numpy(zero_copy_only=False)
    rows = hit.column("shard_row").to_numpy(zero_copy_only=False)
    return {str(s): rows[shard == s].astype(np.int64) for s in np.unique(shard)}


def _quarantine_dups(store: Store, cfg: DatasetConfig, run_id: str, ok: pa.Table,
                     dups: list[Duplicate], chunk: int) -> WrittenShard:
    """One quarantine shard of one chunk's duplicates (chunk 0 keeps the single-chunk name)."""
    pick = ok.take(pa.array([d.meta_index for d in dups], pa.int64())).to_pylist()
    qrows = [dict(source_key=r["source_key"], source_row=r["source_row"], id=r["id"],
                  label=cfg.classes[r["label"]] if r["label"] is not None else None,
                  rule=d.rule, message=d.message) for r, d in zip(pick, dups, strict=True)]
    key = layout.staged_duplicates_key(cfg.prefix, run_id)
    if chunk:
        key = key.removesuffix(".arrow") + f"-{chunk:03d}.arrow"
    return put_shard(store, key, quarantine_table(qrows), kind="quarantine",
                     compression=cfg.shards.compression,
                     record_batch_rows=cfg.shards.record_batch_rows)


def rewrite_shards(store: Store, cfg: DatasetConfig, shards: list[WrittenShard],
                   drop: dict[str, np.ndarray]) -> list[WrittenShard]:
    """Rewrite the staged data shards that hold duplicates, without them (one shard in
    memory at a time). Returns the new data shard list."""
    out = []
    for s in shards:
        if s.path not in drop:
            out.append(s)
            continue
        with ipc.open_file(pa.BufferReader(store.get_bytes(s.path))) as f:
            table = f.read_all()
        keep = np.ones(table.num_rows, bool)
        keep[drop[s.path]] = False
        kept = table.filter(pa.array(keep))
        if kept.num_rows:
            t = cfg.target_spec
            out.append(put_shard(store, layout.staged_rewrite_key(s.path), kept,
                                 kind="data", compression=cfg.shards.compression,
                                 record_batch_rows=cfg.shards.record_batch_rows, label=s.label,
                                 split=s.split,
                                 label_column=t.name if t.kind == "class" else None,
                                 stats=table_stats(cfg, kept) if cfg.typed else None))
        store.delete([s.path])
    return out
