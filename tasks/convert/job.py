"""The code that runs inside each Spark task: read its sources, check rows, write shards.

Spark has no s3a connector here, and moving payload bytes through the JVM costs ~40 %, so
the DataFrame Spark schedules holds only task numbers; each task looks up its group of
object keys, reads them itself through the S3 API, decodes images once, and writes its own
staged shards under ``staging/<run>/`` with its task number *and attempt number* in the
file name (a retried or speculative attempt never overwrites another attempt's file). Two
slices of one large object (``split``) are two units of work, in different tasks or
one after the other through the same task's writer (whose sequence number goes on), so
they never share a name either. The per-row metadata (one row per input row: published
where, or quarantined why) goes into the task's own row file (``rowfiles``, under the same
attempt-named scheme); the task returns one small metadata row per file it wrote (shards and
its row file, with the row file's counts), so what the driver collects follows the tasks and
shards, not the rows. Only what the driver collects from the successful attempts is ever
published.

Containment: nothing one object or one row does may fail the task (and with it the batch,
run after run). A reader's :class:`Unreadable` is one quarantine row for the object; any
other exception while reading (a parser bug, ``RecursionError``, ``MemoryError``...) is one
quarantine row too, for the object (``unreadable_object``, ``source_row = -1``) or, when
rows of it were already read, for the rest of it (``unreadable_rest`` at the first row not
read); any exception while checking one row is that row's quarantine row
(``unexpected_value``). Only store errors (and ``OSError``) propagate: those are the run's
environment, not the data, and a retry may fix them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import StoreError, TransientStoreError
from shardline.core.schema import staging_prefix
from shardline.core.store import Store
from shardline.core.store_errors import body_fault
from shardline.tasks.batch import Source
from shardline.tasks.convert.formats import read_source
from shardline.tasks.convert.limits import excerpt
from shardline.tasks.convert.readers import Problem, Record, Unreadable
from shardline.tasks.convert.rowfiles import encode_rows, row_file_key
from shardline.tasks.convert.rows import Normaliser, RowError
from shardline.tasks.convert.shard_writer import (
    DataShardWriter,
    WrittenShard,
    put_shard,
    quarantine_table,
)
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.typed_rows import TypedNormaliser

META_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),        # "rows" (the task's row file) | "shard"
        ("status", pa.string()),      # shard: "data" | "quarantine"
        ("id", pa.string()),
        ("label", pa.int16()),
        ("source_key", pa.string()),
        ("source_row", pa.int64()),
        ("rule", pa.string()),
        ("shard", pa.string()),       # the file's key
        ("shard_row", pa.int64()),    # the file's row count
        ("bytes", pa.int64()),
        ("sha256", pa.string()),
        ("xxh3_128", pa.string()),
        ("label_min", pa.int16()),
        ("label_max", pa.int16()),
        ("label_counts", pa.string()),  # shard: JSON {label index: rows}; rows: JSON
                                        # {"by_rule": {rule: rows}, "ok_per_bucket": [...]}
        ("split", pa.string()),         # data shard: "train" | "holdout"
        ("stats", pa.string()),         # data shard: JSON per-field statistics (typed fields)
    ]
)
_DDL_TYPES = {pa.string(): "string", pa.int16(): "smallint", pa.int64(): "bigint"}
META_DDL = ", ".join(f"{f.name} {_DDL_TYPES[f.type]}" for f in META_SCHEMA)


@dataclass(frozen=True)
class ConvertJob:
    cfg: DatasetConfig
    store: Store                             # travels to the workers (S3: as its settings)
    run_id: str
    groups: tuple[tuple[Part, ...], ...]     # per task: whole sources and slices of large ones


def run_partition(job: ConvertJob, batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` entry: the input holds task numbers (one per partition)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx is not None else 0
    for rb in batches:
        for task in rb.column(0).to_pylist():
            try:
                out = convert_group(job.store, job.cfg, job.run_id, job.groups[task], task,
                                    attempt)
            except Exception as exc:
                named = task_error(exc, task, attempt)
                if named is None:
                    raise
                raise named from None   # one short traceback: its last line reaches the driver
            yield out


def task_error(exc: BaseException, task: int, attempt: int) -> StoreError | None:
    """A store or network fault in a Spark task as an error whose type and message survive
    the trip to the driver, which has only the text of the task's traceback
    (``core.errors.worker_store_error`` types it again): the same :class:`StoreError` type
    (a source replaced or deleted, a transient fault) with the task added, or a bare
    network fault (``store_errors.body_fault``) as a :class:`TransientStoreError` naming
    it. Raised ``from None``: botocore's chained tracebacks are what buried the exception
    line before. None: not the store's (a bug, a crash: the task fails as it is)."""
    where = f"convert task {task} (attempt {attempt + 1})"
    if isinstance(exc, StoreError):
        named = type(exc)(f"{where}: {' '.join(str(exc).split())[:800]}")
        named.__dict__.update(exc.__dict__)
        return named
    if body_fault(exc):
        return TransientStoreError(f"{where}: a network fault while reading the store: "
                                   f"{type(exc).__name__}: {str(exc)[:300]}")
    return None


