"""Writing Arrow IPC shards: buffers that cut rows into sized files and upload them.

A shard is built in memory (``pa.BufferOutputStream``), hashed, and written with one PUT, so
its digests and size are known exactly and a half-written shard never exists under a key.
Pixels are appended to one ``bytearray`` per partition and become a ``fixed_size_binary``
column without per-row Arrow objects.

Layout (``dataset.shards.partition_by``): by batch only (the default), a task's rows fill
shards of about ``target_mb`` that hold many labels, rows grouped (stably sorted) by label
inside each shard, with per-shard label counts for the manifest. To keep tails from becoming
small files, the writer holds up to two shards' worth of rows and, at the end, splits what is
left over one shard into two halves: no shard is below half the target unless the task's
rows are fewer. Partitioned by batch and label, a shard holds one label (a file per label
per task at least: for many classes, many small files).

Held-out split (``holdout_fraction``, from ``[dataset] holdout_fraction``): rows are routed by
``shardline.core.idhash`` (the trainer's rule, bit for bit) into train and held-out buffers,
each cut into shards as above, so a shard holds one split only (``WrittenShard.split``).
Routing is vectorised over a few thousand rows at a time (``ROUTE_ROWS``), and never over
more than ``ROUTE_BYTES`` of payload: rows wait unrouted only that long.

Memory (per writer, i.e. per Spark task): at most ``ROUTE_BYTES`` of unrouted rows, plus two
shards' worth of rows per partition (train and held-out: four, about 4 x ``target_mb``), plus
while a shard is written its Arrow columns and its IPC bytes (about 2 x ``target_mb``; the
rows' own copies are released once the columns hold them). Independent of the rows a task
converts: ``docs/benchmarks.md`` (Zarr conversion) has the measured figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core.config import DatasetConfig
from shardline.core.idhash import holdout_ids
from shardline.core.manifest import content_digests
from shardline.core.schema import QUARANTINE_SCHEMA, data_schema
from shardline.core.store import Store
from shardline.tasks.convert.columns import table_stats, typed_columns


def row_bytes(cfg: DatasetConfig) -> int:
    """Bytes of one row's payload (sizes shards to ``target_mb``)."""
    if not cfg.typed:
        return cfg.image.nbytes
    from shardline.core.field_arrow import storage_dtype
    total = 8
    specs = [(s.resolved_dtype, s.shape) for _, s in cfg.field_specs]
    for dtype, shape in specs:
        size = int(np.prod(shape)) if shape else 1
        total += size * (8 if dtype == "string" else storage_dtype(dtype).itemsize)
    return total


@dataclass(frozen=True)
class WrittenShard:
    path: str
    rows: int
    bytes: int
    sha256: str
    kind: str                    # "data" | "quarantine"
    label: int | None = None     # partition value when partitioned by label
    label_min: int | None = None
    label_max: int | None = None
    xxh3_128: str | None = None
    label_counts: dict[str, int] = field(default_factory=dict)   # label index (text) -> rows
    split: str | None = None     # data: "train" | "holdout" (None: written unsplit)
    stats: dict[str, Any] = field(default_factory=dict)   # typed fields (core.field_stats)


def label_counts(labels: pa.Array | pa.ChunkedArray) -> dict[str, int]:
    """Rows per label, keys as text (JSON object keys), ascending by label."""
    vc = pc.value_counts(labels).to_pylist()
    return {str(v["values"]): int(v["counts"]) for v in sorted(vc, key=lambda v: v["values"])}


def encode_ipc(table: pa.Table, compression: str, record_batch_rows: int) -> pa.Buffer:
    """The Arrow IPC *file* format bytes of ``table`` (LZ4 frame or uncompressed)."""
    sink = pa.BufferOutputStream()
    opts = ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with ipc.new_file(sink, table.schema, options=opts) as writer:
        writer.write_table(table, max_chunksize=record_batch_rows)
    return sink.getvalue()


def put_shard(store: Store, key: str, table: pa.Table, *, kind: str, compression: str,
              record_batch_rows: int, label: int | None = None,
              split: str | None = None, label_column: str | None = "label",
              stats: dict[str, Any] | None = None) -> WrittenShard:
    buf = encode_ipc(table, compression, record_batch_rows)
    store.put_bytes(key, memoryview(buf))
    lmin = lmax = None
    counts: dict[str, int] = {}
    if kind == "data" and table.num_rows and label_column is not None:
        labels = table.column(label_column)
        lmin, lmax = int(pc.min(labels).as_py()), int(pc.max(labels).as_py())
        counts = label_counts(labels)
    sha, xxh = content_digests(memoryview(buf))
    return WrittenShard(key, table.num_rows, buf.size, sha, kind, label, lmin, lmax, xxh,
                        counts, split, stats or {})


@dataclass
class _Rows:
    ids: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)   # class index (typed: the row's group)
    payload: list[Any] = field(default_factory=list)  # pixel bytes, or a TypedRow
    keys: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def append(self, rid: str, label: int, payload: Any, key: str, row: int) -> None:
        self.ids.append(rid)
        self.labels.append(label)
        self.payload.append(payload)
        self.keys.append(key)
        self.rows.append(row)

    def take(self, n: int) -> _Rows:
        """Remove the first ``n`` rows and return them."""
        head = _Rows(self.ids[:n], self.labels[:n], self.payload[:n], self.keys[:n],
                     self.rows[:n])
        del self.ids[:n], self.labels[:n], self.payload[:n], self.keys[:n], self.rows[:n]
        return head

    def sorted_by_label(self) -> _Rows:
        """The same rows, stably sorted by label (one contiguous run per label)."""
        order = np.argsort(np.asarray(self.labels, np.int64), kind="stable")
        if (np.diff(order) == 1).all():
            return self
        return _Rows([self.ids[i] for i in order], [self.labels[i] for i in order],
                     [self.payload[i] for i in order], [self.keys[i] for i in order],
                     [self.rows[i] for i in order])


