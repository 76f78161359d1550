"""Readers with typed fields: each field's column is read; a declared column that the
whole source lacks refuses the source once (missing_field, naming the field and the columns
found) before any of its rows is handed on, so no row is counted twice."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from shardline.core.config import parse_config
from shardline.tasks.batch import Source
from shardline.tasks.convert.readers import Record, Unreadable, read_csv, read_jsonl, read_parquet
from shardline.tasks.convert.rows import RowError
from shardline.tasks.convert.typed_readers import read_npy
from shardline.tasks.convert.typed_rows import TypedNormaliser
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


def test_npy_objects_one_sample_or_stacked():
    cfg = parse_config({"dataset": {"name": "n", "incoming": "i/", "classes": ["a", "b"],
                                    "fields": {"x": {"kind": "tensor", "dtype": "int16",
                                                     "shape": [3]}}}}).dataset
    src = Source(key="i/b/s1.npy", etag="e", size=1, format="npy")

    def npy(arr: np.ndarray) -> bytes:
        buf = io.BytesIO()
        np.save(buf, arr)
        return buf.getvalue()

    one = list(read_npy(npy(np.arange(3, dtype=np.int16)), src, cfg))
    assert [(r.id, r.label, r.values["x"].tolist()) for r in one] == [("s1", "b", [0, 1, 2])]
    many = list(read_npy(npy(np.zeros((4, 3), np.int16)), src, cfg))
    assert [r.id for r in many] == [f"s1-{i:06d}" for i in range(4)]
    with pytest.raises(Unreadable, match=r"declares \[3\] per sample"):
        list(read_npy(npy(np.zeros((4, 2), np.int16)), src, cfg))


def test_mask_target_from_png_and_lists():
    cfg = parse_config({"dataset": {"name": "m", "incoming": "i/", "classes": ["bg", "a", "b"],
                                    "fields": {"img": {"kind": "image", "shape": [4, 4, 1]}},
                                    "target": {"kind": "mask", "shape": [4, 4]}}}).dataset
    norm = TypedNormaliser(cfg)
    mask = np.array([[0, 1, 2, 1]] * 4, np.uint8)
    png = io.BytesIO()
    Image.fromarray(mask).save(png, "PNG")
    img = np.zeros((4, 4, 1), np.uint8)
    for value in (png.getvalue(), mask.tolist(), mask):
        row = norm.normalise("r", value, {"img": img})
        assert row.target.dtype == np.uint8 and (row.target == mask).all()
    with pytest.raises(RowError, match="outside 0..2") as e:
        norm.normalise("r", (mask * 2).tolist(), {"img": img})
    assert e.value.rule == "unknown_label"
