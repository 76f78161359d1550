"""Typed fields in a dataset TOML: declaration, errors naming file/table/key, dataset_info
and the Arrow schema per field (the shorthand's schema and fingerprint unchanged)."""

import base64
import json
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from shardline.api.tensors import column_array
from shardline.core.config import config_schema, config_to_dict, load_config, parse_config
from shardline.core.errors import ConfigError
from shardline.core.field_arrow import storage_dtype
from shardline.core.field_spec import TENSOR_DTYPES
from shardline.core.fields import dataset_info
from shardline.core.schema import data_schema, fingerprint
from shardline.tasks.convert.columns import typed_columns
from shardline.tasks.convert.typed_rows import TypedNormaliser
from shardline.trainer.columns import layout_for

ROOT = Path(__file__).resolve().parents[2]
TYPED = """
[dataset]
name = "s2"
incoming = "incoming/s2/"
classes = ["water", "forest", "urban"]

[dataset.fields.bands]
kind = "tensor"
dtype = "float32"
shape = [13, 32, 32]

[dataset.fields.rgb]
kind = "image"
dtype = "uint16"
shape = [32, 32, 3]

[dataset.fields.elevation]
kind = "scalar"
dtype = "float64"
optional = true
min = -500.0
max = 9000.0

[dataset.fields.biome]
kind = "scalar"
dtype = "string"
vocabulary = ["arid", "temperate"]

[dataset.target]
kind = "multilabel"
column = "tags"
"""


def _typed(tmp_path: Path, text: str = TYPED):
    p = tmp_path / "s2.toml"
    p.write_text(text)
    return load_config(p).dataset


def test_shorthand_keeps_its_exact_schema():
    cfg = load_config(ROOT / "examples/digits.toml").dataset
    assert not cfg.typed
    schema = data_schema(cfg)
    assert schema.names == ["id", "label", "image", "source_key", "source_row"]
    assert schema.field("image").type == pa.binary(64)
    assert set(schema.metadata) == {b"shardline.shape", b"shardline.classes",
                                    b"shardline.dataset"}
    # the shorthand's document has no new keys (manifests and checkpoints unchanged)
    assert "fields" not in config_to_dict(cfg) and "target" not in config_to_dict(cfg)
    info = dataset_info(cfg)
    assert [(f.name, f.kind, f.dtype, f.shape) for f in info.fields] == \
        [("image", "image", "uint8", (1, 8, 8))]
    assert (info.target.name, info.target.kind, info.target.num_outputs) == ("label", "class", 10)


def test_typed_fields_declare_columns_in_order(tmp_path):
    cfg = _typed(tmp_path)
    schema = data_schema(cfg)
    assert schema.names == ["id", "label", "bands", "rgb", "elevation", "biome", "source_key",
                            "source_row"]
    bands = schema.field("bands").type
    assert isinstance(bands, pa.FixedShapeTensorType)
    assert (bands.value_type, bands.shape) == (pa.float32(), [13, 32, 32])
    assert schema.field("rgb").type.value_type == pa.uint16()
    assert schema.field("elevation").nullable and not schema.field("bands").nullable
    assert schema.field("biome").type == pa.dictionary(pa.int16(), pa.string())
    assert schema.field("label").type.shape == [3]
    decl = json.loads(schema.metadata[b"shardline.fields"])
    assert decl["target"] == {"name": "label", "kind": "multilabel", "dtype": "uint8",
                              "shape": [3]}
    assert cfg.source_column("label") == "tags" and cfg.source_column("bands") == "bands"
    info = dataset_info(cfg)
    assert info.field("rgb").shape == (3, 32, 32) and info.field("rgb").dtype == "uint16"
    assert info.field("bands").shape == (13, 32, 32)
    assert info.field("biome").vocabulary == ("arid", "temperate")
    assert info.target.shape == (3,) and info.target.num_outputs == 3


# NaN with a payload (and negative), the infinities, -0.0, the smallest subnormal: a
# conversion through float64 or a canonicalising copy would change these bits
_SPECIAL = {"float16": [0x7E01, 0xFE7F, 0x7C00, 0xFC00, 0x8000, 0x0001],
            "float32": [0x7FC00123, 0xFFA00001, 0x7F800000, 0xFF800000, 0x80000000, 0x1],
            "float64": [0x7FF8000000000123, 0xFFF4000000000001, 0x7FF0000000000000,
                        0xFFF0000000000000, 0x8000000000000000, 0x1]}


