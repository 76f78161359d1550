"""Batch lists as Arrow IPC, and the live shards of a version as columns.

A format-3 batch list (``manifests/batch=<id>-<run>.arrow``) is one Arrow IPC file: a row per
shard (data and quarantine, told apart by ``quarantine``; ``split`` says "train" /
"holdout", null in lists written before it), ``label_counts`` and ``partition`` as Arrow
maps, ``stats`` as compact JSON text, and the batch's own fields (dataset, run, counts, id
index, sources) as JSON in the schema metadata under ``shardline``. Reading it is
a memory map of columns, not a parse of every entry: a 100k-shard history reads in a
fraction of the time its JSON lists took.

``ShardColumns`` is what readers that touch every shard use (the trainer's plan): numpy
columns for rows and batch, and a ``ShardEntry`` built only for the shards asked for.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardline.core.errors import StoreError
from shardline.core.parts import ShardEntry

META_KEY = b"shardline"
ARROW_MAGIC = b"ARROW1"

SCHEMA = pa.schema([
    ("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
    ("sha256", pa.string()), ("batch", pa.string()),
    ("partition", pa.map_(pa.string(), pa.string())),
    ("stats", pa.string()), ("compression", pa.string()), ("xxh3_128", pa.string()),
    ("label_counts", pa.map_(pa.string(), pa.int64())), ("quarantine", pa.bool_()),
    ("split", pa.string()),
])
# Columns a batch list written before them may lack (filled with nulls when read).
OPTIONAL = ("split",)


def is_arrow(data: bytes) -> bool:
    return data[:6] == ARROW_MAGIC


def as_table(shards: Sequence[ShardEntry], quarantine: Sequence[ShardEntry] = (),
             meta: dict[str, Any] | None = None) -> pa.Table:
    """Shard entries as a table of ``SCHEMA`` (quarantine rows flagged)."""
    every = [*shards, *quarantine]
    cols: dict[str, list[Any]] = {
        "path": [s.path for s in every], "rows": [s.rows for s in every],
        "bytes": [s.bytes for s in every], "sha256": [s.sha256 for s in every],
        "batch": [s.batch for s in every],
        "partition": [sorted(s.partition.items()) for s in every],
        "stats": [json.dumps(s.stats, sort_keys=True, separators=(",", ":"), default=str)
                  for s in every],
        "compression": [s.compression for s in every],
        "xxh3_128": [s.xxh3_128 for s in every],
        "label_counts": [sorted(s.label_counts.items(), key=lambda kv: _label_order(kv[0]))
                         for s in every],
        "quarantine": [False] * len(shards) + [True] * len(quarantine),
        "split": [s.split for s in every],
    }
    schema = SCHEMA if meta is None else SCHEMA.with_metadata(
        {META_KEY: json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()})
    return pa.table(cols, schema=schema)


def encode(meta: dict[str, Any], shards: Sequence[ShardEntry],
           quarantine: Sequence[ShardEntry]) -> bytes:
    """Arrow IPC bytes of one batch list (deterministic for the same content)."""
    table = as_table(shards, quarantine, meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _label_order(label: str) -> tuple[int, int | str]:
    return (0, int(label)) if label.isdigit() else (1, label)


def decode(data: bytes, key: str) -> tuple[dict[str, Any], pa.Table]:
    """The batch's own fields and its shard table (data and quarantine rows)."""
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        meta = json.loads(table.schema.metadata[META_KEY])
    except (pa.ArrowInvalid, KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{key} is not a readable shardline Arrow batch list ({exc}); the "
                         "object is damaged: restore it from a backup") from exc
    missing = [n for n in SCHEMA.names if n not in table.column_names and n not in OPTIONAL]
    if missing:
        raise StoreError(f"{key}: Arrow batch list lacks column(s) {missing}; it was not "
                         "written by shardline (or it is damaged)")
    for name in OPTIONAL:
        if name not in table.column_names:
            table = table.append_column(SCHEMA.field(name),
                                        pa.nulls(table.num_rows, SCHEMA.field(name).type))
    return meta, table.select(SCHEMA.names)


