"""Typed fields end to end: the examples (sentinel Zarr, diabetes Parquet, tags JSONL) and a
segmentation mask target ingest through detect -> convert (Spark) -> validate
(great-expectations) -> publish; every input row is published or quarantined exactly once,
and the published tensors are bit-identical to the input (NaN payloads included), read back
with the notebook API (``shardline.open_dataset``) or with pyarrow from the published
shards. The run's validation report lists the per-field expectations of every declared
field and the target.

Real parts: a moto S3 server over HTTP, a Spark Connect server, great-expectations, Arrow.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image
from pydantic import TypeAdapter

import shardline
from shardline.core.config import DatasetConfig, load_config, parse_config
from shardline.core.errors import SchemaChange
from shardline.core.field_spec import FieldSpec
from shardline.core.fields import dataset_info
from shardline.core.manifest import latest_manifest
from shardline.core.schema import report_key
from shardline.core.store import ObjectStore
from shardline.infra import example_data as ex
from tests.integration.ingest_helpers import (
    assert_exactly_once,
    published_rows,
    quarantined_rows,
    run_pipeline,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def parse_field(d: dict) -> FieldSpec:
    return TypeAdapter(FieldSpec).validate_python(d)


def _cfg(name: str, **validation: float):
    cfg = load_config(EXAMPLES / f"{name}.toml").dataset
    return dataclasses.replace(cfg, name=f"{cfg.name}-{id(cfg) % 10**6}",
                               validation=dataclasses.replace(cfg.validation, **validation))


def _report_fields(store: ObjectStore, cfg: DatasetConfig, run: str) -> set[str]:
    """The fields the run's per-field expectations name (its ``validation.json``), each of
    which passed."""
    doc = store.get_json(report_key(cfg.prefix, run))
    rows = [r for r in doc["results"] if r["suite"] == f"{cfg.name}.fields"]
    assert rows and all(r["success"] for r in rows), rows
    # every expectation of a field is on its own summary columns ("<field>.<what>")
    assert all(r["column"].split(".")[0] == r["field"] for r in rows), rows
    return {r["field"] for r in rows}


def _declared(cfg: DatasetConfig) -> set[str]:
    return {name for name, _ in cfg.field_specs} | {cfg.target_spec.name}


def _tensors(table: pa.Table, column: str) -> dict[str, np.ndarray]:
    arr = table.column(column).combine_chunks()
    block = arr.to_numpy_ndarray()
    return dict(zip(table.column("id").to_pylist(), block, strict=True))


# a quiet NaN with a payload, a negative NaN with another, +Inf (float32 bits)
ODD = np.array([0x7FC00123, 0xFFA00001, 0x7F800000], np.uint32).view(np.float32)


def test_sentinel_zarr_round_trip_and_bad_groups(store, spark):
    cfg = _cfg("sentinel", max_quarantine_fraction=0.9)
    # bands allow NaN/Inf: published as they are, counted in the statistics' "nan"
    cfg = dataclasses.replace(cfg, fields={**cfg.fields, "bands": dataclasses.replace(
        cfg.fields["bands"], allow_nan=True)})
    inc = cfg.incoming
    ids, bands, labels = ex.sentinel_arrays(300, seed=1)
    bands[5, 2, 0, :2] = ODD[:2]
    bands[17, 7, 3, 3] = ODD[2]
    labels[9] = 7                               # no class 7 (of 4): that row quarantined
    good = ex.put_sentinel(store, f"{inc}good.zarr", 300, ids=ids, bands=bands, label=labels)
    del good["s2-000009"]
    # a group whose arrays disagree in length: quarantined whole, once
    ids, bands, labels = ex.sentinel_arrays(50, seed=2, start=1000)
    ex.put_sentinel(store, f"{inc}short.zarr", 50, seed=2, ids=ids, bands=bands,
                    label=labels[:40])
    # a group missing a declared array: once, naming the field and the arrays found
    ex.put_sentinel(store, f"{inc}nobands.zarr", 20, seed=3, bands=None)
    # a group with one chunk deleted: those rows quarantined, the rest published
    gap = ex.put_sentinel(store, f"{inc}gap.zarr", 128, seed=4, chunk=32,
                          ids=np.array([f"gap-{i:04d}" for i in range(128)]))
    removed = [o.key for o in store.list(f"{inc}gap.zarr/bands/") if o.key.endswith("c/1/0/0/0")]
    assert removed, "the test must delete a chunk"
    store.delete(removed)
    # metadata only, no chunk at all (the 1.3 KB group that used to publish zeros)
    ex.put_sentinel(store, f"{inc}empty.zarr", 300, seed=5)
    store.delete([o.key for o in store.list(f"{inc}empty.zarr/") if "/c/" in o.key])

    run = uuid.uuid4().hex[:12]
    pub = run_pipeline(store, cfg, spark, run)
    assert pub is not None
    m = latest_manifest(store, cfg.prefix)
    gap_ok = [k for i, k in enumerate(gap) if not 32 <= i < 64]
    bad = [("short.zarr", "length_mismatch"), ("nobands.zarr", "missing_field"),
           ("empty.zarr", "missing_chunk"), ("s2-000009", "unknown_label")] + \
        [(f"gap-{i:04d}", "missing_chunk") for i in range(32, 64)]
    assert_exactly_once(store, m, list(good) + gap_ok, bad)
    qrows = quarantined_rows(store, m).to_pylist()
    q = {r["source_key"]: r["message"] for r in qrows if r["source_row"] == -1}
    assert "ids 50" in q[f"{inc}short.zarr/"] and "label 40" in q[f"{inc}short.zarr/"]
    assert "'bands'" in q[f"{inc}nobands.zarr/"] and "label" in q[f"{inc}nobands.zarr/"]
    # the bad class: one row naming the value, the field's column, the classes and the fix
    (lab9,) = [r for r in qrows if r["id"] == "s2-000009"]
    assert lab9["source_key"] == f"{inc}good.zarr/" and lab9["source_row"] == 9
    for words in ("label 7", "column 'label'", "'urban'", "0..3", "append the class"):
        assert words in lab9["message"], lab9["message"]
    # the report lists the per-field expectations of each declared field and the target
    assert _report_fields(store, cfg, run) == _declared(cfg) == {"bands", "label"}
    assert m.validation.report.endswith(report_key(cfg.prefix, run))

    # read back as a notebook does: the version's manifest, its shards, the tensor view
    ds = shardline.open_dataset(cfg, store=store)
    assert ds.version == m.version and ds.rows == len(good) + len(gap_ok)
    table = ds.to_table()
    assert isinstance(table.schema.field("bands").type, pa.FixedShapeTensorType)
    arr = ds.array(table, "bands")
    assert arr.dtype == np.float32 and arr.shape == (ds.rows, 13, 32, 32)
    got = dict(zip(table.column("id").to_pylist(), arr, strict=True))
    labels = dict(zip(table.column("id").to_pylist(), table.column("label").to_pylist(),
                      strict=True))
    for rid, (x, lab) in good.items():
        assert got[rid].tobytes() == x.tobytes(), rid
        assert labels[rid] == lab
    for rid in gap_ok:
        assert got[rid].tobytes() == gap[rid][0].tobytes()
    # the NaN payloads and the Inf, bit for bit
    assert got["s2-000005"][2, 0, :2].view(np.uint32).tolist() == [0x7FC00123, 0xFFA00001]
    assert got["s2-000017"][7, 3, 3] == np.inf
    # the per-field GX suite ran over the published shards
    assert f"{cfg.name}.fields" in m.validation.suites
    # statistics: per channel, merged over shards into the batch and the version; NaN and
    # Inf are counted apart and left out of the moments and extremes
    assert m.stats["bands"]["nan"] == [0, 0, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert m.stats["bands"]["count"] == [(len(got) * 32 * 32) - n
                                         for n in m.stats["bands"]["nan"]]
    block = np.ma.masked_invalid(np.stack(list(got.values())).astype(np.float64))
    info = dataset_info(cfg, m.stats)
    st = info.field("bands").stats
    assert st is not None and len(st.mean) == 13
    assert np.allclose(st.mean, block.mean(axis=(0, 2, 3)).filled(), atol=1e-6)
    assert np.allclose(st.std, block.std(axis=(0, 2, 3)).filled(), atol=1e-5)
    assert np.allclose(st.max, block.max(axis=(0, 2, 3)).filled())
    own = m.doc.own_ref
    assert own.stats == m.stats
    counts = np.bincount(table.column("label").to_numpy(), minlength=4)
    assert own.stats["label"]["label_counts"] == {str(i): int(n) for i, n in
                                                  enumerate(counts) if n}


def test_diabetes_parquet_regression_round_trip(store, spark):
    cfg = _cfg("diabetes", max_quarantine_fraction=0.5)
    inc = cfg.incoming
    first = ex.put_diabetes(store, f"{inc}a.parquet", slice(0, 300))
    second = ex.put_diabetes(store, f"{inc}b.parquet", slice(300, None))
    # a CSV without the declared features column: quarantined once, naming it
    store.put_bytes(f"{inc}nofeatures.csv", b"id,progression\nz1,10.0\nz2,11.0\n")
    # rows that break the declaration: NaN target, out of range, wrong length
    store.put_bytes(f"{inc}bad.jsonl", b"\n".join([
        b'{"id": "n1", "features": [0,0,0,0,0,0,0,0,0,0], "progression": NaN}',
        b'{"id": "n2", "features": [5,0,0,0,0,0,0,0,0,0], "progression": 1.0}',
        b'{"id": "n3", "features": [0,0,0], "progression": 1.0}',
        b'{"id": "n4", "features": [0,0,0,0,0,0,0,0,0,0], "progression": -3.0}',
        b'{"id": "n5", "features": [0.5,0,0,0,0,0,0,0,0,0], "progression": 7.5}',
    ]) + b"\n")
    run = uuid.uuid4().hex[:12]
    run_pipeline(store, cfg, spark, run)
    m = latest_manifest(store, cfg.prefix)
    assert _report_fields(store, cfg, run) == _declared(cfg) == {"features", "progression"}
    src = pa.concat_tables([first, second])
    assert_exactly_once(store, m, src.column("id").to_pylist() + ["n5"],
                        [("nofeatures.csv", "missing_field"), ("n1", "not_finite"),
                         ("n2", "out_of_range"), ("n3", "wrong_shape"), ("n4", "out_of_range")])
    table = published_rows(store, m)
    assert table.schema.field("progression").type == pa.float64()
    got = _tensors(table, "features")
    target = dict(zip(table.column("id").to_pylist(), table.column("progression").to_pylist(),
                      strict=True))
    want = src.column("features").combine_chunks().flatten().to_numpy().reshape(-1, 10)
    for i, rid in enumerate(src.column("id").to_pylist()):
        assert got[rid].tobytes() == want[i].tobytes()
        assert target[rid] == src.column("progression")[i].as_py()
    t = dataset_info(cfg, m.stats).target.stats
    prog = table.column("progression").to_numpy()
    assert t is not None and np.isclose(t.mean[0], prog.mean()) and t.max == (prog.max(),)
    q = {r["id"]: r["message"] for r in quarantined_rows(store, m).to_pylist()}
    assert "'progression'" in q["n1"] and "allow_nan" in q["n1"]
    assert "'features'" in q["n2"] and "[0.0, 1.0]" not in q["n2"]


def test_tags_multilabel_jsonl(store, spark):
    cfg = _cfg("tags", max_quarantine_fraction=0.5)
    inc = cfg.incoming
    rows = ex.tag_rows(120, seed=7)
    ex.put_tags(store, f"{inc}a.jsonl", rows, extra_lines=[
        json.dumps({"id": "u1", "tags": ["red", "purple"], "image": rows[0]["image"]}),
        '{"id": "u2", "tags": ["red"]}',
    ])
    run = uuid.uuid4().hex[:12]
    run_pipeline(store, cfg, spark, run)
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [r["id"] for r in rows],
                        [("u1", "unknown_label"), ("u2", "missing_value")])
    assert _report_fields(store, cfg, run) == _declared(cfg) == {"image", "label"}
    q = {r["id"]: r["message"] for r in quarantined_rows(store, m).to_pylist()}
    for words in ("'purple'", "column 'tags'", "'blue'", "append the class"):
        assert words in q["u1"], q["u1"]
    assert "'image'" in q["u2"] and "optional = true" in q["u2"]
    ds = shardline.open_dataset(cfg, store=store)
    table = ds.to_table()
    ids = table.column("id").to_pylist()
    images = dict(zip(ids, ds.array(table, "image"), strict=True))
    tags = dict(zip(ids, ds.array(table, "label"), strict=True))
    for r in rows:
        assert images[r["id"]].tobytes() == r["pixels"].tobytes()
        assert [ex.TAGS[i] for i in np.flatnonzero(tags[r["id"]])] == \
            [t for t in ex.TAGS if t in r["tags"]]


def _png(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_mask_target_jsonl_round_trip(store, spark):
    """A segmentation mask target through ingest: PNG (base64) or nested-list masks stored
    as uint8 class indices, bit for bit; a pixel past the classes and a mask of another
    shape are each one quarantine row naming the target and the fix."""
    name = f"seg-{uuid.uuid4().hex[:6]}"
    cfg = parse_config({"dataset": {
        "name": name, "incoming": f"incoming/{name}/", "classes": ["bg", "road", "building"],
        "fields": {"image": {"kind": "image", "shape": [8, 6, 3]}},
        "target": {"kind": "mask", "name": "mask", "column": "seg", "shape": [8, 6]},
        "validation": {"max_quarantine_fraction": 0.5}}}).dataset
    rng = np.random.default_rng(12)
    images = rng.integers(0, 256, (24, 8, 6, 3), dtype=np.uint8)
    masks = rng.integers(0, 3, (24, 8, 6), dtype=np.uint8)
    lines = [json.dumps({"id": f"m{i:02d}", "image": _png(images[i]),
                         "seg": _png(masks[i]) if i % 2 else masks[i].tolist()})
             for i in range(24)]
    over = masks[0].copy()
    over[3, 4] = 5
    lines += [json.dumps({"id": "bad5", "image": _png(images[0]), "seg": over.tolist()}),
              json.dumps({"id": "short", "image": _png(images[0]),
                          "seg": masks[0][:7].tolist()})]
    store.put_bytes(f"{cfg.incoming}a.jsonl", ("\n".join(lines) + "\n").encode())
    run = uuid.uuid4().hex[:12]
    run_pipeline(store, cfg, spark, run)
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [f"m{i:02d}" for i in range(24)],
                        [("bad5", "unknown_label"), ("short", "wrong_shape")])
    q = {r["id"]: r["message"] for r in quarantined_rows(store, m).to_pylist()}
    for words in ("target 'mask'", "1 pixel(s)", "0..2", "(e.g. 5)", "append classes"):
        assert words in q["bad5"], q["bad5"]
    assert "'mask'" in q["short"] and "[7, 6]" in q["short"] and "[8, 6]" in q["short"]
    assert _report_fields(store, cfg, run) == _declared(cfg) == {"image", "mask"}
    ds = shardline.open_dataset(cfg, store=store)
    table = ds.to_table()
    assert table.schema.field("mask").type == pa.fixed_shape_tensor(pa.uint8(), [8, 6])
    rows = [int(i[1:]) for i in table.column("id").to_pylist()]
    got = ds.array(table, "mask")
    assert got.dtype == np.uint8 and got.tobytes() == masks[rows].tobytes()
    assert ds.array(table, "image").tobytes() == images[rows].tobytes()


def test_schema_evolution_additive_versions_and_refusals_before_spark(store, spark):
    cfg = _cfg("sentinel")
    inc = cfg.incoming
    ex.put_sentinel(store, f"{inc}a.zarr", 40, seed=8)
    assert run_pipeline(store, cfg, spark).version == 1
    # classes appended at the end and a new optional field: a new version
    grown = dataclasses.replace(cfg, classes=(*cfg.classes, "snow"), fields={
        **cfg.fields, "cloud": parse_field({"kind": "scalar", "dtype": "float32",
                                            "optional": True})})
    ids, bands, labels = ex.sentinel_arrays(30, seed=9, start=500)
    ex.put_sentinel(store, f"{inc}b.zarr", 30, ids=ids, bands=bands,
                    label=np.full(30, 4, np.int16))
    pub = run_pipeline(store, grown, spark)
    m = latest_manifest(store, cfg.prefix)
    assert pub.version == 2 and m.schema.classes[-1] == "snow"
    assert m.stats["label"]["label_counts"]["4"] == 30
    # a dtype change: refused by convert before any Spark job or staged object
    ex.put_sentinel(store, f"{inc}c.zarr", 10, seed=10)
    wide = dataclasses.replace(grown, fields={**grown.fields, "bands": parse_field(
        {"kind": "tensor", "dtype": "float64", "shape": [13, 32, 32]})})
    staged = len(list(store.list(f"{cfg.prefix}/staging/")))
    with pytest.raises(SchemaChange, match="'bands' type .*new dataset name"):
        run_pipeline(store, wide, spark)
    assert len(list(store.list(f"{cfg.prefix}/staging/"))) == staged
    # a bound set where version 2 had none: the same Arrow schema, but rows already published
    # were never checked against it; refused from the config document version 2 recorded
    narrow = dataclasses.replace(grown, fields={**grown.fields, "bands": parse_field(
        {"kind": "tensor", "dtype": "float32", "shape": [13, 32, 32], "max": 100.0})})
    with pytest.raises(SchemaChange, match="version 2 .*field 'bands' max narrowed unset -> "
                       "100.0 .*new dataset name"):
        run_pipeline(store, narrow, spark)
    assert len(list(store.list(f"{cfg.prefix}/staging/"))) == staged
    assert latest_manifest(store, cfg.prefix).version == 2


def test_shorthand_zarr_groups_prove_their_rows(store, spark):
    """The shorthand's Zarr groups (images/labels/ids) too: a group of metadata without
    chunks (which Zarr reads as zeros) is one quarantine row, not 300 invented rows; a
    missing chunk quarantines its rows; arrays of different lengths name both."""
    from shardline.infra import demo_data
    from tests.integration.ingest_helpers import dataset_config

    cfg = dataset_config(name=f"digits-{uuid.uuid4().hex[:6]}")
    inc = cfg.incoming
    good = demo_data.digits(0, 100)
    demo_data.upload_zarr(store, f"{inc}good.zarr", good, chunk_rows=32)
    demo_data.upload_zarr(store, f"{inc}gap.zarr", demo_data.digits(100, 164), chunk_rows=32)
    store.delete([o.key for o in store.list(f"{inc}gap.zarr/images/")
                  if o.key.endswith("c/1/0/0/0")])
    demo_data.upload_zarr(store, f"{inc}empty.zarr", demo_data.digits(200, 500))
    store.delete([o.key for o in store.list(f"{inc}empty.zarr/") if "/c/" in o.key])
    run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
    bad = [("empty.zarr", "missing_chunk")] + \
        [(d.id, "missing_chunk") for d in demo_data.digits(132, 164)]
    assert_exactly_once(store, m, [d.id for d in good + demo_data.digits(100, 132)], bad)


def test_a_large_zarr_group_is_cut_between_chunks_into_tasks(store, spark):
    """One typed group, three tasks: the driver proves the layout from metadata, cuts the
    rows between whole chunks, each task reads its range; every row still lands once."""
    from tests.integration.ingest_helpers import ingest_batch

    cfg = _cfg("sentinel", max_quarantine_fraction=0.5)
    inc = cfg.incoming
    rows = ex.put_sentinel(store, f"{inc}big.zarr", 200, seed=11, chunk=16)
    store.delete([o.key for o in store.list(f"{inc}big.zarr/bands/")
                  if o.key.endswith("c/5/0/0/0")])            # rows 80..95
    done = ingest_batch(store, cfg, spark, tasks=3, min_task_bytes=1)
    assert done is not None and len(done.conv.row_files) == 3, "cut into three tasks"
    m = latest_manifest(store, cfg.prefix)
    ids = list(rows)
    assert_exactly_once(store, m, ids[:80] + ids[96:],
                        [(i, "missing_chunk") for i in ids[80:96]])
    got = _tensors(published_rows(store, m), "bands")
    assert all(got[i].tobytes() == rows[i][0].tobytes() for i in ids[:80] + ids[96:])
