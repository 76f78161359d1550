"""Compaction, part 2: rewrite one bin of small shards as one shard, and prove it holds the
same rows.

Memory is bounded by one output shard: the bin's inputs (each checked against its manifest
digest as it is read, so damage is never copied into a new digest) are read as Arrow record
batches, concatenated, stably sorted by label as ingest writes rows, encoded as Arrow IPC
with the dataset's compression and record-batch size, and decoded again to verify: the same
row count, and the same rows (every column) once both sides are ordered by id. Only then is
the shard uploaded under a new key (this run's id in it), with new digests and label counts.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.errors import StoreError
from shardline.core.parts import ShardEntry, content_digests
from shardline.core.store import Store
from shardline.tasks.compact_plan import GROUP_FIELDS
from shardline.tasks.convert.shard_writer import encode_ipc, label_counts

_ORDER = [("id", "ascending"), ("source_key", "ascending"), ("source_row", "ascending")]


class CompactionMismatch(StoreError):
    """A rewritten shard does not hold exactly the rows of the shards it replaces."""


def read_shard(store: Store, s: ShardEntry) -> pa.Table:
    """Shard ``s`` as a table, after checking its bytes against the manifest's digests."""
    data = store.get_bytes(s.path)
    sha, xxh = content_digests(data)
    if sha != s.sha256 or (s.xxh3_128 is not None and xxh != s.xxh3_128):
        raise StoreError(f"{s.path}: its bytes differ from the digest the manifest records; "
                         "not compacting a damaged shard (restore it first)")
    with ipc.open_file(pa.BufferReader(data)) as f:
        table = pa.Table.from_batches([f.get_batch(i) for i in range(f.num_record_batches)],
                                      schema=f.schema)
    if table.num_rows != s.rows:
        raise StoreError(f"{s.path}: holds {table.num_rows} rows, the manifest says {s.rows}")
    return table


def _same_rows(before: pa.Table, after: pa.Table, where: str) -> None:
    if before.num_rows != after.num_rows:
        raise CompactionMismatch(f"{where}: {after.num_rows} rows written for "
                                 f"{before.num_rows} read")
    a = before.take(_sort_indices(before))
    b = after.take(_sort_indices(after))
    for name in before.column_names:
        if not a.column(name).equals(b.column(name)):
            raise CompactionMismatch(f"{where}: column {name!r} differs from the rows of the "
                                     "shards it replaces")


def _sort_indices(t: pa.Table) -> pa.Array:
    return pc.sort_indices(t, sort_keys=_ORDER)


def rewrite_bin(store: Store, prefix: str, inputs: list[ShardEntry], *, key: str,
                schema: pa.Schema, compression: str, record_batch_rows: int,
                masked: dict[str, np.ndarray] | None = None) -> ShardEntry:
    """Write ``inputs`` as one shard at ``key`` and return its manifest entry; rows that
    ``masked`` lists (path -> positions, from deletion vectors) are left out."""
    with ThreadPoolExecutor(max_workers=min(16, len(inputs))) as pool:
        tables = list(pool.map(lambda s: read_shard(store, s), inputs))
    tables = [_unmasked(t, (masked or {}).get(s.path)) for s, t in zip(inputs, tables,
                                                                        strict=True)]
    for s, t in zip(inputs, tables, strict=True):
        if not t.schema.equals(schema, check_metadata=False):
            raise StoreError(f"{s.path}: its schema {t.schema} is not the version's {schema}")
    meta = tables[0].schema.metadata         # the shards' own metadata is kept as it was
    before = pa.concat_tables([t.replace_schema_metadata(meta) for t in tables])
    labels = before.column("label").to_numpy()
    order = np.argsort(labels, kind="stable")
    table = before.take(pa.array(order)) if not (np.diff(order) == 1).all() else before
    buf = encode_ipc(table.combine_chunks(), compression, record_batch_rows)
    with ipc.open_file(pa.BufferReader(buf)) as f:
        written = f.read_all()
    _same_rows(before, written, key)
    store.put_bytes(key, memoryview(buf), content_type="application/vnd.apache.arrow.file")
    sha, xxh = content_digests(memoryview(buf))
    first = inputs[0]
    lab = written.column("label")
    extra: dict[str, Any] = {f: getattr(first, f) for f in GROUP_FIELDS}
    stats = ({"label": {"min": int(labels.min()), "max": int(labels.max())}}
             if len(labels) else {})
    return ShardEntry(path=key, rows=written.num_rows, bytes=buf.size, sha256=sha,
                      batch=first.batch,
                      partition={k: v for k, v in first.partition.items() if k != "label"},
                      stats=stats, compression=compression, xxh3_128=xxh,
                      label_counts=label_counts(lab), **extra)


def _unmasked(table: pa.Table, masked: np.ndarray | None) -> pa.Table:
    if masked is None or not len(masked):
        return table
    keep = np.ones(table.num_rows, bool)
    keep[masked] = False
    return table.filter(pa.array(keep))


def output_key(prefix: str, batch: str, part: int, run: str, split: str | None) -> str:
    """Where output ``part`` of ``batch`` goes (the batch's folder or its held-out folder,
    no label level)."""
    return layout.shard_key(prefix, batch, None, part, run, split)