def _extremes(dtype: str, shape: tuple[int, ...], n: int) -> np.ndarray:
    """``n`` samples of ``dtype`` that hold the dtype's extreme and special values."""
    rng = np.random.default_rng(1)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, (n, *shape)).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, (n, *shape), dtype=dt, endpoint=True)
        x.reshape(-1)[:2] = (info.min, info.max)
        return x
    x = (rng.standard_normal((n, *shape)) * 100).astype(dt)
    special = np.array(_SPECIAL[dtype], dtype=f"u{dt.itemsize}").view(dt)
    x.reshape(-1)[:len(special)] = special
    x.reshape(-1)[-1] = np.finfo(dt).max
    return x


@pytest.mark.parametrize("dtype", TENSOR_DTYPES)
def test_a_tensor_column_round_trips_bit_identical(dtype):
    """Every declared tensor dtype: a value sent as an ndarray (Zarr, NPY) or as raw bytes in
    base64 (JSONL, CSV) passes the row checks, is written to an IPC shard in the published
    type and read back (pyarrow, and the loader's/notebook's zero-copy view) with the same
    bits: NaN payloads, infinities, -0.0, subnormals and each integer type's extremes."""
    shape = (3, 4)
    cfg = parse_config({"dataset": {"name": "rt", "incoming": "i/", "classes": ["a"], "fields": {
        "t": {"kind": "tensor", "dtype": dtype, "shape": list(shape), "allow_nan": True}}}}
    ).dataset
    xs = _extremes(dtype, shape, 5)
    norm = TypedNormaliser(cfg)
    raw = [base64.b64encode(x.astype(x.dtype.newbyteorder("<")).tobytes()).decode()
           for x in xs]
    rows = [norm.normalise(f"r{i}", "a", {"t": v})
            for i, v in enumerate([*xs, *raw])]
    schema = data_schema(cfg)
    table = pa.Table.from_arrays([pa.array([r.id for r in rows]), *typed_columns(cfg, rows),
                                  pa.array(["k"] * len(rows)),
                                  pa.array(range(len(rows)), pa.int64())], schema=schema)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as w:
        w.write_table(table)
    with ipc.open_file(sink.getvalue()) as f:
        back = f.read_all()
    assert back.schema.field("t").type == schema.field("t").type
    stored = storage_dtype(dtype)
    want = np.concatenate([xs, xs]).astype(stored)        # bool as its uint8 0/1
    arrow = back.column("t").combine_chunks().to_numpy_ndarray()
    assert arrow.dtype == stored and arrow.shape == want.shape
    assert arrow.tobytes() == want.tobytes()
    (col,) = [c for c in layout_for(dataset_info(cfg)).columns if c.name == "t"]
    view = column_array(back, col)
    assert view.shape == want.shape and view.tobytes() == want.tobytes()
    assert view.dtype == np.dtype(dtype)       # served in the declared dtype (bool as bool)


def test_regression_needs_no_classes_and_changes_the_fingerprint():
    doc = {"dataset": {"name": "diab", "incoming": "in/",
                       "fields": {"x": {"kind": "tensor", "dtype": "float64", "shape": [10]}},
                       "target": {"kind": "regression", "name": "progression"}}}
    cfg = parse_config(doc).dataset
    schema = data_schema(cfg)
    assert schema.field("progression").type == pa.float32()
    assert dataset_info(cfg).target.classes == ()
    doc["dataset"]["target"]["dtype"] = "float64"
    assert fingerprint(data_schema(parse_config(doc).dataset)) != fingerprint(schema)


