"""Helpers for ingest tests: run the ingest driver without Prefect, read back what a
reader sees."""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.ipc as ipc
import xxhash

from shardline.core.config import DatasetConfig, SparkSettings, parse_config
from shardline.core.manifest import Manifest
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import CLASSES
from shardline.tasks.driver import Policy, run_ingest
from shardline.tasks.driver_stages import Ingested, plain
from shardline.tasks.publish import Published


def dataset_config(**overrides) -> DatasetConfig:
    ds = {"name": "digits", "incoming": "incoming/digits/", "classes": CLASSES,
          "image": {"shape": [8, 8, 1]}, "validation": {"max_quarantine_fraction": 0.5}}
    for k, v in overrides.items():
        ds[k] = {**ds[k], **v} if isinstance(v, dict) and isinstance(ds.get(k), dict) else v
    return parse_config({"dataset": ds}).dataset


def run_pipeline(store: ObjectStore, cfg: DatasetConfig, spark: SparkSettings,
                 run_id: str | None = None, **convert_options) -> Published | None:
    """One batch through the ingest driver (``tasks/driver.py``) on the plain stages: what
    the flow runs, strikes and sweep included, without Prefect. One batch (no drain), so a
    test sees each bisection step; a lost race is retried as in the flow."""
    done = ingest_batch(store, cfg, spark, run_id, **convert_options)
    return done.pub if done else None


def ingest_batch(store: ObjectStore, cfg: DatasetConfig, spark: SparkSettings,
                 run_id: str | None = None, **convert_options) -> Ingested | None:
    """As :func:`run_pipeline`, returning the batch, conversion and report as well."""
    done = run_ingest(plain(store, cfg, spark, **convert_options),
                      run_id or uuid.uuid4().hex[:12], Policy(max_batches=1))
    return done[0] if done else None


def read_arrow(store: ObjectStore, key: str) -> pa.Table:
    with ipc.open_file(pa.BufferReader(store.get_bytes(key))) as f:
        return f.read_all()


def published_rows(store: ObjectStore, m: Manifest, verify: bool = True) -> pa.Table:
    """Every published row of version ``m``, checking each shard's digests and row count."""
    tables = []
    for s in m.shards:
        data = store.get_bytes(s.path)
        if verify:
            assert hashlib.sha256(data).hexdigest() == s.sha256, s.path
            assert s.xxh3_128 == xxhash.xxh3_128_hexdigest(data), s.path
        with ipc.open_file(pa.BufferReader(data)) as f:
            t = f.read_all()
        assert t.num_rows == s.rows, s.path
        tables.append(t)
    return pa.concat_tables(tables)


def quarantined_rows(store: ObjectStore, m: Manifest) -> pa.Table:
    shards = m.quarantine.shards
    if not shards:
        from shardline.core.schema import QUARANTINE_SCHEMA
        return QUARANTINE_SCHEMA.empty_table()
    return pa.concat_tables([read_arrow(store, s.path) for s in shards])


def assert_exactly_once(store: ObjectStore, m: Manifest, good_ids: list[str],
                        bad: list[tuple[str, str]]) -> None:
    """The oracle: every good id is published exactly once; every bad row (key fragment or
    id, rule) is quarantined with that rule; nothing else appears."""
    pub = published_rows(store, m)
    counts = Counter(pub.column("id").to_pylist())
    assert {k for k, v in counts.items() if v > 1} == set(), "an id was published twice"
    assert sorted(counts) == sorted(good_ids)
    q = quarantined_rows(store, m).to_pylist()
    assert len(q) == len(bad), [(r["source_key"], r["source_row"], r["id"], r["rule"]) for r in q]
    remaining = list(q)
    for ident, rule in bad:
        hit = next((r for r in remaining if r["rule"] == rule and
                    (r["id"] == ident or ident in r["source_key"])), None)
        assert hit is not None, f"no quarantine row for {ident!r} with rule {rule}"
        assert hit["message"], "a quarantine row must say why"
        remaining.remove(hit)
