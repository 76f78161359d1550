"""Shard layout (issue 10, item 1): by default a batch becomes a few large shards holding
many labels, rows grouped by label inside each, label counts in the manifest; no small tail
shards; label partitioning stays an option. Real moto S3 (and Spark for the pipeline)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core.manifest import read_manifest
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits
from shardline.tasks.convert.shard_writer import DataShardWriter
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config, run_pipeline


def _table(store: ObjectStore, key: str) -> pa.Table:
    with ipc.open_file(pa.BufferReader(store.get_bytes(key))) as f:
        return f.read_all()


def _write(store: ObjectStore, n: int, **shards: object) -> tuple[DataShardWriter, list]:
    cfg = dataset_config(shards={"target_mb": 0.01, **shards})     # 109 rows of 96 B
    w = DataShardWriter(store, cfg, lambda label, seq: f"t/{label}-{seq}.arrow")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n)
    for i in range(n):
        w.add(f"r{i:05d}", int(labels[i]), bytes(64), "src", i)
    return w, w.close()


def test_by_batch_shards_are_full_sorted_by_label_and_counted(store: ObjectStore) -> None:
    w, written = _write(store, 1000)
    assert w.limit == 109 and not w.by_label
    assert sum(s.rows for s in written) == 1000
    assert all(w.limit // 2 <= s.rows <= w.limit for s in written), [s.rows for s in written]
    for s in written:
        t = _table(store, s.path)
        labels = t.column("label").to_pylist()
        assert labels == sorted(labels)                      # grouped by label
        assert s.label_counts == {str(k): v for k, v in sorted(Counter(labels).items())}
        assert (s.label_min, s.label_max) == (min(labels), max(labels))
    # every row's recorded position is where it is
    for _, rid, _, label, key, j in w.placed[::97]:
        t = _table(store, key)
        assert t.column("id")[j].as_py() == rid and t.column("label")[j].as_py() == label


def test_a_batch_smaller_than_one_shard_is_one_shard(store: ObjectStore) -> None:
    _, written = _write(store, 50)
    assert [s.rows for s in written] == [50]


def test_label_partitioning_stays_an_option(store: ObjectStore) -> None:
    w, written = _write(store, 300, partition_by=["batch", "label"])
    assert w.by_label
    for s in written:
        assert s.label is not None and set(s.label_counts) == {str(s.label)}


def test_six_thousand_rows_over_a_thousand_classes_make_few_shards(store, spark) -> None:
    classes = [f"c{i:04d}" for i in range(1000)]
    cfg = dataset_config(name="many", incoming="incoming/many/", classes=classes)
    pics = digits()
    lines = [json.dumps({"id": f"m{i:05d}", "label": i % 1000,
                         "image": pics[i % len(pics)].b64()}) for i in range(6000)]
    store.put_bytes("incoming/many/all.jsonl", ("\n".join(lines) + "\n").encode())
    pub = run_pipeline(store, cfg, spark)
    assert pub is not None and pub.rows_published == 6000
    assert len(pub.new_shards) <= 8, [s.rows for s in pub.new_shards]
    m = read_manifest(store, cfg.prefix, 1)
    counts: Counter[str] = Counter()
    for s in m.shards:
        assert sum(s.label_counts.values()) == s.rows and "label" not in s.partition
        counts.update(s.label_counts)
    assert counts == Counter({str(k): 6 for k in range(1000)})
    assert_exactly_once(store, m, [f"m{i:05d}" for i in range(6000)], [])