@pytest.mark.parametrize("patch,where,match", [
    ({"fields": {"b": {"kind": "tensor", "dtype": "float32"}}}, "[dataset.fields.b]",
     "fixed shape"),
    ({"fields": {"b": {"kind": "tensor", "dtype": "complex64", "shape": [2]}}},
     "[dataset.fields.b] dtype", "must be"),
    ({"fields": {"b": {"kind": "tensor", "dtype": "float32", "shape": [2], "colour": 1}}},
     "[dataset.fields.b] colour", "known keys: kind, dtype"),
    ({"fields": {"b": {"kind": "image", "dtype": "float32", "shape": [4, 4, 13]}}},
     "[dataset.fields.b]", "uint8"),
    ({"fields": {"b": {"kind": "scalar", "dtype": "int64", "shape": [3]}}},
     "[dataset.fields.b]", "declare a tensor"),
    ({"fields": {"b": {"kind": "scalar", "dtype": "int64", "vocabulary": ["x"]}}},
     "[dataset.fields.b]", "string scalars"),
    ({"fields": {"source_row": {"kind": "scalar", "dtype": "int64"}}}, "[dataset]", "clash"),
    ({"target": {"kind": "mask"}}, "[dataset.target]", "[H, W]"),
    ({"target": {"kind": "regression", "min": 3.0, "max": 1.0}}, "[dataset.target]", "above"),
    ({"classes": [], "target": {"kind": "multilabel"}}, "[dataset]", "needs classes"),
    ({"target": {"kind": "regression"}, "shards": {"partition_by": ["batch", "label"]}},
     "[dataset]", "class target"),
    ({"fields": {"b": {"kind": "scalar", "dtype": "int64"}}, "image": {"shape": [8, 8, 1]}},
     "[dataset.image]", "shorthand"),
])
def test_bad_declarations_name_file_table_and_key(patch, where, match):
    doc = {"dataset": {"name": "x", "incoming": "in/", "classes": ["a", "b"], **patch}}
    with pytest.raises(ConfigError) as e:
        parse_config(doc, "x.toml")
    msg = str(e.value)
    assert msg.startswith("x.toml: ") and where in msg and match in msg, msg


def test_any_channel_count_for_a_typed_image():
    doc = {"dataset": {"name": "x", "incoming": "in/", "classes": ["a"],
                       "fields": {"ms": {"kind": "image", "shape": [16, 16, 13]}}}}
    cfg = parse_config(doc).dataset
    assert data_schema(cfg).field("ms").type.shape == [16, 16, 13]
    assert dataset_info(cfg).field("ms").shape == (13, 16, 16)


def test_config_schema_covers_fields_and_target():
    text = json.dumps(config_schema())
    for key in ("FieldSpec", "TargetSpec", "missing_chunks", "sample_axis", "multilabel",
                "vocabulary"):
        assert key in text


def test_examples_parse():
    for p in sorted((ROOT / "examples").glob("*.toml")):
        tomllib.loads(p.read_text())
        load_config(p)


@pytest.mark.parametrize("example,words", [
    ("sentinel", "fields: bands tensor float32[13, 32, 32]; target label (class, 4 classes)"),
    ("diabetes", "fields: features tensor float64[10]; target progression (regression, "
                 "0 classes), model mlp"),
    ("tags", "fields: image image uint8[16, 16, 3]; target label (multilabel, 3 classes)"),
])
def test_config_check_cli_on_the_typed_examples(example, words, tmp_path):
    """`shardline config check` on each typed example prints its fields and target; on a
    broken declaration it fails with one line naming the table and the fix; `config schema`
    holds the field and target tables."""
    from typer.testing import CliRunner

    from shardline.cli.main import app

    runner = CliRunner()
    path = ROOT / "examples" / f"{example}.toml"
    r = runner.invoke(app, ["config", "check", "-c", str(path)])
    assert r.exit_code == 0, r.output
    assert f"{path}: valid (dataset {example}," in r.output and words in r.output, r.output
    broken = tmp_path / f"{example}.toml"
    broken.write_text(path.read_text().replace("[dataset.target]", '''
[dataset.fields.extra]
kind = "tensor"
dtype = "float32"

[dataset.target]''', 1))
    r = runner.invoke(app, ["config", "check", "-c", str(broken)])
    assert r.exit_code == 1, r.output
    assert r.output == f"error: {broken}: [dataset.fields.extra] a tensor needs a fixed shape " \
        "(e.g. [13, 32, 32]); a single value is a scalar field\n"
    r = runner.invoke(app, ["config", "schema"])
    assert r.exit_code == 0 and "FieldSpec" in r.output and "TargetSpec" in r.output
