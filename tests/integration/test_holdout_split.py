"""The held-out split materialised at ingest (issue 10, item 4), on a real moto S3 server
and a Spark Connect server: ingest writes each batch's held-out rows (by id hash, the
trainer's rule) into their own shards and records the fraction; the fraction cannot change;
the trainer trains on train shards only and evaluates on held-out shards only; a dataset
that starts with mixed shards (the older layout) keeps training and evaluating exactly as
before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from shardline.api.dataset import open_dataset
from shardline.core import shard_table
from shardline.core.config import Config, DatasetConfig, SparkSettings, TrainConfig
from shardline.core.errors import ConfigError
from shardline.core.idhash import holdout_ids, reference_hash
from shardline.core.manifest import Manifest, list_versions, read_manifest
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits, jsonl_bytes
from shardline.trainer.cache import ShardCache
from shardline.trainer.fetch import ShardFetcher
from shardline.trainer.loader import eval_batches
from shardline.trainer.options import RunOptions
from shardline.trainer.plan import HoldoutMismatch, TrainPlan, make_plan
from shardline.trainer.run import train
from shardline.trainer.shard_reader import ShardReader
from tests.integration.ingest_helpers import (
    assert_exactly_once,
    dataset_config,
    read_arrow,
    run_pipeline,
)
from tests.integration.trainer_data import publish_version


def _upload(store: ObjectStore, cfg: DatasetConfig, name: str, start: int, stop: int,
            prefix: str, extra: list[dict] | None = None) -> list[str]:
    items = digits(start, stop, prefix=prefix)
    body = jsonl_bytes(items)
    if extra:
        body += ("\n".join(json.dumps(e) for e in extra) + "\n").encode()
    store.put_bytes(f"{cfg.incoming}{name}.jsonl", body)
    return [d.id for d in items]


def _ids(store: ObjectStore, path: str) -> list[str]:
    return read_arrow(store, path).column("id").to_pylist()


def _held(ids: list[str], fraction: float) -> set[str]:
    return {i for i, h in zip(ids, holdout_ids(pa.array(ids, pa.string()), fraction),
                              strict=True) if h}


def _reader(store: ObjectStore, cfg: DatasetConfig, cache_dir: Path
            ) -> tuple[ShardCache, ShardReader]:
    cache = ShardCache(cache_dir, 1 << 30, store)
    return cache, ShardReader(ShardFetcher(cache, 2), cfg)


def _evaluated(plan: TrainPlan, reader: ShardReader, cfg: DatasetConfig,
               store: ObjectStore) -> list[str]:
    """Ids of the rows evaluation reads (each once), through the trainer's eval pass."""
    pool = reader.pool(64)
    keys: list[int] = []
    for b in eval_batches(plan, reader, pool):
        keys += b["key"].tolist()
        pool.release(b["image"])
    by_ordinal: dict[int, list[str]] = {}
    out = []
    for k in keys:
        o, row = k >> 32, k & 0xFFFFFFFF
        if o not in by_ordinal:
            by_ordinal[o] = _ids(store, plan.shards[o].entry.path)
        out.append(by_ordinal[o][row])
    return out


def test_ingest_writes_the_held_out_rows_into_their_own_shards(
        store: ObjectStore, spark: SparkSettings, tmp_path: Path) -> None:
    cfg = dataset_config(name="held", incoming="incoming/held/", holdout_fraction=0.2)
    bad = [{"id": "h00005", "label": 3, "image": digits(0, 1)[0].b64()},   # duplicate id
           {"id": "nolabel", "image": digits(0, 1)[0].b64()}]              # no label
    good = _upload(store, cfg, "a", 0, 1200, "h", bad)
    pub = run_pipeline(store, cfg, spark)
    assert pub is not None and pub.rows_published == 1200
    m = read_manifest(store, cfg.prefix, 1)
    assert m.holdout_fraction == 0.2
    assert_exactly_once(store, m, good, [("h00005", "duplicate_id"), ("a.jsonl", "missing_label")])

    held_shards = [s for s in m.shards if s.split == "holdout"]
    train_shards = [s for s in m.shards if s.split == "train"]
    assert held_shards and train_shards and len(held_shards) + len(train_shards) == len(m.shards)
    assert all("/split=holdout/" in s.path for s in held_shards)
    assert not any("/split=holdout/" in s.path for s in train_shards)
    held = [i for s in held_shards for i in _ids(store, s.path)]
    trained = [i for s in train_shards for i in _ids(store, s.path)]
    # exactly the rows whose hash is under the fraction, by the plain definition as well
    assert set(held) == _held(good, 0.2) and not set(held) & set(trained)
    assert sorted(held + trained) == sorted(good)
    unit = {i: (reference_hash(i) >> 11) / 2**53 for i in good}
    assert set(held) == {i for i, u in unit.items() if u < 0.2}
    assert 0.12 < len(held) / len(good) < 0.28
    # the Arrow batch list carries the split column
    ref = m.doc.own_ref if m.doc else None
    assert ref is not None
    _, table = shard_table.decode(store.get_bytes(ref.key), ref.key)
    assert set(table.filter(pa.compute.invert(table.column("quarantine")))
               .column("split").to_pylist()) == {"train", "holdout"}

    # the fraction is a dataset property: another one is refused before any work
    _upload(store, cfg, "b", 1200, 1797, "h")
    other = dataset_config(name="held", incoming="incoming/held/", holdout_fraction=0.3)
    with pytest.raises(ConfigError, match=r"holdout_fraction is 0\.3.*recorded 0\.2"):
        run_pipeline(store, other, spark)
    assert list_versions(store, cfg.prefix) == [1]
    assert run_pipeline(store, cfg, spark) is not None
    m2 = read_manifest(store, cfg.prefix, 2)
    assert m2.holdout_fraction == 0.2

    # trainer: the dataset's fraction wins; another configured one is an error naming both
    with pytest.raises(HoldoutMismatch, match=r"0\.2.*0\.15"):
        make_plan(m2, None, 0.4, 0.15, seed=0)
    plan = make_plan(m2, None, 0.4, None, seed=0)
    assert plan.holdout_fraction == 0.2
    assert {s.split for s in plan.train_shards} == {"train"}
    assert {s.split for s in plan.eval_shards} == {"holdout"}

    # evaluation reads exactly the held-out rows, and opens no train shard
    cache, reader = _reader(store, cfg, tmp_path / "eval-cache")
    every = good + [d.id for d in digits(1200, 1797, prefix="h")]
    evaluated = _evaluated(plan, reader, cfg, store)
    assert sorted(evaluated) == sorted(_held(every, 0.2))
    for s in plan.shards:
        assert cache.path_for(s.entry).exists() == (s.split == "holdout"), s.entry.path

    # a real training run: never a held-out row in a batch; every train row once per epoch
    run_cfg = Config(dataset=cfg, train=TrainConfig(
        holdout_fraction=0.2, width=8, epochs=1, batch_size=64, shuffle_window=256,
        cache_dir=str(tmp_path / "train-cache")))
    seen: list[int] = []
    result = train(run_cfg, store, options=RunOptions(log_every=50, checkpoint_every=1000),
                   on_batch=lambda step, b: seen.extend(b["key"].tolist()))
    splits = [plan.shards[k >> 32].split for k in seen]
    assert set(splits) == {"train"}
    assert len(seen) == len(set(seen)) == len(every) - len(_held(every, 0.2))
    assert result.eval_accuracy is not None

    # the Python API: a split reads its own rows
    ds = open_dataset(cfg, store=store, split="holdout")
    assert all(s.split == "holdout" for s in ds.shards())
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == sorted(evaluated)
    tr = open_dataset(cfg, store=store, split="train").to_table(columns=["id"])
    assert tr.num_rows + len(evaluated) == ds.rows