def convert_group(store: Store, cfg: DatasetConfig, run_id: str,
                  parts: tuple[Part, ...], task: int, attempt: int = 0) -> pa.RecordBatch:
    """Convert one group of units (whole sources or slices); returns the metadata rows
    (``META_SCHEMA``)."""
    stage = staging_prefix(cfg.prefix, run_id)

    def key_for(label: int | None, seq: int, split: str | None = None) -> str:
        return layout.staged_data_key(cfg.prefix, run_id, label, task, seq, attempt, split)

    # the held-out split is materialised here: each task writes train and held-out shards
    writer = DataShardWriter(store, cfg, key_for, holdout_fraction=cfg.holdout_fraction)
    norm: Normaliser | TypedNormaliser = TypedNormaliser(cfg) if cfg.typed else Normaliser(cfg)
    bad: list[dict] = []
    for part in parts:
        src = part.source
        next_row = -1      # the row after the last one read (-1: none read yet)
        try:
            for rec in read_source(store, part, cfg):
                _check(rec, src, norm, writer, bad)
                next_row = rec.row + 1
        except Unreadable as exc:   # only ever a whole source: one row for the object
            bad.append(dict(source_key=src.key, source_row=-1, rule=exc.rule,
                            message=f"s3://{store.bucket}/{src.key}: {exc.message}"))
        except (StoreError, OSError):
            raise                   # the environment, not the data: the task is retried
        except Exception as exc:    # noqa: BLE001 - any other failure is this object's alone
            if body_fault(exc):     # a raw network fault (botocore, urllib3): not the data
                raise
            _unreadable(store.bucket, src, next_row, exc, bad)
    written = writer.close()
    if bad:
        key = f"{stage}quarantine/t{task:05d}-a{attempt}.arrow"
        written.append(put_shard(store, key, quarantine_table(bad), kind="quarantine",
                                 compression=cfg.shards.compression,
                                 record_batch_rows=cfg.shards.record_batch_rows))
    return _metadata(store, row_file_key(stage, task, attempt), writer, bad, written)


def _unreadable(bucket: str, src: Source, next_row: int, exc: Exception,
                bad: list[dict]) -> None:
    text = "too deep" if isinstance(exc, RecursionError) else str(exc)
    what = f"{type(exc).__name__}: {excerpt(text, 200)}"
    if next_row < 0:
        bad.append(dict(source_key=src.key, source_row=-1, rule="unreadable_object",
                        message=f"s3://{bucket}/{src.key}: reading it failed "
                        f"({what}); nothing of it was published"))
    else:
        bad.append(dict(source_key=src.key, source_row=next_row, rule="unreadable_rest",
                        message=f"s3://{bucket}/{src.key}: rows from "
                        f"{next_row} on could not be read ({what}); rows before it "
                        "were checked one by one"))


