"""Containment end to end (issue 11, items 1, 3, 8): hostile rows and objects in one drop
end as quarantine rows, the rest publishes, every input row exactly once; a batch that
cannot pass is bisected down to its failing sources, which are set aside; it never blocks a
later clean upload (clean sources go first).

Real parts: a moto S3 server over HTTP, a Spark Connect server, great-expectations, Arrow.
``run_pipeline`` is one batch through the ingest driver the flow runs, strikes included.
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from shardline.core.errors import ValidationFailed
from shardline.core.manifest import latest_manifest
from shardline.infra.demo_data import csv_bytes, digits, jsonl_bytes, parquet_bytes
from shardline.tasks import setaside
from shardline.tasks.detect import detect
from shardline.tasks.driver_stages import plain
from shardline.tasks.publish import publish
from shardline.tasks.validate import require_success
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config, run_pipeline
from tests.unit.test_containment import png_bomb

IN = "incoming/digits/"
pytestmark = pytest.mark.chaos


def line(rid: str, label: object, image: str) -> str:
    return json.dumps({"id": rid, "label": label, "image": image})


def test_every_found_hostile_case_is_quarantined_and_the_rest_publishes(store, spark):
    cfg = dataset_config()
    good = digits(0, 60)
    img = good[0].b64()
    bomb_b64 = base64.b64encode(png_bomb(100_000, 100_000)).decode()
    hostile_lines = [
        line("sup2", "²", img),                                    # isdigit, int() fails
        '{"id": "big-int", "label": ' + "9" * 400 + ', "image": "' + img + '"}',
        '{"id": "deep", "label": ' + "[" * 100_000 + "]" * 100_000 + "}",
        line("bomb", 1, bomb_b64),                                 # decompression bomb
        line("long-id" + "x" * 2000, 1, img),
    ]
    store.put_bytes(f"{IN}a.jsonl", jsonl_bytes(good[:30]) +
                    ("\n".join(hostile_lines) + "\n").encode())
    csv_text = csv_bytes(good[30:50]).decode() + f"huge-label,{'7' * 5000},{img}\n"
    store.put_bytes(f"{IN}b.csv", csv_text.encode())
    store.put_bytes(f"{IN}dup.csv", b"id,id,label,image\n" + f"q1,q2,1,{img}\n".encode())
    store.put_bytes(f"{IN}empty.jsonl", b"")
    store.put_bytes(f"{IN}blank.jsonl", b"\n \n")
    store.put_bytes(f"{IN}header-only.csv", b"id,label,image\n")
    store.put_bytes(f"{IN}c.parquet", parquet_bytes(good[50:]))
    store.put_bytes(f"{IN}imgs/3/bomb.png", png_bomb(50_000, 50_000))
    pub = run_pipeline(store, cfg, spark)
    assert pub is not None and pub.created
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [d.id for d in good], [
        ("sup2", "unknown_label"), ("big-int", "unknown_label"),
        ("a.jsonl", "too_deeply_nested"), ("bomb", "image_too_large"),
        ("a.jsonl", "id_too_long"), ("huge-label", "label_too_long"),
        ("dup.csv", "duplicate_column"), ("empty.jsonl", "empty_object"),
        ("blank.jsonl", "empty_object"), ("header-only.csv", "empty_object"),
        ("bomb.png", "image_too_large"),
    ])
    assert detect(store, cfg) is None          # nothing hostile is detected again


def test_a_batch_of_only_empty_objects_is_recorded_once(store, spark):
    cfg = dataset_config()
    store.put_bytes(f"{IN}e1.jsonl", b"")
    store.put_bytes(f"{IN}e2.csv", b"id,label,image\n")
    with pytest.raises(ValidationFailed):
        run_pipeline(store, cfg, spark)
    assert detect(store, cfg) is None          # set aside at once: no later run redoes it
    aside = setaside.set_aside(store, cfg)
    assert {k for k, _ in aside} == {f"{IN}e1.jsonl", f"{IN}e2.csv"}
    assert all("empty_object" in why or "validate" in why for why in aside.values())


def test_a_poisoned_batch_is_set_aside_and_a_later_clean_upload_publishes(store, spark):
    cfg = dataset_config()
    bad = "\n".join(line(f"b{i}", "fish", digits(0, 1)[0].b64()) for i in range(20)) + "\n"
    store.put_bytes(f"{IN}bad.jsonl", bad.encode())       # 100 % quarantined: over the gate
    with pytest.raises(ValidationFailed):
        run_pipeline(store, cfg, spark)
    good = digits(0, 10)
    store.put_bytes(f"{IN}good.jsonl", jsonl_bytes(good))  # arrives after the bad drop
    pub = run_pipeline(store, cfg, spark)                   # clean sources go first, alone
    assert pub is not None and pub.created and pub.rows_published == 10
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [d.id for d in good], [])
    with pytest.raises(ValidationFailed):                  # bad tried alone again: 2 strikes
        run_pipeline(store, cfg, spark)
    assert set(setaside.set_aside(store, cfg)) == {(f"{IN}bad.jsonl",
                                                    store.head(f"{IN}bad.jsonl").etag)}
    assert detect(store, cfg) is None


def test_conversion_failures_are_bisected_down_to_the_failing_source(store):
    cfg = dataset_config()
    from shardline.tasks.batch import Batch
    for name in ("x.jsonl", "y.csv"):
        store.put_bytes(f"{IN}{name}", b"id,label,image\n")
    batch = detect(store, cfg)
    assert batch is not None and len(batch.sources) == 2
    x, y = batch.sources
    setaside.record_conversion_failure(store, cfg, batch, "r1", RuntimeError("worker died"))
    setaside.record_conversion_failure(store, cfg, batch, "r2", RuntimeError("worker died"))
    assert setaside.set_aside(store, cfg) == {}            # never failed alone: not yet
    probe = detect(store, cfg)                             # the first half of the pair
    assert probe is not None and probe.sources == (x,)
    setaside.record_conversion_failure(store, cfg, Batch("b", (x,)), "r3",
                                       RuntimeError("worker died"))
    aside = setaside.set_aside(store, cfg)
    assert set(aside) == {(x.key, x.etag)}
    assert "worker died" in aside[(x.key, x.etag)]
    nxt = detect(store, cfg)                               # y goes on without x
    assert nxt is not None and nxt.sources == (y,)


@pytest.mark.parametrize("raced", ["after_convert", "between_detect_and_convert"])
def test_a_source_shared_by_racing_batches_is_counted_once(store, spark, raced):
    """Two ingests detected overlapping batches; the earlier publishes first, either after
    the later one converted (the shared object's rows are all quarantined, so no id
    collides) or between the later one's detect and convert (its good rows would be
    quarantined as duplicate_id). The later publish must refuse either way (the object is
    in the earlier version), and the next run publishes only what is left: every row
    exactly once."""
    from shardline.core.errors import PublishConflict
    from shardline.tasks.batch import Batch, batch_id

    cfg = dataset_config()
    bad = "\n".join(line(f"x{i}", "fish", digits(0, 1)[0].b64()) for i in range(2)) + "\n"
    store.put_bytes(f"{IN}shared.jsonl", bad.encode())        # 2 rows, both unknown_label
    good_a, good_b = digits(0, 10), digits(10, 20)
    store.put_bytes(f"{IN}a.jsonl", jsonl_bytes(good_a))
    store.put_bytes(f"{IN}b.jsonl", jsonl_bytes(good_b))
    everything = detect(store, cfg)
    assert everything is not None and everything.seen_version == 0
    by_key = {s.key: s for s in everything.sources}

    def batch_of(*names: str) -> Batch:
        srcs = tuple(by_key[f"{IN}{n}"] for n in names)
        return Batch(batch_id(srcs), srcs, seen_version=0)    # both detected at version 0

    stages = plain(store, cfg, spark)       # the driver's stages, split at publish

    def converted(b: Batch):
        conv = stages.convert(b, uuid.uuid4().hex[:12])
        report = stages.validate(conv)
        require_success(report, b.id)
        return conv, report

    batch_a, batch_b = batch_of("a.jsonl", "shared.jsonl"), batch_of("b.jsonl", "shared.jsonl")
    if raced == "after_convert":
        conv_a, conv_b = converted(batch_a), converted(batch_b)   # both against version 0
        first = publish(store, cfg, *conv_a)
    else:
        first = publish(store, cfg, *converted(batch_a))
        conv_b = converted(batch_b)                               # against version 1
        assert conv_b[0].base_version == 1
    assert first.created and first.version == 1
    with pytest.raises(PublishConflict, match="shared.jsonl"):
        publish(store, cfg, *conv_b)
    again = run_pipeline(store, cfg, spark)                     # detect: b.jsonl alone
    assert again is not None and again.created and again.version == 2
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, [d.id for d in good_a + good_b],
                        [("x0", "unknown_label"), ("x1", "unknown_label")])
    assert detect(store, cfg) is None
