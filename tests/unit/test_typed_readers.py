"""Readers with typed fields: each field's column is read; a declared column that the
whole source lacks refuses the source once (missing_field, naming the field and the columns
found) before any of its rows is handed on, so no row is counted twice."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardline.core.config import parse_config
from shardline.tasks.batch import Source
from shardline.tasks.convert.readers import Record, Unreadable, read_csv, read_jsonl, read_parquet
from shardline.tasks.convert.values import ABSENT

CFG = parse_config({"dataset": {"name": "t", "incoming": "i/", "fields": {
    "x": {"kind": "tensor", "dtype": "float32", "shape": [2]},
    "note": {"kind": "scalar", "dtype": "string", "optional": True}},
    "target": {"kind": "regression", "column": "y"}}}).dataset
SRC = Source(key="i/a", etag="e", size=1, format="jsonl")


def _jsonl(*rows: dict) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def test_jsonl_rows_carry_field_values():
    out = list(read_jsonl(_jsonl({"id": "a", "x": [1, 2], "y": 3.0}, {"id": "b", "x": [0, 0],
                                                                       "y": 1, "note": "n"}),
                          SRC, CFG))
    assert all(isinstance(r, Record) for r in out)
    assert out[0].values == {"x": [1, 2], "note": ABSENT} and out[0].label == 3.0
    assert out[1].values["note"] == "n"


@pytest.mark.parametrize("body,words", [
    (_jsonl({"id": "a", "y": 1.0}, {"id": "b", "y": 2.0}, "not an object"),
     ["'x'", "keys found: id, y"]),
    (_jsonl({"id": "a", "x": [1, 2]}), ["target 'label'", "column 'y'"]),
])
def test_jsonl_without_a_declared_key_is_refused_once(body, words):
    with pytest.raises(Unreadable) as e:
        list(read_jsonl(body, SRC, CFG))
    assert e.value.rule == "missing_field"
    for w in words:
        assert w in e.value.message


def test_a_slice_is_never_refused_whole():
    out = list(read_jsonl(_jsonl({"id": "a", "y": 1.0}), SRC, CFG, first_row=10, whole=False))
    assert [r.values["x"] for r in out] == [ABSENT]


def test_csv_and_parquet_without_a_declared_column():
    with pytest.raises(Unreadable, match="columns found: id, y"):
        list(read_csv(b"id,y\na,1\n", SRC, CFG))
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": ["a"], "x": [[1.0, 2.0]]}), buf)
    with pytest.raises(Unreadable, match="column 'y'"):
        list(read_parquet(buf.getvalue(), SRC, CFG))
