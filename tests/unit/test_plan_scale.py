"""The trainer's plan over a synthetic 100k-shard / 200-batch history (issue 10's bar):
checked for correctness here; its time is printed, not asserted (shared machine)."""

from __future__ import annotations

import time

from shardline.trainer.plan import make_plan
from shardline.trainer.trust import check_shard_columns
from tests.unit.manifest_fixtures import PREFIX
from tests.unit.scale_history import batch_shards, synthetic_history


def test_plan_over_100k_shards_200_batches() -> None:
    bucket, m = synthetic_history(200, 500)
    c0, t0 = time.process_time(), time.perf_counter()
    check_shard_columns(m.shard_columns, PREFIX, "v200")     # what open_context does first
    plan = make_plan(m, 150, 0.3, 0.1, seed=7)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nread + trust check + plan over {len(plan.shards)} shards / "
          f"{len(m.batch_lists)} batches: {took:.3f} s wall, {cpu:.3f} s CPU")
    assert len(plan.shards) == 100_000 and m.totals.shards == 100_000
    assert [s.ordinal for s in plan.shards] == list(range(100_000))
    assert [s.dataset_version for s in plan.shards[::500]] == list(range(1, 201))
    roles = [s.role for s in plan.shards]
    assert roles == ["replay"] * 150 * 500 + ["new"] * 50 * 500
    new_rows = sum(s.rows for i in range(151, 201) for s in batch_shards(i, 500, 10))
    old_rows = sum(s.rows for i in range(1, 151) for s in batch_shards(i, 500, 10))
    assert abs(plan.replay_fraction - (0.3 / 0.7) * new_rows / old_rows) < 1e-12
    # entries are built on use and equal what was published
    for i in (0, 499, 500, 77_777, 99_999):
        assert plan.shards[i].entry == batch_shards(i // 500 + 1, 500, 10)[i % 500]
    # only batch lists, once each, were read (plus the checkpoint)
    lists = [k for k in bucket.reads if "/manifests/batch=" in k]
    assert len(lists) == len(set(lists)) == 200