def _map_dicts(col: pa.ChunkedArray) -> list[dict[str, Any]]:
    """A map column as one dict per row, from its flat keys/items (no per-pair tuples)."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    offsets = arr.offsets.to_numpy().tolist()
    keys, items = arr.keys.to_pylist(), arr.items.to_pylist()
    return [dict(zip(keys[a:b], items[a:b], strict=True))
            for a, b in zip(offsets, offsets[1:], strict=False)]


def _columns(table: pa.Table) -> dict[str, list[Any]]:
    with no_gc():
        out = {n: table.column(n).to_pylist()
               for n in SCHEMA.names if n not in ("quarantine", "partition", "label_counts")}
        out["partition"] = _map_dicts(table.column("partition"))
        out["label_counts"] = _map_dicts(table.column("label_counts"))
        seen: dict[str, Any] = {}     # stats texts repeat (label min/max): parse each once
        out["stats"] = [seen[x] if x in seen else seen.setdefault(x, json.loads(x))
                        for x in out["stats"]]
    return out


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic collector while building many small objects (it would rescan every
    one of them over and over; nothing built here is cyclic)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_FIELDS = ("path", "rows", "bytes", "sha256", "batch", "partition", "stats", "compression",
           "xxh3_128", "label_counts", "split")


def _entry(c: dict[str, list[Any]], i: int) -> ShardEntry:
    # the columns were typed by the Arrow schema: fill the frozen dataclass directly (its
    # generated __init__ costs ~3x more, at 100k entries per plan-sized read)
    e = object.__new__(ShardEntry)
    e.__dict__.update({f: c[f][i] for f in _FIELDS})
    return e


def _entries(table: pa.Table) -> list[ShardEntry]:
    c = _columns(table)
    with no_gc():
        return [_entry(c, i) for i in range(table.num_rows)]


def split_entries(table: pa.Table) -> tuple[list[ShardEntry], list[ShardEntry]]:
    """(data shards, quarantine shards) of a decoded batch list, in written order."""
    q = table.column("quarantine")
    return _entries(table.filter(pc.invert(q))), _entries(table.filter(q))


class ShardColumns:
    """Every live data shard of a version as columns, oldest batch first."""

    def __init__(self, table: pa.Table):
        self._table = table

    @classmethod
    def from_tables(cls, tables: list[pa.Table]) -> ShardColumns:
        if not tables:
            return cls(SCHEMA.empty_table())
        every = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
        return cls(every.filter(pc.invert(every.column("quarantine"))))

    def arrow(self) -> pa.Table:
        """The shards as a table of ``SCHEMA``."""
        return self._table

    def __len__(self) -> int:
        return int(self._table.num_rows)

    @cached_property
    def rows(self) -> np.ndarray:
        return self._table.column("rows").to_numpy()

    @cached_property
    def batch(self) -> list[str]:
        return self._table.column("batch").to_pylist()

    @cached_property
    def path(self) -> list[str]:
        return self._table.column("path").to_pylist()

    @cached_property
    def split(self) -> list[str | None]:
        """Each shard's split: "train", "holdout", or None (a mixed shard, older layout)."""
        return self._table.column("split").to_pylist()

    def split_is(self, value: str | None) -> np.ndarray:
        """Boolean mask of the shards whose split is ``value`` (None: mixed shards)."""
        col = self._table.column("split")
        if value is None:
            return pc.is_null(col).to_numpy(zero_copy_only=False)
        return pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False)

    @cached_property
    def sha256(self) -> list[str]:
        return self._table.column("sha256").to_pylist()

    def batch_codes(self) -> tuple[list[str], np.ndarray]:
        """(distinct batch ids, each shard's index into them): no per-shard Python work."""
        enc = pc.dictionary_encode(self._table.column("batch")).combine_chunks()
        return enc.dictionary.to_pylist(), enc.indices.to_numpy(zero_copy_only=False)

    @cached_property
    def _cols(self) -> dict[str, list[Any]]:
        return _columns(self._table)

    def entry(self, i: int) -> ShardEntry:
        """Shard ``i``, built from the columns when asked for (not at plan time)."""
        return _entry(self._cols, i)

    def entries(self) -> list[ShardEntry]:
        cols = self._cols
        with no_gc():
            return [_entry(cols, i) for i in range(len(self))]
