"""The held-out split as a dataset property (issue 10, item 4), without services: the config
key, the version document's record of the fraction and its refusal to change, the split
column of batch lists (older lists still load), the trainer's choice of fraction, and the
plan over held-out / train / mixed shards."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from shardline.core import shard_table
from shardline.core.builder import build_version
from shardline.core.config import HOLDOUT_FRACTION, parse_config
from shardline.core.errors import ConfigError
from shardline.core.idhash import HoldoutMismatch, dataset_fraction, holdout_ids
from shardline.core.parts import ShardEntry, ValidationSummary
from shardline.core.version_doc import BatchList
from shardline.trainer import holdout as trainer_holdout
from shardline.trainer.plan import make_plan
from shardline.trainer.shard_file import ShardIndex
from tests.unit.manifest_fixtures import PREFIX, SCHEMA, new_batch, shard

DS = {"name": "toy", "incoming": "incoming/toy", "classes": ["a", "b"]}
OK = ValidationSummary(success=True)


def _cfg(dataset: dict | None = None, train: dict | None = None):  # type: ignore[no-untyped-def]
    doc: dict = {"dataset": {**DS, **(dataset or {})}}
    if train is not None:
        doc["train"] = train
    return parse_config(doc)


def test_one_holdout_fraction_per_config() -> None:
    assert _cfg().dataset.holdout_fraction == _cfg().train.holdout_fraction == HOLDOUT_FRACTION
    a = _cfg({"holdout_fraction": 0.2})
    assert a.dataset.holdout_fraction == a.train.holdout_fraction == 0.2
    b = _cfg(train={"holdout_fraction": 0.3})
    assert b.dataset.holdout_fraction == b.train.holdout_fraction == 0.3
    assert _cfg({"holdout_fraction": 0.25}, {"holdout_fraction": 0.25}).train.holdout_fraction \
        == 0.25
    with pytest.raises(ConfigError, match=r"\[dataset\] holdout_fraction = 0.2 and \[train\] "
                                          r"holdout_fraction = 0.1 differ"):
        _cfg({"holdout_fraction": 0.2}, {"holdout_fraction": 0.1})
    with pytest.raises(ConfigError, match=r"\[dataset\] holdout_fraction"):
        _cfg({"holdout_fraction": 1.5})


def test_the_trainer_reexports_the_core_hash() -> None:
    ids = pa.array([f"x{i}" for i in range(500)])
    assert trainer_holdout.id_hash64 is __import__("shardline.core.idhash").core.idhash.id_hash64
    assert np.array_equal(holdout_ids(ids, 0.3),
                          trainer_holdout.holdout_mask(trainer_holdout.id_hash64(ids), 0.3))


def _split_batch(i: int) -> object:
    b = new_batch(i)
    s0, s1 = b.shards
    return dataclasses.replace(b, shards=[dataclasses.replace(s0, split="train"),
                                          dataclasses.replace(s1, split="holdout")])


def _next(parent, batch, fraction):  # type: ignore[no-untyped-def]
    return build_version(PREFIX, dataset="toy", schema=SCHEMA, config={}, parent=parent,
                         batch=batch, validation=OK, holdout_fraction=fraction).manifest()


def test_the_version_records_the_fraction_and_refuses_another() -> None:
    legacy = _next(None, new_batch(1), None)
    assert legacy.holdout_fraction is None
    assert legacy.doc is not None and "holdout_fraction" in legacy.doc.to_dict()
    v2 = _next(legacy, _split_batch(2), 0.2)            # a legacy dataset may start the split
    assert v2.holdout_fraction == 0.2
    v3 = _next(v2, new_batch(3), None)                  # no fraction given: the parent's
    assert v3.holdout_fraction == 0.2
    assert _next(v3, _split_batch(4), 0.2).holdout_fraction == 0.2
    with pytest.raises(ConfigError, match=r"holdout_fraction is 0.3.*recorded 0.2"):
        _next(v3, _split_batch(4), 0.3)
    with pytest.raises(ValueError, match="holdout_fraction"):
        _next(legacy, _split_batch(2), None)


def test_batch_lists_carry_the_split_and_older_ones_still_load() -> None:
    b = _split_batch(1)
    bl = BatchList(dataset="toy", batch=b.id, run=b.run, rows=b.rows, quarantined=3,
                   ids_path=b.ids_path, shards=b.shards, quarantine_shards=b.quarantine_shards)
    back = BatchList.from_bytes(bl.to_arrow(), "k")
    assert [s.split for s in back.shards] == ["train", "holdout"]
    assert back.shards == b.shards
    # a format-3 list written before the split column existed
    _, table = shard_table.decode(bl.to_arrow(), "k")
    old = table.drop_columns(["split"]).replace_schema_metadata(
        {shard_table.META_KEY: table.schema.metadata[shard_table.META_KEY]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, old.schema) as w:
        w.write_table(old)
    legacy = BatchList.from_bytes(sink.getvalue().to_pybytes(), "old")
    assert [s.split for s in legacy.shards] == [None, None]
    assert [s.path for s in legacy.shards] == [s.path for s in b.shards]
    cols = shard_table.ShardColumns.from_tables([shard_table.decode(
        sink.getvalue().to_pybytes(), "old")[1], table])
    assert cols.split == [None, None, "train", "holdout"]
    assert cols.split_is(None).tolist() == [True, True, False, False]
    assert cols.split_is("holdout").tolist() == [False, False, False, True]


def test_dataset_fraction_rule() -> None:
    @dataclasses.dataclass
    class V:
        holdout_fraction: float | None
        dataset: str = "toy"
        version: int = 7

    assert dataset_fraction(V(None), None) == HOLDOUT_FRACTION
    assert dataset_fraction(V(None), 0.3) == 0.3          # mixed shards only: the reader's
    assert dataset_fraction(V(0.2), None) == 0.2
    assert dataset_fraction(V(0.2), 0.2) == 0.2
    with pytest.raises(HoldoutMismatch, match=r"toy v7 holds out 0.2.*holdout_fraction = 0.3"):
        dataset_fraction(V(0.2), 0.3)


def _index(n: int, seed: int) -> ShardIndex:
    ids = pa.array([f"s{seed}-{i}" for i in range(n)])
    return ShardIndex(labels=np.zeros(n, np.int64), hashes=trainer_holdout.id_hash64(ids))


def test_the_plan_trains_on_train_shards_and_evaluates_held_out_ones() -> None:
    legacy = _next(None, new_batch(1), None)
    m = _next(legacy, _split_batch(2), 0.2)
    plan = make_plan(m, None, 0.4, None, seed=0)
    splits = [s.split for s in plan.shards]
    assert splits == [None, None, "train", "holdout"]
    assert [s.split for s in plan.train_shards] == [None, None, "train"]
    assert [s.split for s in plan.eval_shards] == [None, None, "holdout"]
    mixed, train, held = plan.shards[0], plan.shards[2], plan.shards[3]
    idx = _index(100, 0)
    mask = trainer_holdout.holdout_mask(idx.hashes, 0.2)
    assert plan.holdout_rows(idx, mixed).tolist() == np.flatnonzero(mask).tolist()
    assert plan.train_rows(mixed, idx).tolist() == np.flatnonzero(~mask).tolist()
    assert plan.holdout_rows(idx, held).tolist() == list(range(100))
    assert plan.holdout_rows(idx, train).tolist() == []
    assert plan.train_rows(train, idx).tolist() == list(range(100))
    assert plan.train_rows(held, idx).tolist() == []
    assert plan.expected_rows(held) == 0.0 and plan.expected_rows(train) == 100
    assert plan.expected_rows(mixed) == pytest.approx(80.0)
    with pytest.raises(HoldoutMismatch):
        make_plan(m, None, 0.4, 0.15, seed=0)


def test_held_out_rows_count_for_neither_new_nor_replay() -> None:
    v1 = _next(None, _split_batch(1), 0.2)
    v2 = _next(v1, _split_batch(2), 0.2)
    plan = make_plan(v2, 1, 0.5, None, seed=0)
    # 100 new train rows, 100 old train rows: replay ratio 0.5 wants 100 old rows -> q = 1
    assert plan.replay_fraction == 1.0
    assert [(s.role, s.split) for s in plan.train_shards] == [("replay", "train"),
                                                              ("new", "train")]


def test_unknown_split_values_are_refused() -> None:
    b = new_batch(1)
    odd = dataclasses.replace(b, shards=[dataclasses.replace(s, split="test")
                                         for s in b.shards])
    m = _next(None, odd, 0.2)
    with pytest.raises(Exception, match="'test'.*not 'train' or 'holdout'"):
        make_plan(m, None, 0.4, None, seed=0)


def test_shard_helper_is_mixed_by_default() -> None:
    assert shard("b", 0).split is None and ShardEntry.from_dict(
        {**dataclasses.asdict(shard("b", 0)), "split": "holdout"}).split == "holdout"
