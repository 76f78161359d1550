"""Measure compaction of 1,000 tiny shards on a private moto S3 server (not a test: it
prints numbers and asserts only correctness).

    .venv/bin/python -m tests.integration.compact_measure

Two histories, each 1,000 label shards of 8x8 images:
  A. one upload of 6,000 rows over 1,000 classes, partitioned by batch and label (the
     issue's "one file per class per batch": 1,000 shards of 6 rows);
  B. 100 uploads of 60 rows over 10 classes, format-1 documents (a legacy dataset),
     migrated to format 3 (`shardline migrate`) before it is compacted.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.builder import NewBatch, build_version, commit_version
from shardline.core.config import DatasetConfig, StoreSettings, config_to_dict, parse_config
from shardline.core.manifest import latest_manifest
from shardline.core.parts import ShardEntry, ValidationSummary, content_digests
from shardline.core.schema import data_schema, schema_info
from shardline.core.store import ObjectStore
from shardline.infra import procs, services
from shardline.tasks.compact import compact
from shardline.tasks.ledger import write_ids
from shardline.tasks.migrate import migrate
from tests.integration.compact_data import as_format1, rows_of


def config(name: str, classes: int) -> DatasetConfig:
    return parse_config({"dataset": {
        "name": name, "incoming": f"incoming/{name}/",
        "classes": [f"c{i}" for i in range(classes)], "image": {"shape": [8, 8, 1]},
        "shards": {"partition_by": ["batch", "label"]}}}).dataset


def publish(store: ObjectStore, cfg: DatasetConfig, labels: np.ndarray, tag: str) -> None:
    """One batch, one shard per label (as label-partitioned ingest writes), committed."""
    rng = np.random.default_rng(len(labels))
    parent = latest_manifest(store, cfg.prefix)
    batch, run = f"{tag}{uuid.uuid4().hex[:10]}", uuid.uuid4().hex[:12]
    ids = np.asarray([f"{batch}-{i:06d}" for i in range(len(labels))])
    shards = []

    def one(label: int) -> ShardEntry:
        pick = np.flatnonzero(labels == label)
        n = len(pick)
        t = pa.Table.from_arrays(
            [pa.array(ids[pick].tolist(), pa.string()), pa.array(labels[pick], pa.int16()),
             pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), n, [None, pa.py_buffer(
                 rng.integers(0, 256, n * 64, dtype=np.uint8).tobytes())]),
             pa.array([f"incoming/{cfg.name}/u.csv"] * n, pa.string()),
             pa.array(pick.astype(np.int64), pa.int64())], schema=data_schema(cfg))
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, t.schema) as w:
            w.write_table(t)
        data = sink.getvalue().to_pybytes()
        key = layout.shard_key(cfg.prefix, batch, label, 0, run)
        store.put_bytes(key, data)
        sha, xxh = content_digests(data)
        return ShardEntry(path=key, rows=n, bytes=len(data), sha256=sha, xxh3_128=xxh,
                          batch=batch, partition={"batch": batch, "label": str(label)},
                          stats={"label": {"min": label, "max": label}},
                          label_counts={str(label): n})

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(16) as pool:
        shards = list(pool.map(one, sorted(set(labels.tolist()))))
    ids_path = layout.ids_key(cfg.prefix, batch, run)
    write_ids(store, ids_path, pa.array(ids.tolist(), pa.string()))
    commit_version(store, build_version(
        cfg.prefix, dataset=cfg.name, schema=schema_info(cfg), config=config_to_dict(cfg),
        parent=parent, batch=NewBatch(id=batch, run=run, shards=shards, ids_path=ids_path),
        validation=ValidationSummary(success=True)))


def measure(store: ObjectStore, cfg: DatasetConfig) -> dict[str, object]:
    before = latest_manifest(store, cfg.prefix)
    assert before is not None
    rows_before = rows_of(store, before)
    t0 = time.perf_counter()
    first = compact(store, cfg, target_mb=64.0)
    wall = time.perf_counter() - t0
    after = latest_manifest(store, cfg.prefix)
    assert first.created and after is not None and after.version == first.version
    assert rows_of(store, after).equals(rows_before)
    t1 = time.perf_counter()
    again = compact(store, cfg, target_mb=64.0)
    rerun = time.perf_counter() - t1
    assert not again.created
    return {"format_before": before.format, "shards_before": before.totals.shards,
            "shards_after": after.totals.shards, "rows": after.totals.rows,
            "batches": after.totals.batches, "compact_s": round(wall, 2),
            "rerun_s": round(rerun, 2), "bytes_before": before.totals.bytes,
            "bytes_after": after.totals.bytes}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        svc = services.start_moto(procs.free_port(), Path(tmp))
        try:
            settings = StoreSettings(bucket="measure", endpoint_url=svc.url,
                                     access_key="testing", secret_key="testing",
                                     region="us-east-1")
            store = ObjectStore(settings)
            store.ensure_bucket()
            a = config("classes1k", 1000)
            publish(store, a, np.repeat(np.arange(1000), 6).astype(np.int16), "a")
            b = config("legacy", 10)
            for _ in range(100):
                publish(store, b, np.repeat(np.arange(10), 6).astype(np.int16), "b")
            as_format1(store, b.prefix, 100)
            migrate(store, b)               # format 3 first: compaction reads nothing older
            out = {"A_1000_classes_one_upload": measure(store, a),
                   "B_format1_100_batches": measure(store, b),
                   "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}
            print(json.dumps(out, indent=1))
        finally:
            svc.stop()


if __name__ == "__main__":
    main()
