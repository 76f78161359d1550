"""The per-field GX suite: derived from the declaration, it passes on data that keeps it and
fails, naming the field's expectation, on data that does not (a fault injected past the row
checks, as a conversion bug would)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

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


def _run(frame) -> dict[str, bool]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    ctx = gx.get_context(mode="ephemeral")
    suite = ctx.suites.add(gx.ExpectationSuite(name="v.fields"))
    for e in field_expectations(CFG):
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
