"""Row files: the per-row metadata of a conversion, written by the Spark tasks themselves.

Each task writes one Arrow IPC file, ``staging/<run>/rows/t<task>-a<attempt>.arrow``, with one
row per input row it handled (``ROW_SCHEMA``: the row's id, label, source position, status,
rule and, for a row that passed, its staged shard and index there). Its record batch ``k``
holds the rows whose id falls in hash bucket ``k`` (``id_index.buckets_of``: the same rule
and bucket count as the published id files; rows without an id go to bucket 0), so equal ids
always share a bucket. The task returns to the driver only the file's key, its row count,
its rows per rule and its passed rows per bucket: the driver's memory follows the tasks and
shards, never the rows.

The driver then reads the files a *range of buckets* at a time (``read_buckets``): the
duplicate check, the batch's id file and validation each hold one chunk of rows, sized by
``plan_chunks`` from the per-bucket counts, never the whole batch. A file is read whole in
one GET when the whole batch is one chunk, else by ranged GETs of its footer and of the
buckets asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core.settings import RuntimeEnv, read_env
from shardline.core.store import Store
from shardline.tasks.id_index import BUCKETS_KEY, ID_BUCKETS, buckets_of, open_reader

_DICT = pa.dictionary(pa.int32(), pa.string())   # few distinct values per task
ROW_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("label", pa.int16()),
    ("source_key", _DICT),
    ("source_row", pa.int64()),
    ("status", _DICT),              # "ok" | "quarantined"
    ("rule", _DICT),
    ("shard", _DICT),               # passed rows: the staged data shard
    ("shard_row", pa.int64()),      # passed rows: index within that shard
])
PLAIN_SCHEMA = pa.schema([pa.field(f.name, pa.string()) if f.type == _DICT else f
                          for f in ROW_SCHEMA])
# Rows of one chunk the driver holds at once (per pass: dedupe, validate): ~150 B a row in
# Arrow plus the passes' scratch, a few hundred MB at most whatever the batch's size.
# ``SHARDLINE_ROWS_CHUNK`` (``core.settings.RuntimeEnv``, read when a batch is chunked)
# trades driver memory for ranged requests; CHUNK_ROWS is its default.
CHUNK_ROWS = 1_000_000


def chunk_rows() -> int:
    """Rows per chunk: ``SHARDLINE_ROWS_CHUNK`` (a bad value is a ConfigError naming it)."""
    return read_env(RuntimeEnv).rows_chunk


MISSING = ("a row file of this conversion is missing: the run's staging folder was removed "
           "(published, or swept as stale); re-run the ingest")


def row_file_key(stage: str, task: int, attempt: int) -> str:
    return f"{stage}rows/t{task:05d}-a{attempt}.arrow"


def staged_ids_key(stage: str) -> str:
    """The batch's id file, staged by the duplicate check; publish copies it into place."""
    return f"{stage}ids.arrow"


@dataclass(frozen=True)
class RowFile:
    key: str
    rows: int
    by_rule: dict[str, int]          # quarantined rows per rule
    ok_per_bucket: tuple[int, ...]   # passed rows per id bucket
    bytes: int = 0


