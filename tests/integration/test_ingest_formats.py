"""Every input row lands exactly once, published or quarantined with its rule, per format.

Real parts: a moto S3 server over HTTP, a Spark Connect server, great-expectations, Arrow.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from shardline.core.manifest import latest_manifest
from shardline.infra import demo_data
from shardline.infra.demo_data import bad_jsonl_lines, csv_bytes, digits, jsonl_bytes, parquet_bytes
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config, run_pipeline

IN = "incoming/digits/"


def ids(items):
    return [d.id for d in items]


def test_jsonl_good_and_every_kind_of_bad_line(store, spark):
    cfg = dataset_config()
    good = digits(0, 120)
    bad = bad_jsonl_lines()
    body = jsonl_bytes(good[:60]) + "\n".join(line for line, _ in bad).encode() + b"\n" + \
        jsonl_bytes(good[60:], label_as_name=True)
    store.put_bytes(f"{IN}a.jsonl", body)
    # a cut-off upload: the last line has no newline and is not valid JSON
    store.put_bytes(f"{IN}cut.jsonl", jsonl_bytes(digits(120, 125)) + b'{"id": "d00125", "lab')
    pub = run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
    expected_bad = [("bad-label", "unknown_label"), ("no-label", "missing_label"),
                    ("a.jsonl", "missing_id"), ("not-png", "undecodable_image"),
                    ("bad-b64", "undecodable_image"), ("rgb", "wrong_shape"),
                    ("tall", "wrong_shape"), ("no-image", "missing_image"),
                    ("a.jsonl", "unparseable_record"), ("a.jsonl", "unparseable_record"),
                    ("cut.jsonl", "truncated_file")]
    assert_exactly_once(store, m, ids(good) + ids(digits(120, 125)), expected_bad)
    assert (pub.version, pub.rows_published, pub.rows_quarantined) == (1, 125, 11)
    assert m.quarantine.by_rule["undecodable_image"] == 2


def test_csv_with_bad_rows_and_truncated_tail(store, spark):
    cfg = dataset_config()
    good = digits(0, 80)
    text = csv_bytes(good).decode()
    text += "x1,7\n"                               # too few fields
    text += f"x2,fish,{good[0].b64()}\n"            # unknown label
    text += f"x3,4,{good[0].b64()[:20]}"            # cut off mid-image, no newline
    store.put_bytes(f"{IN}b.csv", text.encode())
    run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, ids(good), [("b.csv", "unparseable_record"),
                                              ("x2", "unknown_label"),
                                              ("b.csv", "truncated_file")])
    rows = {r["id"]: r for r in __import__("tests.integration.ingest_helpers", fromlist=["x"])
            .published_rows(store, m).to_pylist()}
    # pixels are decoded exactly, label index kept, source position recorded
    d = good[7]
    assert rows[d.id]["image"] == d.pixels.tobytes()
    assert rows[d.id]["label"] == d.label
    assert (rows[d.id]["source_key"], rows[d.id]["source_row"]) == (f"{IN}b.csv", 7)


def test_parquet_and_a_truncated_parquet_object(store, spark):
    cfg = dataset_config()
    good = digits(0, 90)
    store.put_bytes(f"{IN}c.parquet", parquet_bytes(good))
    broken = parquet_bytes(digits(90, 100))
    store.put_bytes(f"{IN}d.parquet", broken[: len(broken) // 2])
    run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, ids(good), [("d.parquet", "truncated_file")])
    q = [s for s in m.quarantine.shards]
    assert q, "the unreadable object must be in quarantine"


def test_image_folder_with_corrupt_and_unknown_class_files(store, spark):
    cfg = dataset_config()
    good = digits(0, 40)
    demo_data.upload_image_folder(store, f"{IN}imgs", good)
    store.put_bytes(f"{IN}imgs/3/corrupt.png", good[0].png()[:30])
    store.put_bytes(f"{IN}imgs/cat/x1.png", good[1].png())
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8), mode="RGB").save(buf, format="PNG")
    store.put_bytes(f"{IN}imgs/4/colour.png", buf.getvalue())
    store.put_bytes(f"{IN}imgs/README.md", b"# not an image")
    run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, ids(good), [("corrupt", "undecodable_image"),
                                              ("x1", "unknown_label"),
                                              ("colour", "wrong_shape"),
                                              ("README.md", "unreadable_object")])


def test_zarr_groups_with_and_without_ids_and_a_wrong_shape(store, spark):
    cfg = dataset_config()
    with_ids = digits(0, 300)
    demo_data.upload_zarr(store, f"{IN}a.zarr", with_ids, chunk_rows=64)
    demo_data.upload_zarr(store, f"{IN}b.zarr", digits(300, 310), with_ids=False)
    # images stored as (N, 8, 8) without a channel axis: every row is the wrong shape
    import zarr
    from zarr.storage import FsspecStore
    g = zarr.open_group(store=FsspecStore.from_url(f"s3://{store.bucket}/{IN}c.zarr",
                                                   storage_options=store.s3fs_options()),
                        mode="w")
    g.create_array("images", data=np.zeros((3, 8, 8), np.uint8))
    g.create_array("labels", data=np.array([1, 2, 3]))
    run_pipeline(store, cfg, spark)
    m = latest_manifest(store, cfg.prefix)
    derived = [f"b-{i:07d}" for i in range(10)]
    assert_exactly_once(store, m, ids(with_ids) + derived,
                        [("c-0000000", "wrong_shape"), ("c-0000001", "wrong_shape"),
                         ("c-0000002", "wrong_shape")])