def _plans_agree(old: TrainPlan, new: TrainPlan, reader: ShardReader, n: int) -> None:
    """The first ``n`` shards are planned alike: same train and held-out rows."""
    for a, b in zip(old.shards[:n], new.shards[:n], strict=True):
        assert a.entry.path == b.entry.path and b.split is None
        index = reader.index(a)
        assert np.array_equal(old.holdout_rows(index, a), new.holdout_rows(index, b))
        assert a.role == b.role == "new"
        assert np.array_equal(old.train_rows(a, index), new.train_rows(b, index))


def test_a_dataset_of_mixed_shards_gains_the_split_and_reads_as_before(
        store: ObjectStore, spark: SparkSettings, tmp_path: Path) -> None:
    cfg = dataset_config(name="mixed", incoming="incoming/mixed/")
    order = np.random.default_rng(5).permutation(1797)[:700]
    v1 = publish_version(store, cfg, order)           # the older layout: mixed shards
    assert v1.holdout_fraction is None and {s.split for s in v1.shards} == {None}
    before = make_plan(v1, None, 0.4, 0.15, seed=0)
    cache, reader = _reader(store, cfg, tmp_path / "c1")
    legacy_eval = _evaluated(before, reader, cfg, store)
    legacy_ids = [i for s in v1.shards for i in _ids(store, s.path)]
    assert sorted(legacy_eval) == sorted(_held(legacy_ids, 0.15))

    new_ids = _upload(store, cfg, "n", 0, 600, "n")
    assert run_pipeline(store, cfg, spark) is not None
    m: Manifest = read_manifest(store, cfg.prefix, 2)
    assert m.holdout_fraction == 0.15
    assert [s.split for s in m.shards[:len(v1.shards)]] == [None] * len(v1.shards)
    assert {s.split for s in m.shards[len(v1.shards):]} == {"train", "holdout"}

    plan = make_plan(m, None, 0.4, 0.15, seed=0)
    cache2, reader2 = _reader(store, cfg, tmp_path / "c2")
    # the mixed shards: the same held-out and train rows as before the new layout arrived
    _plans_agree(before, plan, reader2, len(v1.shards))
    # retraining v1 alone after the upgrade plans exactly as before
    again = make_plan(read_manifest(store, cfg.prefix, 1), None, 0.4, 0.15, seed=0)
    assert again.fingerprint() == before.fingerprint()

    evaluated = _evaluated(plan, reader2, cfg, store)
    assert sorted(evaluated) == sorted(_held(legacy_ids, 0.15) | _held(new_ids, 0.15))
    for s in plan.shards:      # mixed and held-out shards opened, new train shards never
        assert cache2.path_for(s.entry).exists() == (s.split != "train"), s.entry.path
    trains = {s.entry.path for s in plan.train_shards}
    assert trains == {s.path for s in m.shards if s.split != "holdout"}

    # exact accounting over both layouts: train rows + held-out rows = every row, once
    train_ids = []
    for s in plan.train_shards:
        ids = _ids(store, s.entry.path)
        train_ids += [ids[r] for r in plan.train_rows(s, reader2.index(s))]
    assert not set(train_ids) & set(evaluated)
    assert sorted(train_ids + evaluated) == sorted(legacy_ids + new_ids)

    held = open_dataset(cfg, store=store, split="holdout").to_table(columns=["id", "label"])
    assert sorted(held.column("id").to_pylist()) == sorted(evaluated)