def encode_rows(cols: dict[str, list]) -> tuple[bytes, dict[str, int], list[int]]:
    """A task's row file: (bytes, quarantined rows per rule, passed rows per bucket)."""
    table = pa.table(cols, schema=PLAIN_SCHEMA)
    ids = pc.fill_null(table.column("id"), "").combine_chunks()
    b = buckets_of(ids) if len(ids) else np.zeros(0, np.int64)
    b[pc.is_null(table.column("id")).to_numpy(zero_copy_only=False)] = 0
    order = np.argsort(b, kind="stable")
    table = table.take(pa.array(order))
    b = b[order]
    cuts = np.searchsorted(b, np.arange(ID_BUCKETS + 1))
    ok = pc.equal(table.column("status"), "ok").to_numpy(zero_copy_only=False)
    ok_per_bucket = [int(ok[cuts[k]:cuts[k + 1]].sum()) for k in range(ID_BUCKETS)]
    rules = pc.value_counts(table.column("rule").drop_null()).to_pylist()
    by_rule = {r["values"]: int(r["counts"]) for r in rules}
    schema = ROW_SCHEMA.with_metadata({BUCKETS_KEY: str(ID_BUCKETS).encode()})
    sink = pa.BufferOutputStream()
    whole = pa.record_batch([pc.dictionary_encode(c.combine_chunks()) if f.type == _DICT
                             else c.combine_chunks() for c, f in zip(table.columns, ROW_SCHEMA,
                                                                      strict=True)],
                            schema=schema)
    with ipc.new_file(sink, schema, options=ipc.IpcWriteOptions(compression="lz4")) as w:
        for k in range(ID_BUCKETS):
            w.write_batch(whole.slice(int(cuts[k]), int(cuts[k + 1] - cuts[k])))
    return sink.getvalue().to_pybytes(), by_rule, ok_per_bucket


def plan_chunks(files: Sequence[RowFile], max_rows: int | None = None, *, passed: bool = True
                ) -> list[range]:
    """Consecutive bucket ranges, each holding at most ``max_rows`` rows over all files (or
    one bucket, if a single bucket holds more). ``passed``: count passed rows only (the
    duplicate check), else every row (each file's rows spread evenly: validation).
    ``max_rows`` defaults to :func:`chunk_rows`."""
    limit = max_rows if max_rows is not None else chunk_rows()
    per = np.zeros(ID_BUCKETS, np.int64)
    for f in files:
        if passed:
            per += np.asarray(f.ok_per_bucket, np.int64)
        else:
            per += -(-f.rows // ID_BUCKETS)
    out, lo, acc = [], 0, 0
    for k in range(ID_BUCKETS):
        if k > lo and acc + per[k] > limit:
            out.append(range(lo, k))
            lo, acc = k, 0
        acc += int(per[k])
    out.append(range(lo, ID_BUCKETS))
    return out


def read_buckets(store: Store, files: Sequence[RowFile], buckets: range, *,
                 whole: bool, columns: Sequence[str] | None = None, passed_only: bool = False
                 ) -> tuple[pa.Table, np.ndarray]:
    """The rows of ``buckets`` from every file (file order, then bucket order): the table
    and each row's bucket."""
    parts: list[pa.RecordBatch] = []
    bucket_of: list[np.ndarray] = []
    names = list(columns) if columns is not None else ROW_SCHEMA.names
    for f in files:
        reader = open_reader(store, f.key, whole=whole, missing=MISSING)
        if int((reader.schema.metadata or {}).get(BUCKETS_KEY, b"0")) != ID_BUCKETS:
            raise ValueError(f"{store.uri(f.key)}: not a row file of {ID_BUCKETS} buckets")
        for k in buckets:
            rb = reader.get_batch(k)
            if passed_only:
                rb = rb.filter(pc.fill_null(pc.equal(rb.column("status"), "ok"), False))
            if rb.num_rows:
                parts.append(rb.select(names))
                bucket_of.append(np.full(rb.num_rows, k, np.int64))
    schema = pa.schema([ROW_SCHEMA.field(n) for n in names])
    table = pa.Table.from_batches(parts, schema=schema) if parts else schema.empty_table()
    return table, (np.concatenate(bucket_of) if bucket_of else np.zeros(0, np.int64))


def iter_chunks(store: Store, files: Sequence[RowFile], max_rows: int | None = None, *,
                columns: Sequence[str] | None = None, passed_only: bool = False
                ) -> Iterator[tuple[range, pa.Table, np.ndarray]]:
    """Every row of ``files``, one bucket range (at most ~``max_rows`` rows) at a time."""
    chunks = plan_chunks(files, max_rows, passed=passed_only)
    for buckets in chunks:
        table, bucket_of = read_buckets(store, files, buckets, whole=len(chunks) == 1,
                                        columns=columns, passed_only=passed_only)
        yield buckets, table, bucket_of
