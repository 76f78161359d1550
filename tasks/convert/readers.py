"""Readers: one per input format, each turning a source into raw records (Zarr groups:
``zarr_images`` and ``zarr_typed``). Which reader reads which format is the registry's
business (``formats.FORMATS``).

A reader yields :class:`Record` (a row that parsed: id, label and image still raw) or
:class:`Problem` (a row that did not parse, with its rule). A source that cannot be read
at all raises :class:`Unreadable`; the converter then quarantines the whole object as one
row with ``source_row = -1``. Row indices are 0-based positions within the object (the line
for JSONL, the data row for CSV, the table row for Parquet and Zarr, 0 for an image file),
so a person can find the row again.

Limits (``limits``) are applied here before parsing: a JSONL line longer than
``max_row_bytes`` or nested deeper than ``max_json_depth`` is a :class:`Problem` without
ever reaching ``json.loads``; a CSV record longer than ``max_row_bytes`` likewise. An
object with no rows at all (0 bytes, blank lines only, a CSV header alone, a Parquet file of
0 rows) is :class:`Unreadable` with rule ``empty_object``, so it is recorded like any other
object; a header that names one column twice (CSV or Parquet) is ``duplicate_column``:
which of the two a row means cannot be known. A slice of a large object (``split``) numbers
its rows the same way, and never raises :class:`Unreadable`: only an object that could be
planned is sliced, so "cannot be read at all" stays one row per object.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardline.core.config import DatasetConfig
from shardline.core.errors import ObjectChanged, SourceReplaced, StoreError
from shardline.core.json_depth import json_depth_exceeds
from shardline.core.ranged import RangedObject
from shardline.core.store import Store
from shardline.tasks.batch import Source
from shardline.tasks.convert.limits import excerpt, limits_for
from shardline.tasks.convert.records import Problem, Record, Unreadable
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.typed_readers import (
    field_values,
    image_file_record,
    require_columns,
    require_shorthand_columns,
    typed_columns,
    typed_parquet_records,
)
from shardline.tasks.convert.values import ABSENT


def replaced_during_ingest(src: Source, detail: str) -> SourceReplaced:
    """The error for an incoming object replaced after detect listed it (a read pinned to
    the listed ETag found another): nothing of this batch is published and the run detects
    again, converting the replacement as a new upload; no strike, no quarantine row."""
    if "was deleted since it was listed" in detail:    # ObjectDeleted's message
        return SourceReplaced(
            f"{src.key} was deleted during ingest (listed with ETag {src.etag}, {src.size} "
            f"bytes; no object is there now) {detail}; the run detects again without it")
    return SourceReplaced(
        f"{src.key} was replaced during ingest (listed with ETag {src.etag}, {src.size} "
        f"bytes; another version is there now) {detail}; the run detects it again as a "
        "new upload")


def _changed(part: Part, exc: ObjectChanged) -> SourceReplaced:
    return replaced_during_ingest(part.source, f"while convert read it in slices "
                                  f"({part.describe()}): {exc}")


def read_jsonl_slice(store: Store, part: Part, cfg: DatasetConfig
                      ) -> Iterator[Record | Problem]:
    """Lines of a byte range that starts and ends on a line boundary (the last slice ends
    where the object ends, so a cut-off last line is still seen as one)."""
    assert part.stop is not None
    try:
        data = store.get_bytes(part.key, (part.start, part.stop - 1), if_match=part.etag)
    except ObjectChanged as exc:
        raise _changed(part, exc) from exc
    if len(data) != part.stop - part.start:
        raise StoreError(f"s3://{store.bucket}/{part.key}: read {len(data)} bytes of "
                         f"{part.describe()}; re-run")
    yield from read_jsonl(data, part.source, cfg, first_row=part.first_row, whole=False)


def read_jsonl(data: bytes, src: Source, cfg: DatasetConfig, first_row: int = 0,
               whole: bool = True) -> Iterator[Record | Problem]:
    """Lines of ``data``; ``first_row`` is the line number of its first line within the
    object (non-zero for a slice), so rows are numbered as in the whole object.

    Whole object: its rows are held until every line is parsed, so a declared key that no
    record has quarantines the object once (typed: ``missing_field``; the shorthand's
    label/image/id column: ``missing_column``), not per row (a slice of a large object is
    never refused whole: its rows report the value missing)."""
    seen: set[str] = set()
    items = _jsonl_items(data, cfg, first_row, seen)
    if not whole:
        yield from items
        return
    held = list(items)
    if any(isinstance(r, Record) for r in held):
        if cfg.typed:
            require_columns(cfg, seen, "keys")
        else:
            require_shorthand_columns(cfg, seen)
    yield from held


def _jsonl_items(data: bytes, cfg: DatasetConfig, first_row: int, seen: set[str]
                 ) -> Iterator[Record | Problem]:
    lim = limits_for(cfg)
    lines = data.split(b"\n")
    last = len(lines) - 1
    target = cfg.source_column(cfg.target_spec.name)
    for j, line in enumerate(lines):
        if not line.strip():
            continue
        i = first_row + j
        if len(line) > lim.max_row_bytes:
            yield Problem(i, "row_too_large", f"line {i} is {len(line)} bytes; the limit is "
                          f"{lim.max_row_bytes} (limits.max_row_bytes); not parsed", line[:256])
            continue
        if json_depth_exceeds(line, lim.max_json_depth):
            yield Problem(i, "too_deeply_nested", f"line {i} nests objects/arrays more than "
                          f"{lim.max_json_depth} levels deep (limits.max_json_depth); not "
                          f"parsed: {excerpt(line, 60)}", line[:256])
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            cut = j == last and not data.endswith(b"\n")
            rule = "truncated_file" if cut else "unparseable_record"
            why = "the last line is cut off (no newline, invalid JSON)" if cut else \
                f"invalid JSON: {exc}"
            yield Problem(i, rule, why, line[:4096])
            continue
        if not isinstance(obj, dict):
            yield Problem(i, "unparseable_record",
                          f"expected a JSON object, got {type(obj).__name__}", line[:4096])
            continue
        tail = j == last and not data.endswith(b"\n")
        seen.update(obj)
        if cfg.typed:
            values = {n: obj.get(cfg.source_column(n), ABSENT) for n, _ in cfg.field_specs}
            yield Record(i, obj.get(cfg.id_column), obj.get(target, ABSENT), None, line,
                         tail_cut=tail, values=values)
            continue
        yield Record(i, obj.get(cfg.id_column), obj.get(cfg.label_column),
                     obj.get(cfg.image.column), line, tail_cut=tail)


def read_csv(data: bytes, src: Source, cfg: DatasetConfig) -> Iterator[Record | Problem]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable("unreadable_object", f"not UTF-8 text: {exc}") from exc
    lim = limits_for(cfg)
    csv.field_size_limit(lim.max_row_bytes)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise Unreadable("empty_object", "the CSV object is empty (no header, no rows)") \
            from None
    except csv.Error as exc:
        raise Unreadable("unreadable_object", f"bad CSV header: {exc}") from exc
    _no_duplicate_columns(header, "CSV header")
    width = len(header)
    col = {name: j for j, name in enumerate(header)}
    ends_cleanly = text.endswith("\n")
    rows = list(_csv_rows(reader))
    if not rows:
        raise Unreadable("empty_object", "the CSV object has a header "
                         f"({excerpt(','.join(header))}) but no rows")
    if cfg.typed:
        require_columns(cfg, header, "columns")
    else:
        require_shorthand_columns(cfg, header)
    for i, (fields, err) in enumerate(rows):
        raw = ",".join(fields).encode()[:4096] if fields else None
        if err is not None and "field larger than field limit" in err:
            yield Problem(i, "row_too_large", f"a field of record {i} is over "
                          f"{lim.max_row_bytes} bytes (limits.max_row_bytes)", raw)
            continue
        if err is not None or len(fields) != width:
            cut = i == len(rows) - 1 and not ends_cleanly
            why = err or f"expected {width} fields ({','.join(header)}), got {len(fields)}"
            yield Problem(i, "truncated_file" if cut else "unparseable_record", why, raw)
            continue
        def get(name: str, absent: Any = None, fields: list[str] = fields) -> Any:
            return fields[col[name]] if name in col else absent

        if cfg.typed:
            yield Record(i, get(cfg.id_column), get(cfg.source_column(cfg.target_spec.name)),
                         None, raw, tail_cut=i == len(rows) - 1 and not ends_cleanly,
                         values=field_values(cfg, lambda c: get(c, ABSENT)))
            continue
        yield Record(i, get(cfg.id_column), get(cfg.label_column), get(cfg.image.column), raw,
                     tail_cut=i == len(rows) - 1 and not ends_cleanly)


def _no_duplicate_columns(names: list[str], where: str) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise Unreadable("duplicate_column",
                         f"the {where} names column(s) {dupes} more than once "
                         f"({excerpt(','.join(names))}); which one a row means is ambiguous: "
                         "rename or drop the extra column and upload again")


def _csv_rows(reader: Any) -> Iterator[tuple[list[str], str | None]]:
    while True:
        try:
            yield next(reader), None
        except StopIteration:
            return
        except csv.Error as exc:
            yield [], f"CSV syntax error: {exc}"


def read_parquet(data: bytes, src: Source, cfg: DatasetConfig) -> Iterator[Record | Problem]:
    try:
        names = pq.ParquetFile(pa.BufferReader(data)).schema_arrow.names
    except (pa.ArrowInvalid, OSError) as exc:
        rule = "truncated_file" if not data.endswith(b"PAR1") else "unreadable_object"
        raise Unreadable(rule, f"not a readable Parquet file: {exc}") from exc
    _no_duplicate_columns(names, "Parquet schema")
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise Unreadable("unreadable_object", f"not a readable Parquet file: {exc}") from exc
    if table.num_rows == 0:
        raise Unreadable("empty_object", "the Parquet file holds 0 rows")
    if cfg.typed:
        require_columns(cfg, names, "columns")
    else:
        require_shorthand_columns(cfg, names)
    yield from _parquet_records(table, cfg)


def _parquet_records(table: pa.Table, cfg: DatasetConfig, first_row: int = 0
                     ) -> Iterator[Record | Problem]:
    def values(name: str) -> list[Any]:
        """The column's values; all None when the table lacks it (the row checks then
        report the missing id, label or image)."""
        if name in table.column_names:
            return table.column(name).to_pylist()
        return [None] * table.num_rows

    if cfg.typed:
        yield from typed_parquet_records(table, cfg, first_row)
        return
    ids, labels = values(cfg.id_column), values(cfg.label_column)
    images = values(cfg.image.column)
    for i in range(table.num_rows):
        yield Record(first_row + i, ids[i], labels[i], images[i])


def read_parquet_slice(store: Store, part: Part, cfg: DatasetConfig
                        ) -> Iterator[Record | Problem]:
    """Rows of a range of row groups, one row group at a time, read with ranged GETs (the
    footer, then each row group's column chunks)."""
    assert part.stop is not None
    row = part.first_row
    try:
        with pq.ParquetFile(RangedObject(store, part.key, part.source.size, part.etag)) as pf:
            all_names = pf.schema_arrow.names
            dupes = sorted({n for n in all_names if all_names.count(n) > 1})
            if dupes:   # judged as a whole-object read judges it, row by row here
                for i in range(sum(pf.metadata.row_group(g).num_rows
                                   for g in range(part.start, part.stop))):
                    yield Problem(row + i, "duplicate_column",
                                  f"the Parquet schema names column(s) {dupes} more than once")
                return
            names = [n for n in (cfg.id_column, cfg.label_column, cfg.image.column)
                     if n in all_names] if not cfg.typed else \
                [n for n in dict.fromkeys((cfg.id_column, *typed_columns(cfg)))
                 if n in all_names]
            for g in range(part.start, part.stop):
                rows = pf.metadata.row_group(g).num_rows
                try:
                    table = pf.read_row_group(g, columns=names)
                except (pa.ArrowInvalid, OSError) as exc:
                    # The footer parsed (here and when the slice was planned) but this row
                    # group does not decode: quarantine each of its rows, so that the rows
                    # of the other row groups still count exactly once.
                    for i in range(rows):
                        yield Problem(row + i, "unparseable_record",
                                      f"row group {g} ({rows} rows) does not decode: {exc}")
                    row += rows
                    continue
                if table.num_rows != rows:
                    raise StoreError(f"s3://{store.bucket}/{part.key}: row group {g} decoded "
                                     f"to {table.num_rows} rows, the footer says {rows}; re-run")
                yield from _parquet_records(table, cfg, row)
                row += rows
    except ObjectChanged as exc:
        raise _changed(part, exc) from exc


def read_image_file(data: bytes, src: Source, cfg: DatasetConfig
                    ) -> Iterator[Record | Problem]:
    """ImageFolder convention: ``<prefix>/<any>/<class name>/<file>``; id = file stem."""
    parts = src.key.split("/")
    label = parts[-2] if len(parts) >= 2 else None
    stem = posixpath.splitext(parts[-1])[0]
    if cfg.typed:
        yield image_file_record(cfg, stem, label, data)
        return
    yield Record(0, stem, label, data)