def _check(rec: Record | Problem, src: Source, norm: Normaliser | TypedNormaliser,
           writer: DataShardWriter, bad: list[dict]) -> None:
    if isinstance(rec, Problem):
        bad.append(dict(source_key=src.key, source_row=rec.row, id=_str(rec.id),
                        label=_str(rec.label), rule=rec.rule, message=rec.message, raw=rec.raw))
        return
    payload: Any
    try:
        if isinstance(norm, TypedNormaliser):
            row = norm.normalise(rec.id, rec.label, rec.values or {})
            rid, label, payload = row.id, row.group, row
        else:
            rid, label, payload = norm.normalise(rec.id, rec.label, rec.image)
    except Exception as exc:   # noqa: BLE001 - a RowError, or anything a hostile value raises
        if isinstance(exc, RowError):
            rule, why = exc.rule, exc.message
        else:
            rule, why = "unexpected_value", (
                f"checking the row raised {type(exc).__name__} "
                f"({excerpt(str(exc), 120) if not isinstance(exc, RecursionError) else ''}); "
                f"id {excerpt(rec.id, 40)}, label {excerpt(rec.label, 40)}")
        if rec.tail_cut:
            rule, why = "truncated_file", f"the last row has no final newline (cut-off " \
                f"upload?) and fails {rule}: {why}"
        bad.append(dict(source_key=src.key, source_row=rec.row, id=_str(rec.id),
                        label=_str(rec.label), rule=rule,
                        message=f"{src.key} row {rec.row}: {why}", raw=rec.raw))
        return
    writer.add(rid, label, payload, src.key, rec.row)


def _str(value: object) -> str | None:
    """The id/label as stored in a quarantine row: a short printable excerpt (never the
    whole of a huge value, never ``str()`` of a huge int, which raises)."""
    if value is None:
        return None
    return value[:256] if isinstance(value, str) and value.isprintable() else excerpt(value, 256)


def _metadata(store: Store, rows_key: str, writer: DataShardWriter, bad: list[dict],
              written: list[WrittenShard]) -> pa.RecordBatch:
    """Write the task's row file; return one metadata row per file written."""
    classed = writer.cfg.target_spec.kind == "class"   # else no class index to record
    rows: dict[str, list] = {
        "id": [p[1] for p in writer.placed] + [b.get("id") for b in bad],
        "label": [p[3] if classed else None for p in writer.placed] + [None] * len(bad),
        "source_key": [p[0] for p in writer.placed] + [b["source_key"] for b in bad],
        "source_row": [p[2] for p in writer.placed] + [b["source_row"] for b in bad],
        "status": ["ok"] * len(writer.placed) + ["quarantined"] * len(bad),
        "rule": [None] * len(writer.placed) + [b["rule"] for b in bad],
        "shard": [p[4] for p in writer.placed] + [None] * len(bad),
        "shard_row": [p[5] for p in writer.placed] + [None] * len(bad),
    }
    body, by_rule, ok_per_bucket = encode_rows(rows)
    store.put_bytes(rows_key, body)
    cols: dict[str, list] = {f.name: [] for f in META_SCHEMA}

    def row(**kw: object) -> None:
        for name, values in cols.items():
            values.append(kw.get(name))

    row(kind="rows", shard=rows_key, shard_row=len(rows["id"]), bytes=len(body),
        label_counts=json.dumps({"by_rule": by_rule, "ok_per_bucket": ok_per_bucket}))
    for s in written:
        row(kind="shard", status=s.kind, label=s.label, shard=s.path, shard_row=s.rows,
            bytes=s.bytes, sha256=s.sha256, xxh3_128=s.xxh3_128, label_min=s.label_min,
            label_max=s.label_max, label_counts=json.dumps(s.label_counts), split=s.split,
            stats=json.dumps(s.stats) if s.stats else None)
    return pa.RecordBatch.from_pydict(cols, schema=META_SCHEMA)
