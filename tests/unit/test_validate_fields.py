"""The per-field GX suite: derived from the declaration, it passes on data that keeps it and
fails, naming the field's expectation, on data that does not (a fault injected past the row
checks, as a conversion bug would)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from shardline.core.config import parse_config
from shardline.core.schema import data_schema
from shardline.tasks.convert.columns import typed_columns
from shardline.tasks.convert.typed_rows import TypedNormaliser
from shardline.tasks.validate_fields import field_expectations, summarize

CFG = parse_config({"dataset": {"name": "v", "incoming": "i/", "fields": {
    "x": {"kind": "tensor", "dtype": "float32", "shape": [2, 3], "min": -1.0, "max": 1.0},
    "w": {"kind": "scalar", "dtype": "float64", "optional": True}},
    "target": {"kind": "regression", "name": "y"}}}).dataset


def _table(xs: list[np.ndarray]) -> pa.Table:
    norm = TypedNormaliser(CFG)
    rows = [norm.normalise(f"r{i}", float(i), {"x": x, "w": None if i % 2 else 0.5})
            for i, x in enumerate(xs)]
    cols = typed_columns(CFG, rows)
    return pa.Table.from_arrays([pa.array([r.id for r in rows]), *cols,
                                 pa.array(["k"] * len(rows)),
                                 pa.array(range(len(rows)), pa.int64())],
                                schema=data_schema(CFG))


def _run(frame, cfg=CFG) -> dict[str, bool]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    ctx = gx.get_context(mode="ephemeral")
    suite = ctx.suites.add(gx.ExpectationSuite(name="v.fields"))
    for e in field_expectations(cfg):
        suite.add_expectation(e)
    bd = ctx.data_sources.add_pandas("p").add_dataframe_asset(name="a") \
        .add_batch_definition_whole_dataframe("all")
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name="c", data=bd, suite=suite))
    out = vd.run(batch_parameters={"dataframe": frame})
    return {f"{r.expectation_config.type}({r.expectation_config.kwargs['column']})": r.success
            for r in out.results}


def test_suite_passes_on_good_data_and_names_the_broken_field():
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1, 1, (2, 3)).astype(np.float32) for _ in range(6)]
    table = _table(xs)
    frame = summarize(CFG, table)
    assert frame["w.null"].tolist() == [False, True] * 3
    assert np.allclose(frame["x.max"], [x.max() for x in xs])
    ok = _run(frame)
    assert all(ok.values()) and "expect_column_values_to_be_between(x.nonfinite)" in ok
    # past the row checks: a NaN and an out-of-range value written into the shard
    bad = table.column("x").combine_chunks().storage.flatten().to_numpy().copy()
    bad[0], bad[7] = np.nan, 5.0
    col = pa.ExtensionArray.from_storage(table.schema.field("x").type,
                                         pa.FixedSizeListArray.from_arrays(pa.array(bad), 6))
    broken = table.set_column(table.schema.get_field_index("x"), table.schema.field("x"), col)
    res = _run(summarize(CFG, broken))
    failed = sorted(k for k, v in res.items() if not v)
    assert failed == ["expect_column_values_to_be_between(x.max)",
                      "expect_column_values_to_be_between(x.nonfinite)"]


SEG = parse_config({"dataset": {"name": "seg", "incoming": "i/", "classes": ["bg", "a", "b"],
                                "fields": {"img": {"kind": "image", "shape": [2, 3, 1]}},
                                "target": {"kind": "mask", "name": "mask",
                                           "shape": [2, 3]}}}).dataset
TAGS = parse_config({"dataset": {"name": "tags", "incoming": "i/", "classes": ["r", "g", "b"],
                                 "fields": {"img": {"kind": "image", "shape": [2, 3, 1]}},
                                 "target": {"kind": "multilabel"}}}).dataset
BIOME = parse_config({"dataset": {"name": "cls", "incoming": "i/", "classes": ["a", "b", "c"],
                                  "fields": {"biome": {"kind": "scalar", "dtype": "string",
                                                       "vocabulary": ["x", "y"]}}}}).dataset
IMG = np.zeros((2, 3, 1), np.uint8)


def _tensor_with(col: pa.Array, at: int, v: int) -> pa.Array:
    flat = col.storage.flatten().to_numpy().copy()
    flat[at] = v
    return pa.ExtensionArray.from_storage(col.type, pa.FixedSizeListArray.from_arrays(
        pa.array(flat), col.storage.type.list_size))


def _label_with(col: pa.Array, at: int, v: int) -> pa.Array:
    vals = col.to_numpy().copy()
    vals[at] = v
    return pa.array(vals, col.type)


def _biome_with(col: pa.Array, at: int, v: int) -> pa.Array:
    idx = col.indices.to_numpy().copy()
    idx[at] = v
    return pa.DictionaryArray.from_arrays(pa.array(idx, pa.int16()),
                                          pa.array(["x", "y", "z"]))


@pytest.mark.parametrize("cfg,labels,values,column,inject,failed", [
    # a mask pixel past the classes (3 of bg/a/b) -> the mask's max
    (SEG, [[[0, 1, 2], [2, 1, 0]], [[1, 1, 1], [0, 0, 2]]], [{"img": IMG}] * 2, "mask",
     lambda c: _tensor_with(c, 7, 3), ["expect_column_values_to_be_between(mask.max)"]),
    # a multi-label entry other than 0/1 -> the label's max
    (TAGS, [["r"], ["g", "b"]], [{"img": IMG}] * 2, "label", lambda c: _tensor_with(c, 1, 2),
     ["expect_column_values_to_be_between(label.max)"]),
    # a class index past the classes -> the label's max; a string outside the vocabulary
    (BIOME, ["a", "c"], [{"biome": "x"}, {"biome": "y"}], "label",
     lambda c: _label_with(c, 0, 3), ["expect_column_values_to_be_between(label.max)"]),
    (BIOME, ["a", "c"], [{"biome": "x"}, {"biome": "y"}], "biome",
     lambda c: _biome_with(c, 1, 2), ["expect_column_values_to_be_in_set(biome)"]),
], ids=["mask", "multilabel", "class", "vocabulary"])
def test_targets_and_vocabularies_fail_on_the_field_they_broke(cfg, labels, values, column,
                                                               inject, failed):
    """Class, multi-label and mask targets and a vocabulary: the suite passes on what the
    row checks let through and fails, naming that field's expectation only, on a value
    written past them."""
    norm = TypedNormaliser(cfg)
    rows = [norm.normalise(f"r{i}", lab, v) for i, (lab, v) in enumerate(zip(labels, values,
                                                                              strict=True))]
    table = pa.Table.from_arrays([pa.array([r.id for r in rows]), *typed_columns(cfg, rows),
                                  pa.array(["k"] * len(rows)),
                                  pa.array(range(len(rows)), pa.int64())],
                                 schema=data_schema(cfg))
    ok = _run(summarize(cfg, table), cfg)
    assert all(ok.values()) and set(failed) <= set(ok), ok
    i = table.schema.get_field_index(column)
    broken = table.set_column(i, table.schema.field(column),
                              inject(table.column(column).combine_chunks()))
    res = _run(summarize(cfg, broken), cfg)
    assert sorted(k for k, v in res.items() if not v) == failed
