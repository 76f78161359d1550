"""The compaction plan on synthetic shard lists: what is small, what stays apart, how many
shards a group becomes, and that a compacted layout plans nothing."""

from __future__ import annotations

from dataclasses import dataclass

from shardline.core import layout
from shardline.core.parts import ShardEntry
from shardline.tasks.compact_plan import MiB, plan, split_bins


def entry(batch: str, part: int, nbytes: int, rows: int = 10, split: str | None = None,
          label: int | None = 0) -> ShardEntry:
    return ShardEntry(path=layout.shard_key("p", batch, label, part, "r", split), rows=rows,
                      bytes=nbytes, sha256=f"{batch}{part}{split}".ljust(64, "0"), batch=batch,
                      partition={"batch": batch} | ({} if label is None else
                                                    {"label": str(label)}),
                      split=split)


@dataclass
class FakeVersion:
    """What ``plan`` reads of a Manifest."""

    shards: list[ShardEntry]
    dataset: str = "toy"
    version: int = 7
    format: int = 3

    def masks(self) -> dict:
        return {}                  # no deletion vectors


def test_bins_are_near_the_target_and_keep_order() -> None:
    shards = [entry("b", i, 100_000) for i in range(100)]        # 10 MB of 100 KB shards
    bins = split_bins(shards, target_bytes=4_000_000, max_rows=10**6)
    assert len(bins) == 2                                        # round(10 / 4) (no tail bin)
    assert [s for b in bins for s in b] == shards
    assert all(4_000_000 <= sum(s.bytes for s in b) <= 6_000_000 for b in bins)
    # max_rows wins over size
    bins = split_bins(shards, target_bytes=100 * MiB, max_rows=250)
    assert all(sum(s.rows for s in b) <= 250 for b in bins) and len(bins) == 4


def test_groups_keep_batches_and_splits_apart() -> None:
    shards = ([entry("a", i, 1000, label=i) for i in range(10)]
              + [entry("b", i, 1000, split="train", label=i) for i in range(5)]
              + [entry("b", i, 1000, split="holdout", label=i) for i in range(3)]
              + [entry("b", 99, 10 * MiB, label=None)])             # large: untouched
    p = plan(FakeVersion(shards), min_bytes=MiB, target_bytes=2 * MiB,  # type: ignore[arg-type]
             max_rows=10**6)
    got = {(g.batch, dict(g.key).get("split")): (len(g.inputs), len(g.bins)) for g in p.groups}
    assert got == {("a", "mixed"): (10, 1), ("b", "train"): (5, 1), ("b", "holdout"): (3, 1)}
    assert p.shards_before == 19 and p.shards_after == 4 and p.rows == 180
    for g in p.groups:
        assert {s.batch for s in g.inputs} == {g.batch}
        assert len({s.split for s in g.inputs}) == 1


def test_a_compacted_layout_plans_nothing() -> None:
    # one small shard per group cannot get fewer shards; large shards are not small
    shards = [entry("a", 0, 1000, label=None), entry("b", 0, 5 * MiB, label=None),
              entry("b", 1, 5 * MiB, label=None)]
    p = plan(FakeVersion(shards), min_bytes=MiB, target_bytes=8 * MiB,  # type: ignore[arg-type]
             max_rows=10**6)
    assert p.groups == [] and p.shards_after == p.shards_before == 3
