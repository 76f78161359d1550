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


def test_parquet_variable_lists_fill_fixed_shape_tensors():
    """A Parquet ``list<>`` column (variable length, nested for 2-D) fills a fixed-shape
    tensor field; a row of another length or a null inside is that row's quarantine, naming
    the field, the shapes and the fix."""
    cfg = parse_config({"dataset": {"name": "p", "incoming": "i/", "fields": {
        "x": {"kind": "tensor", "dtype": "float32", "shape": [2]},
        "m": {"kind": "tensor", "dtype": "int16", "shape": [2, 2]}},
        "target": {"kind": "regression", "column": "y"}}}).dataset
    good_m = [[-32768, 7], [0, 32767]]
    table = pa.table({
        "id": ["a", "b", "c", "d", "e", "f"],
        "x": pa.array([[1.5, -2.25], [1.0], [1.0, 2.0, 3.0], None, [1.0, None], [0.5, 0.5]],
                      pa.list_(pa.float64())),
        "m": pa.array([good_m, good_m, good_m, good_m, good_m, [[1, 2], [3]]],
                      pa.list_(pa.list_(pa.int64()))),
        "y": [0.5, 1.0, 2.0, 3.0, 4.0, 5.0]})
    assert pa.types.is_list(table.schema.field("x").type)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    src = Source(key="i/t.parquet", etag="e", size=1, format="parquet")
    norm = TypedNormaliser(cfg)
    out: dict[str, object] = {}
    for rec in read_parquet(buf.getvalue(), src, cfg):
        assert isinstance(rec, Record)
        try:
            out[rec.id] = norm.normalise(rec.id, rec.label, rec.values)
        except RowError as e:
            out[rec.id] = (e.rule, e.message)
    a = out["a"]
    assert not isinstance(a, tuple)
    assert a.values[0].dtype == np.float32 and a.values[0].tolist() == [1.5, -2.25]
    assert a.values[1].dtype == np.int16 and a.values[1].tolist() == good_m
    assert a.target == np.float32(0.5)
    assert out["b"] == ("wrong_shape", "field 'x' is [1], expected [2]")
    assert out["c"] == ("wrong_shape", "field 'x' is [3], expected [2]")
    rule, msg = out["d"]
    assert rule == "missing_value" and "'x'" in msg and "optional = true" in msg
    rule, msg = out["e"]
    assert rule == "wrong_dtype" and "'x'" in msg and "float32" in msg
    rule, msg = out["f"]
    assert rule == "wrong_shape" and "'m'" in msg and "[2, 2]" in msg
