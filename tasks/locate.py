"""Where ids live in a version: the shards and row positions of their live rows.

Used by deletions and corrections. The published-id index (``tasks.id_index``) says which
batches hold an id: one probe per live batch whose id range (``BatchListRef.id_min`` /
``id_max``, a zone map in the version's references) can hold one of them, so ids that
arrive in order (sequential, time-prefixed) cost the batches that hold them, not the
history; random ids probe every batch, as the duplicate check does. Only the shards
of those batches are read, and of each only its ``id`` (and target) column is used. Rows a
deletion vector masks already are not live: an id whose rows are all masked is reported as
``already_masked``, one no batch holds as ``unknown``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core.change import Masked
from shardline.core.deletions import drop_masked
from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry, content_digests
from shardline.core.store import Store
from shardline.tasks.id_index import published_mask

HITS_SCHEMA = pa.schema([("id", pa.string()), ("shard", pa.string()), ("row", pa.int64()),
                         ("label", pa.int64())])


@dataclass(frozen=True)
class Located:
    """The live rows of the ids asked for, by shard; and the ids that have none."""

    masked: list[Masked]                        # positions to mask, per touched shard
    hits: pa.Table                              # one row per live row found (HITS_SCHEMA)
    unknown: list[str] = field(default_factory=list)          # in no live batch
    already_masked: list[str] = field(default_factory=list)   # every row masked already

    @property
    def rows(self) -> int:
        return int(self.hits.num_rows)


def _batches_holding(store: Store, m: Manifest, ids: pa.Array, workers: int
                     ) -> dict[str, np.ndarray]:
    """Batch id -> which of ``ids`` its id file holds (batches holding none left out)."""
    wanted = sorted(ids.to_pylist())
    refs = [r for r in m.batch_lists if r.may_hold(wanted)]      # the id-range zone map
    if not refs:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(refs)))) as pool:
        hits = list(pool.map(lambda r: published_mask(store, [r.ids_path], ids, workers=1),
                             refs))
    return {r.batch: h for r, h in zip(refs, hits, strict=True) if h.any()}


def read_ids_of(store: Store, s: ShardEntry) -> tuple[pa.Array, pa.Array | None]:
    """The ``id`` and (when it has one) ``label`` columns of shard ``s``, digest-checked."""
    data = store.get_bytes(s.path)
    sha, xxh = content_digests(data)
    if sha != s.sha256 or (s.xxh3_128 is not None and xxh != s.xxh3_128):
        raise StoreError(f"{store.uri(s.path)}: its bytes differ from the digest the version "
                         "records; restore the shard (`shardline verify`) and run again")
    table = ipc.open_file(pa.py_buffer(data)).read_all()
    label = table.column("label").combine_chunks() if "label" in table.column_names else None
    return table.column("id").combine_chunks(), label


def locate(store: Store, m: Manifest, ids: pa.Array, workers: int = 8) -> Located:
    """The live rows of ``ids`` (distinct strings) in version ``m``."""
    ids = ids.cast(pa.string())
    holding = _batches_holding(store, m, ids, workers)
    in_index = np.zeros(len(ids), bool)
    for hit in holding.values():
        in_index |= hit
    refs = [r for r in m.batch_lists if r.batch in holding]
    todo = [(s, ids.filter(pa.array(holding[bl.batch])))
            for bl in m.read_lists(refs) for s in bl.shards]
    masks = m.masks({s.path for s, _ in todo})

    def scan(item: tuple[ShardEntry, pa.Array]) -> tuple[ShardEntry, pa.Table]:
        s, want = item
        col, label = read_ids_of(store, s)
        pos = np.flatnonzero(pc.is_in(col, value_set=want).to_numpy(zero_copy_only=False))
        pos = drop_masked(pos, masks.get(s.path))
        lab = (label.take(pa.array(pos)).cast(pa.int64()) if label is not None
               and pa.types.is_integer(label.type) else pa.nulls(len(pos), pa.int64()))
        return s, pa.table([col.take(pa.array(pos)), pa.array([s.path] * len(pos), pa.string()),
                            pa.array(pos, pa.int64()), lab], schema=HITS_SCHEMA)

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
        scanned = list(pool.map(scan, todo))
    masked = [Masked(s, t.column("row").to_numpy()) for s, t in scanned if t.num_rows]
    hits = pa.concat_tables([t for _, t in scanned]) if scanned else HITS_SCHEMA.empty_table()
    found = hits.column("id").combine_chunks()
    live = pc.is_in(ids, value_set=found).to_numpy(zero_copy_only=False)
    return Located(masked=masked, hits=hits,
                   unknown=ids.filter(pa.array(~in_index)).to_pylist(),
                   already_masked=ids.filter(pa.array(in_index & ~live)).to_pylist())
