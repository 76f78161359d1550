"""Hostile values and objects (issue 11, items 1, 3, 8): each ends as a quarantine rule,
never as an exception out of the row checks or the readers. The cases are the ones found by
the outside campaign, plus others of the same kinds."""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from shardline.core.json_depth import json_depth_exceeds
from shardline.core.schema import RULES
from shardline.tasks.batch import Source
from shardline.tasks.convert.limits import Limits, excerpt, limits_for
from shardline.tasks.convert.readers import (
    Problem,
    Record,
    Unreadable,
    read_csv,
    read_jsonl,
    read_parquet,
)
from shardline.tasks.convert.rows import (
    Normaliser,
    RowError,
    decode_image,
    label_index,
    normalise_id,
)
from tests.integration.ingest_helpers import dataset_config

CLASSES = ("cat", "dog", "bird")
CFG = dataset_config()


def png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def png_bomb(width: int, height: int) -> bytes:
    """A valid, tiny PNG whose header declares ``width`` x ``height`` (all-zero rows,
    deflated to a few KB): decoding it would allocate width*height bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    comp = zlib.compressobj(9)
    row = b"\0" * (width + 1)
    body = b"".join(comp.compress(row) for _ in range(min(height, 64))) + comp.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + \
        chunk(b"IEND", b"")


def rule_of(fn, *args) -> str:
    with pytest.raises(RowError) as e:
        fn(*args)
    assert e.value.message, "a rule without a reason"
    assert e.value.rule in RULES, e.value.rule
    return e.value.rule


@pytest.mark.parametrize("value,rule", [
    ("²", "unknown_label"),                       # isdigit() true, int() fails
    ("١", "unknown_label"),                       # Arabic-Indic digit one
    (10 ** 400, "unknown_label"),                 # a ~400-digit JSON integer: float overflow
    ("7" * 5000, "label_too_long"),               # a 5,000-digit CSV label: int-string limit
    ("9" * 40, "unknown_label"),
    (float("inf"), "unknown_label"), (float("-inf"), "unknown_label"),
    ({"a": 1}, "unknown_label"), ([1], "unknown_label"),
])
def test_hostile_labels_are_rules(value, rule):
    assert rule_of(label_index, value, CLASSES, "label") == rule


@pytest.mark.parametrize("value,rule", [
    ("x" * 10_000, "id_too_long"), (10 ** 1000, "id_too_long"),
    ({"a": 1}, "bad_id"), ([1, 2], "bad_id"), (float("inf"), "bad_id"),
])
def test_hostile_ids_are_rules(value, rule):
    assert rule_of(normalise_id, value, "id") == rule


def test_decompression_bomb_is_refused_before_decoding():
    bomb = png_bomb(100_000, 100_000)           # 10 gigapixels declared
    assert len(bomb) < 200_000
    assert rule_of(decode_image, bomb, (8, 8, 1), "image") == "image_too_large"
    # under max_pixels but not the configured shape: refused from the header, not decoded
    assert rule_of(decode_image, png_bomb(4000, 4000), (8, 8, 1), "image") == "wrong_shape"
    tiny = Limits(max_pixels=10)
    assert rule_of(decode_image, png(np.zeros((8, 8), np.uint8)), (8, 8, 1), "image",
                   tiny) == "image_too_large"


def test_image_value_over_row_limit_is_not_decoded():
    big = base64.b64encode(b"\0" * 2000).decode()
    assert rule_of(decode_image, big, (8, 8, 1), "image",
                   Limits(max_row_bytes=1000)) == "row_too_large"


def test_normaliser_accepts_a_clean_row():
    ok = Normaliser(CFG).normalise("a", "3", png(np.zeros((8, 8), np.uint8)))
    assert ok[0] == "a" and ok[1] == 3 and len(ok[2]) == 64


def records(it) -> list[Record | Problem]:
    return list(it)


def src(key: str, fmt: str) -> Source:
    return Source(key, "e", 0, fmt)


def test_jsonl_nested_100000_levels_is_one_problem_not_a_recursion_error():
    deep = b'{"id": "d", "label": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    good = json.dumps({"id": "g", "label": 1, "image": "x"}).encode()
    out = records(read_jsonl(deep + b"\n" + good + b"\n", src("a.jsonl", "jsonl"), CFG))
    assert isinstance(out[0], Problem) and out[0].rule == "too_deeply_nested"
    assert out[0].row == 0 and len(out[0].raw or b"") <= 256
    assert isinstance(out[1], Record) and out[1].id == "g"


def test_json_depth_scan_ignores_brackets_in_strings():
    assert not json_depth_exceeds(b'{"a": "' + b"[" * 500 + b'"}', 64)
    assert json_depth_exceeds(b'{"a": ' + b"[" * 65 + b"]" * 65 + b"}", 64)
    assert not json_depth_exceeds(b'{"a": ' + b"[" * 63 + b"]" * 63 + b"}", 64)


def test_jsonl_line_over_row_limit_is_not_parsed():
    cfg_line = b'{"id": "a", "label": 1, "image": "' + b"A" * 5000 + b'"}\n'
    out = records(read_jsonl(cfg_line, src("a.jsonl", "jsonl"), _with_limits(max_row_bytes=1000)))
    assert [p.rule for p in out if isinstance(p, Problem)] == ["row_too_large"]


def _with_limits(**kw):
    """A config object carrying a ``limits`` table, as a dataset config may."""
    class Cfg:
        def __getattr__(self, name):
            return getattr(CFG, name)
    c = Cfg()
    c.limits = Limits(**kw)   # type: ignore[attr-defined]
    return c


def test_limits_come_from_the_config_where_present():
    assert limits_for(CFG) == Limits()
    assert limits_for(_with_limits(max_pixels=5)).max_pixels == 5
    with pytest.raises(ValueError, match="max_pixels"):
        Limits(max_pixels=0)


def test_csv_with_a_duplicate_column_is_refused_like_parquet():
    data = b"id,id,label,image\n1,2,cat,x\n"
    with pytest.raises(Unreadable) as e:
        records(read_csv(data, src("d.csv", "csv"), CFG))
    assert e.value.rule == "duplicate_column" and "'id'" in e.value.message
    table = pa.table([pa.array(["1"]), pa.array(["2"]), pa.array(["cat"]), pa.array(["x"])],
                     names=["id", "id", "label", "image"])
    buf = io.BytesIO()
    pq.write_table(table, buf)
    with pytest.raises(Unreadable) as p:
        records(read_parquet(buf.getvalue(), src("d.parquet", "parquet"), CFG))
    assert p.value.rule == "duplicate_column"


@pytest.mark.parametrize("data", [b"id,label,image\n", b"id,label,image", b""])
def test_empty_csv_is_an_empty_object(data):
    with pytest.raises(Unreadable) as e:
        records(read_csv(data, src("e.csv", "csv"), CFG))
    assert e.value.rule == "empty_object"


def test_empty_parquet_is_an_empty_object():
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([], pa.string())}), buf)
    with pytest.raises(Unreadable) as e:
        records(read_parquet(buf.getvalue(), src("e.parquet", "parquet"), CFG))
    assert e.value.rule == "empty_object"


def test_csv_field_over_row_limit_is_a_row_problem():
    data = b"id,label,image\n1,cat," + b"A" * 3000 + b"\n2,dog,x\n"
    out = records(read_csv(data, src("b.csv", "csv"), _with_limits(max_row_bytes=1000)))
    assert out[0].rule == "row_too_large"                        # type: ignore[union-attr]
    assert isinstance(out[-1], Record) and out[-1].id == "2"


def test_excerpt_is_short_and_printable():
    assert excerpt("7" * 5000, 10).startswith("7777777777...")
    assert "5000" in excerpt("7" * 5000, 10)
    assert excerpt(10 ** 5000, 20).startswith("<int")           # repr() itself raises
    assert excerpt(b"\x00\x01abc").isprintable()
    assert excerpt("a\nb\x1b").isprintable()


def test_only_png_and_jpeg_are_decoded():
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(buf, format="TIFF")
    assert rule_of(decode_image, buf.getvalue(), (8, 8, 1), "image") == "undecodable_image"
    jpg = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(jpg, format="JPEG")
    assert len(decode_image(jpg.getvalue(), (8, 8, 1), "image")) == 64


def test_limits_are_read_from_the_dataset_config():
    cfg = dataset_config(limits={"max_pixels": 100, "max_json_depth": 8})
    lim = limits_for(cfg)
    assert (lim.max_pixels, lim.max_json_depth) == (100, 8)
    assert lim.max_row_bytes == Limits().max_row_bytes
    from shardline.core.config import parse_config
    from shardline.core.errors import ConfigError
    with pytest.raises(ConfigError, match="max_pixels"):
        parse_config({"dataset": {"name": "d", "incoming": "in/", "classes": ["a"],
                                  "limits": {"max_pixels": 0}}})
