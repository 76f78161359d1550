"""An erasure's two steps before its commit (``tasks.erase``): find every row of the ids in
a version, masked or not, and rewrite what holds them.

``find`` probes each live batch's id file (the duplicate check's index) and reads only the
shards of the batches that hold an id (digest-checked, the ``id`` and ``source_key``
columns used). ``rewrite`` writes each touched shard again without those rows and without
the rows deletion vectors masked in it (``tasks.compact_rewrite.rewrite_bin``: one shard
in, one out, rows verified; a shard left empty is dropped), and each touched batch's id
file without the ids (``tasks.id_index.encode_ids``). Memory: one shard at a time per
worker; nothing is kept but positions.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.deletions import drop_masked, union
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry
from shardline.core.replace import Rewrite
from shardline.core.store import Store
from shardline.tasks.compact_rewrite import output_key, read_shard, rewrite_bin
from shardline.tasks.erase_quarantine import QuarantineHit, find_quarantined
from shardline.tasks.id_index import encode_ids, published_mask

WORKERS = 8


@dataclass(frozen=True)
class Hit:
    """The rows of the ids in one shard: all of them (``rows``) and the live ones."""

    shard: ShardEntry
    rows: np.ndarray
    live: int
    schema: pa.Schema


@dataclass
class Found:
    """Where an erasure's ids are in one version."""

    batches: dict[str, str]                        # touched batch -> its id file
    hits: list[Hit] = field(default_factory=list)
    quarantined: list[QuarantineHit] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)   # raw uploads the rows came from
    unknown: list[str] = field(default_factory=list)  # in no live batch's id file

    @property
    def rows(self) -> int:
        """Live rows the erasure removes."""
        return sum(h.live for h in self.hits)

    @property
    def quarantined_rows(self) -> int:
        return sum(len(h.rows) for h in self.quarantined)

    @property
    def shards(self) -> int:
        return len(self.hits)


def find(store: Store, m: Manifest, ids: pa.Array) -> Found:
    """Every row of ``ids`` (distinct strings) in the shards of version ``m``."""
    wanted = sorted(ids.to_pylist())
    refs = [r for r in m.batch_lists if r.may_hold(wanted)]       # the id-range zone map
    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(refs)))) as pool:
        masks = list(pool.map(lambda r: published_mask(store, [r.ids_path], ids, workers=1),
                              refs))
    known = np.zeros(len(ids), bool)
    found = Found({})
    for r, hit in zip(refs, masks, strict=True):
        if hit.any():
            known |= hit
            found.batches[r.batch] = r.ids_path
    found.quarantined = find_quarantined(store, m, ids)
    rejected = {i for h in found.quarantined for i in h.ids}
    found.sources |= {k for h in found.quarantined for k in h.sources}
    found.unknown = [i for i in ids.filter(pa.array(~known)).to_pylist() if i not in rejected]
    refs = [r for r in m.batch_lists if r.batch in found.batches]
    shards = [s for bl in m.read_lists(refs) for s in bl.shards]
    masked = m.masks({s.path for s in shards})

    def scan(s: ShardEntry) -> tuple[Hit, set[str]]:
        t = read_shard(store, s)
        pos = np.flatnonzero(pc.is_in(t.column("id"), value_set=ids)
                             .to_numpy(zero_copy_only=False))
        live = len(drop_masked(pos, masked.get(s.path)))
        src = (set(t.column("source_key").take(pa.array(pos)).to_pylist())
               if "source_key" in t.column_names else set())
        return Hit(s, pos, live, t.schema), src

    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(shards)))) as pool:
        for h, src in pool.map(scan, shards):
            if len(h.rows):
                found.hits.append(h)
                found.sources |= src
    return found


def _ids_without(store: Store, key: str, ids: pa.Array) -> bytes:
    """The id file at ``key`` without ``ids``."""
    with ipc.open_file(pa.py_buffer(store.get_bytes(key))) as f:
        col = f.read_all().column("id").combine_chunks()
    return encode_ids(col.filter(pc.invert(pc.is_in(col, value_set=ids))))


def rewrite(store: Store, prefix: str, m: Manifest, found: Found, ids: pa.Array, run: str,
            compression: str, record_batch_rows: int
            ) -> tuple[dict[str, Rewrite], dict[str, tuple[str, bytes]]]:
    """The touched batches' rewrites (their shards written to the store already) and their
    new id files (batch -> key, bytes: committed with the version). Keys name ``run`` and
    ``m``'s version, so an attempt after a lost race writes new ones."""
    tag = f"{run}-v{m.version:06d}"
    masked = m.masks({h.shard.path for h in found.hits})
    drop = {h.shard.path: union([h.rows, masked.get(h.shard.path, np.empty(0, np.int64))])
            for h in found.hits}

    def one(item: tuple[int, Hit]) -> ShardEntry | None:
        i, h = item
        if len(drop[h.shard.path]) >= h.shard.rows:
            return None                            # every row goes: the shard is dropped
        key = output_key(prefix, h.shard.batch, i, tag, h.shard.split)
        return rewrite_bin(store, prefix, [h.shard], key=key, schema=h.schema,
                           compression=compression, record_batch_rows=record_batch_rows,
                           masked={h.shard.path: drop[h.shard.path]})

    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(found.hits)))) as pool:
        written = list(pool.map(one, enumerate(found.hits)))
    rewrites: dict[str, Rewrite] = {}
    id_files: dict[str, tuple[str, bytes]] = {}
    for batch, ids_path in found.batches.items():
        id_files[batch] = (layout.ids_key(prefix, batch, tag),
                           _ids_without(store, ids_path, ids))
        mine = [(h, w) for h, w in zip(found.hits, written, strict=True)
                if h.shard.batch == batch]
        rewrites[batch] = Rewrite(batch, [h.shard for h, _ in mine],
                                  [w for _, w in mine if w is not None],
                                  sum(len(drop[h.shard.path]) for h, _ in mine))
    return rewrites, id_files