ROUTE_ROWS = 4096       # rows hashed at once when routing to the train / held-out buffers
ROUTE_BYTES = 8 << 20   # ... and at most this much payload (a 53 KB tensor row: 157 rows)


class DataShardWriter:
    """Collects valid rows per partition and writes a shard each time one is full
    (partitioned by label), or each time two are (by batch only; see the module docstring).

    ``key_for(label, seq)`` names the staged file; ``label`` is None when the dataset is
    not partitioned by label. With ``holdout_fraction``, rows are first routed to the train
    or held-out split by id hash and ``key_for(label, seq, split)`` is called instead. Each
    row's position (shard path, row in shard) is recorded so the converter can later remove
    a duplicate without re-reading every shard.
    """

    def __init__(self, store: Store, cfg: DatasetConfig,
                 key_for: Callable[..., str], holdout_fraction: float | None = None) -> None:
        self.store, self.cfg, self.key_for = store, cfg, key_for
        self.holdout_fraction = holdout_fraction
        self.schema = data_schema(cfg)
        self.by_label = "label" in cfg.shards.partition_by
        self.limit = cfg.shards.rows_per_shard(row_bytes(cfg) + 32)
        # rows waiting to be routed are bounded in bytes, not only rows: 4096 rows of a
        # 13x32x32 float32 tensor are 218 MB (measured: the largest part of a task's peak)
        self.route_rows = max(1, min(ROUTE_ROWS, ROUTE_BYTES // (row_bytes(cfg) + 32)))
        self.buffers: dict[tuple[str | None, int | None], _Rows] = {}
        self.pending = _Rows()       # rows not routed to a split yet
        self.seq = 0
        self.written: list[WrittenShard] = []
        # (source_key, id, source_row, label, shard key, row in shard) of every row written
        self.placed: list[tuple[str, str, int, int, str, int]] = []

    def add(self, rid: str, label: int, payload: Any, source_key: str, source_row: int
            ) -> None:
        """One checked row: ``payload`` is the shorthand's pixel bytes, or a typed row
        (``typed_rows.TypedRow``; ``label`` its group)."""
        if self.holdout_fraction is None:
            self._place(None, rid, label, payload, source_key, source_row)
            return
        self.pending.append(rid, label, payload, source_key, source_row)
        if len(self.pending) >= self.route_rows:
            self._route()

    def _route(self) -> None:
        """Send the pending rows to their split's buffers (one vectorised hash)."""
        p, self.pending = self.pending, _Rows()
        if not len(p):
            return
        held = holdout_ids(pa.array(p.ids, pa.string()), float(self.holdout_fraction or 0.0))
        for i, h in enumerate(held.tolist()):
            self._place("holdout" if h else "train", p.ids[i], p.labels[i], p.payload[i],
                        p.keys[i], p.rows[i])

    def _place(self, split: str | None, rid: str, label: int, payload: Any, source_key: str,
               source_row: int) -> None:
        part = (split, label if self.by_label else None)
        buf = self.buffers.setdefault(part, _Rows())
        buf.append(rid, label, payload, source_key, source_row)
        if self.by_label and len(buf) >= self.limit:
            self._write(part, self.buffers.pop(part))
        elif not self.by_label and len(buf) >= 2 * self.limit:
            self._write(part, buf.take(self.limit))

    def close(self) -> list[WrittenShard]:
        self._route()
        for part in sorted(self.buffers, key=lambda p: (p[0] or "", -1 if p[1] is None else p[1])):
            buf = self.buffers.pop(part)
            if len(buf) > self.limit:        # by batch only: two halves, not full + tail
                self._write(part, buf.take((len(buf) + 1) // 2))
            if len(buf):
                self._write(part, buf)
        return self.written

    def _write(self, part: tuple[str | None, int | None], buf: _Rows) -> None:
        split, label = part
        given = buf                  # the caller's reference keeps it (and its rows) alive
        if not self.by_label:
            buf = buf.sorted_by_label()
        n = len(buf)
        stats: dict[str, Any] = {}
        if self.cfg.typed:
            payload = typed_columns(self.cfg, buf.payload)
        else:
            payload = [pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(self.cfg.image.nbytes), n, [None, pa.py_buffer(b"".join(buf.payload))]
            )]
            payload.insert(0, pa.array(buf.labels, pa.int16()))
        # the columns hold the values now: drop the rows' own copies before encoding
        buf.payload.clear()
        given.payload.clear()
        table = pa.Table.from_arrays(
            [pa.array(buf.ids, pa.string()), *payload,
             pa.array(buf.keys, pa.string()), pa.array(buf.rows, pa.int64())],
            schema=self.schema,
        )
        if self.cfg.typed:
            stats = table_stats(self.cfg, table)
        t = self.cfg.target_spec
        key = (self.key_for(label, self.seq) if split is None
               else self.key_for(label, self.seq, split))
        self.seq += 1
        shard = put_shard(self.store, key, table, kind="data",
                          compression=self.cfg.shards.compression,
                          record_batch_rows=self.cfg.shards.record_batch_rows, label=label,
                          split=split, stats=stats,
                          label_column=t.name if t.kind == "class" else None)
        self.written.append(shard)
        for j in range(n):
            self.placed.append((buf.keys[j], buf.ids[j], buf.rows[j], buf.labels[j], key, j))


def quarantine_table(rows: list[dict]) -> pa.Table:
    """Rows of ``QUARANTINE_SCHEMA`` from dicts with its field names."""
    return pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in QUARANTINE_SCHEMA} for r in rows],
        schema=QUARANTINE_SCHEMA,
    )
