"""Typed fields end to end: the examples (sentinel Zarr, diabetes Parquet, tags JSONL) ingest
through detect -> convert (Spark) -> validate (great-expectations) -> publish; every input row
is published or quarantined exactly once, and the published tensors are bit-identical to the
input (read back with pyarrow from the published shards).

Real parts: a moto S3 server over HTTP, a Spark Connect server, great-expectations, Arrow.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from shardline.core.config import load_config
from shardline.core.fields import dataset_info
from shardline.core.manifest import latest_manifest
from shardline.infra import example_data as ex
from tests.integration.ingest_helpers import (
    assert_exactly_once,
    published_rows,
    quarantined_rows,
    run_pipeline,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _cfg(name: str, **validation: float):
    cfg = load_config(EXAMPLES / f"{name}.toml").dataset
    return dataclasses.replace(cfg, name=f"{cfg.name}-{id(cfg) % 10**6}",
                               validation=dataclasses.replace(cfg.validation, **validation))


def _tensors(table: pa.Table, column: str) -> dict[str, np.ndarray]:
    arr = table.column(column).combine_chunks()
    block = arr.to_numpy_ndarray()
    return dict(zip(table.column("id").to_pylist(), block, strict=True))


def test_sentinel_zarr_round_trip_and_bad_groups(store, spark):
    cfg = _cfg("sentinel", max_quarantine_fraction=0.9)
    inc = cfg.incoming
    good = ex.put_sentinel(store, f"{inc}good.zarr", 300, seed=1, chunk=64)
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

    pub = run_pipeline(store, cfg, spark)
    assert pub is not None
    m = latest_manifest(store, cfg.prefix)
    gap_ok = [k for i, k in enumerate(gap) if not 32 <= i < 64]
    bad = [("short.zarr", "length_mismatch"), ("nobands.zarr", "missing_field"),
           ("empty.zarr", "missing_chunk")] + \
        [(f"gap-{i:04d}", "missing_chunk") for i in range(32, 64)]
    assert_exactly_once(store, m, list(good) + gap_ok, bad)
    q = {r["source_key"]: r["message"] for r in quarantined_rows(store, m).to_pylist()
         if r["source_row"] == -1}
    assert "ids 50" in q[f"{inc}short.zarr/"] and "label 40" in q[f"{inc}short.zarr/"]
    assert "'bands'" in q[f"{inc}nobands.zarr/"] and "label" in q[f"{inc}nobands.zarr/"]

    table = published_rows(store, m)
    assert isinstance(table.schema.field("bands").type, pa.FixedShapeTensorType)
    got = _tensors(table, "bands")
    labels = dict(zip(table.column("id").to_pylist(), table.column("label").to_pylist(),
                      strict=True))
    for rid, (x, lab) in good.items():
        assert got[rid].tobytes() == x.tobytes(), rid
        assert labels[rid] == lab
    for rid in gap_ok:
        assert got[rid].tobytes() == gap[rid][0].tobytes()
    # the per-field GX suite ran over the published shards
    assert f"{cfg.name}.fields" in m.validation["suites"]
    # statistics: per channel, merged over shards into the batch and the version
    block = np.stack(list(got.values())).astype(np.float64)
    info = dataset_info(cfg, m.stats)
    st = info.field("bands").stats
    assert st is not None and len(st.mean) == 13
    assert np.allclose(st.mean, block.mean(axis=(0, 2, 3)), atol=1e-6)
    assert np.allclose(st.std, block.std(axis=(0, 2, 3)), atol=1e-5)
    assert np.allclose(st.max, block.max(axis=(0, 2, 3)))
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
    run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
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
    run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [r["id"] for r in rows],
                        [("u1", "unknown_label"), ("u2", "missing_value")])
    table = published_rows(store, m)
    images, tags = _tensors(table, "image"), _tensors(table, "label")
    for r in rows:
        assert images[r["id"]].tobytes() == r["pixels"].tobytes()
        assert [ex.TAGS[i] for i in np.flatnonzero(tags[r["id"]])] == \
            [t for t in ex.TAGS if t in r["tags"]]
