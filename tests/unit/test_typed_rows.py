"""Typed row checks: every encoding a field accepts gives the same stored value, and every
rule a declaration implies is a RowError naming the field, the rule and the value."""

from __future__ import annotations

import base64
import io

import numpy as np
import pyarrow as pa
import pytest
import tifffile
from PIL import Image

from shardline.core.config import parse_config
from shardline.core.field_stats import mean_std, merge_stats
from shardline.core.schema import RULES, data_schema
from shardline.tasks.convert.columns import table_stats, typed_columns
from shardline.tasks.convert.rows import RowError
from shardline.tasks.convert.typed_rows import TypedNormaliser

DOC = {"dataset": {"name": "s2", "incoming": "i/", "classes": ["a", "b", "c"], "fields": {
    "bands": {"kind": "tensor", "dtype": "float32", "shape": [3, 4, 4]},
    "ms": {"kind": "image", "dtype": "uint16", "shape": [4, 4, 5]},
    "rgb": {"kind": "image", "shape": [4, 4, 3]},
    "elev": {"kind": "scalar", "dtype": "float32", "optional": True, "min": 0.0},
    "biome": {"kind": "scalar", "dtype": "string", "vocabulary": ["x", "y"]}},
    "target": {"kind": "multilabel"}}}
CFG = parse_config(DOC).dataset
RNG = np.random.default_rng(0)
BANDS = RNG.standard_normal((3, 4, 4)).astype(np.float32)
MS = RNG.integers(0, 65535, (4, 4, 5), dtype=np.uint16)
RGB = RNG.integers(0, 255, (4, 4, 3), dtype=np.uint8)


def _enc(save) -> bytes:
    buf = io.BytesIO()
    save(buf)
    return buf.getvalue()


TIFF_HWC = _enc(lambda b: tifffile.imwrite(b, MS, photometric="minisblack",
                                           planarconfig="contig"))
TIFF_CHW = _enc(lambda b: tifffile.imwrite(b, np.moveaxis(MS, 2, 0)))
WEBP = _enc(lambda b: Image.fromarray(RGB).save(b, "WEBP", lossless=True))
PNG = _enc(lambda b: Image.fromarray(RGB).save(b, "PNG"))
NPY = _enc(lambda b: np.save(b, BANDS))


def _good(**patch):
    vals = {"bands": BANDS, "ms": MS, "rgb": RGB, "elev": 1.0, "biome": "x"}
    vals.update(patch)
    return {k: v for k, v in vals.items() if v is not ...}


@pytest.mark.parametrize("bands", [BANDS, BANDS.tolist(), base64.b64encode(NPY).decode(),
                                   base64.b64encode(BANDS.tobytes()).decode()])
@pytest.mark.parametrize("ms", [MS, TIFF_HWC, TIFF_CHW, base64.b64encode(TIFF_CHW).decode()])
def test_every_encoding_gives_the_same_values(bands, ms):
    row = TypedNormaliser(CFG).normalise("r", ["a", "c"], _good(bands=bands, ms=ms, rgb=WEBP))
    assert row.values[0].tobytes() == BANDS.tobytes()
    assert row.values[1].dtype == np.uint16 and (row.values[1] == MS).all()
    assert (row.values[2] == RGB).all()
    assert row.target.tolist() == [1, 0, 1]


@pytest.mark.parametrize("patch,label,rule,words", [
    ({"bands": [[1.0]]}, [], "wrong_shape", ["'bands'", "[3, 4, 4]"]),
    ({"bands": (BANDS * np.nan).tolist()}, [], "not_finite", ["'bands'", "allow_nan"]),
    ({"bands": BANDS.astype(np.float64)}, [], "wrong_dtype", ["'bands'", "float64"]),
    ({"bands": "!!"}, [], "undecodable_value", ["'bands'", "base64"]),
    ({"bands": ...}, [], "missing_value", ["'bands'", "optional"]),
    ({"elev": -1.0}, [], "out_of_range", ["'elev'", "-1", "min/max"]),
    ({"biome": "z"}, [], "unknown_value", ["'biome'", "vocabulary"]),
    ({"rgb": TIFF_HWC}, [], "wrong_dtype", ["'rgb'", "uint16"]),
    ({"rgb": _enc(lambda b: Image.fromarray(RGB[:2]).save(b, "PNG"))}, [], "wrong_shape",
     ["'rgb'", "2 x 4"]),
    ({"ms": PNG}, [], "wrong_dtype", ["'ms'", "uint8", "uint16"]),
    ({"rgb": b"not an image"}, [], "undecodable_image", ["'rgb'"]),
    ({}, ["a", "purple"], "unknown_label", ["purple", "column 'label'", "dataset.classes"]),
    ({}, None, "missing_label", ["'label'"]),
])
def test_each_rule_names_field_and_fix(patch, label, rule, words):
    with pytest.raises(RowError) as e:
        TypedNormaliser(CFG).normalise("r", label, _good(**patch))
    assert e.value.rule == rule and rule in RULES
    for w in words:
        assert w in e.value.message, e.value.message


def test_columns_and_statistics_merge_by_addition():
    norm = TypedNormaliser(CFG)
    rows = [norm.normalise(f"r{i}", ["b"] if i % 2 else ["a", "b"],
                           _good(bands=BANDS + i, elev=None if i == 2 else float(i)))
            for i in range(4)]
    cols = typed_columns(CFG, rows)
    table = pa.Table.from_arrays([pa.array([r.id for r in rows]), *cols,
                                  pa.array(["k"] * 4), pa.array(range(4), pa.int64())],
                                 schema=data_schema(CFG))
    assert table.column("elev").null_count == 1
    assert table.column("biome").combine_chunks().dictionary.to_pylist() == ["x", "y"]
    whole = table_stats(CFG, table)
    halves = merge_stats(table_stats(CFG, table.slice(0, 2)), table_stats(CFG, table.slice(2)))
    assert whole["label"]["label_counts"] == {"0": 2, "1": 4} == halves["label"]["label_counts"]
    assert whole["elev"]["count"] == [3] and whole["elev"]["min"] == [0.0]
    stacked = np.stack([BANDS + i for i in range(4)])
    mean, std = mean_std(halves["bands"])
    assert np.allclose(mean, stacked.mean(axis=(0, 2, 3)))
    assert np.allclose(std, stacked.std(axis=(0, 2, 3)), atol=1e-5)
    assert len(whole["ms"]["count"]) == 5       # per channel: an image's C
