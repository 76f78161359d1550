"""The loader's invariants on real Arrow shards (uncompressed v1 + LZ4 v2, several record
batches per shard): exactly once per epoch, rank partition, replay ratio, and that every
gathered image/label really is the row its key names. Exact resume of every loader node:
``test_state_contract``."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import torch

from shardline.trainer.loader import make_train_loader
from shardline.trainer.options import LoaderSpec
from shardline.trainer.plan import TrainPlan
from shardline.trainer.stream import ShardStream
from tests.integration.trainer_data import digits

from .conftest import LocalDigits


def stream(d: LocalDigits, plan: TrainPlan, **kw: object) -> ShardStream:
    args: dict[str, object] = dict(batch_size=32, epochs=2, seed=0, window_rows=200,
                                   window_min_shards=4)
    args.update(kw)
    return ShardStream(plan, d.reader(), **args)  # type: ignore[arg-type]


def epoch_keys(batches: list[dict]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for b in batches:
        out.setdefault(b["epoch"], []).extend(b["key"].tolist())
    return out


def expected_keys(d: LocalDigits, plan: TrainPlan) -> set[int]:
    reader = d.reader()
    return {(s.ordinal << 32) | int(r) for s in plan.train_shards
            for r in plan.train_rows(s, reader.index(s))}


def test_every_training_sample_exactly_once_per_epoch(local_digits: LocalDigits) -> None:
    plan = local_digits.plan(since=None)                  # from scratch: every shard is new
    batches = list(make_train_loader(stream(local_digits, plan, epochs=3), LoaderSpec()))
    per_epoch = epoch_keys(batches)
    want = expected_keys(local_digits, plan)
    assert len(want) > 1400                               # ~85% of 1797 (holdout excluded)
    for keys in per_epoch.values():
        assert Counter(keys).most_common(1)[0][1] == 1    # no repeats
        assert set(keys) == want                          # nothing missing
    assert sorted(per_epoch) == [0, 1, 2]
    assert per_epoch[0] != per_epoch[1]                   # reshuffled each epoch
    assert [b["epoch_end"] for b in batches].count(True) == 3
    assert all(len(b["label"]) == 32 for b in batches if not b["epoch_end"])


def test_same_seed_same_order_other_seed_other_order(local_digits: LocalDigits) -> None:
    plan = local_digits.plan()
    a = [b["key"].tolist() for b in stream(local_digits, plan)]
    b = [b["key"].tolist() for b in stream(local_digits, plan)]
    c = [b["key"].tolist() for b in stream(local_digits, plan, seed=1)]
    assert a == b and a != c


def test_batches_hold_the_pixels_and_labels_their_keys_name(local_digits: LocalDigits) -> None:
    plan = local_digits.plan()
    ids, labels, images = digits()
    tables = {}
    for s in plan.shards:
        with ipc.open_file(pa.memory_map(str(local_digits.root / s.entry.path))) as r:
            tables[s.ordinal] = r.read_all()
    for batch in list(stream(local_digits, plan, epochs=1))[:6]:
        img = batch["image"]
        assert img.dtype == torch.uint8 and tuple(img.shape[1:]) == (1, 8, 8)
        assert batch["label"].dtype == torch.int64
        for k, lab, pix in zip(batch["key"].tolist(), batch["label"].tolist(), img, strict=True):
            row = tables[k >> 32].slice(k & 0xFFFFFFFF, 1)
            src = int(row.column("source_row")[0].as_py())     # index into digits()
            assert lab == int(labels[src])
            assert np.array_equal(pix.permute(1, 2, 0).reshape(-1).numpy(), images[src])


def test_resume_refuses_a_state_from_another_layout(local_digits: LocalDigits) -> None:
    plan = local_digits.plan(since=1)
    loader = make_train_loader(stream(local_digits, plan), LoaderSpec())
    next(iter(loader))
    state = loader.state_dict()
    other = make_train_loader(stream(local_digits, plan, batch_size=16), LoaderSpec())
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="layout"):
        next(iter(other))


def test_ranks_get_disjoint_samples_and_equal_batch_counts(local_digits: LocalDigits) -> None:
    plan = local_digits.plan(since=None)
    want = expected_keys(local_digits, plan)
    for world in (2, 3):
        per_rank = [list(stream(local_digits, plan, rank=r, world=world, epochs=1))
                    for r in range(world)]
        sizes = [[len(b["key"]) for b in batches] for batches in per_rank]
        assert all(s == sizes[0] for s in sizes)          # same count, same sizes: no DDP hang
        keys = [set(epoch_keys(b)[0]) for b in per_rank]
        union = set().union(*keys)
        assert sum(len(k) for k in keys) == len(union)   # disjoint
        assert union <= want
        n_windows = len(set(np.concatenate([b["key"].numpy() for b in per_rank[0]]) >> 32))
        assert len(want) - len(union) <= (world - 1) * n_windows   # at most world-1 per window


def test_replay_share_matches_the_configured_ratio(local_digits: LocalDigits) -> None:
    reader = local_digits.reader()
    for ratio in (0.2, 0.3, 0.5):
        plan = local_digits.plan(since=1, replay=ratio)
        roles = {s.ordinal: s.role for s in plan.shards}
        keys = epoch_keys(list(stream(local_digits, plan, epochs=1)))[0]
        replay = sum(roles[k >> 32] == "replay" for k in keys)
        assert abs(replay / len(keys) - ratio) < 0.02, (ratio, replay, len(keys))
        # the replay sample draws from every older shard, not a few
        assert {k >> 32 for k in keys if roles[k >> 32] == "replay"} == {
            s.ordinal for s in plan.shards if s.role == "replay"}
    # held-out rows are never trained on
    plan = local_digits.plan(since=1)
    held = {(s.ordinal << 32) | int(r) for s in plan.shards
            for r in plan.holdout_rows(reader.index(s))}
    keys = epoch_keys(list(stream(local_digits, plan, epochs=1)))[0]
    assert held and not held & set(keys)


def test_a_resampling_plan_draws_other_replay_rows_each_epoch_at_the_same_cost(
        local_digits: LocalDigits) -> None:
    fixed, fresh = (local_digits.plan(since=1, replay=0.3, resample=r) for r in (False, True))
    assert fixed.fingerprint() != fresh.fingerprint()     # a resumed state cannot mix them
    roles = {s.ordinal: s.role for s in fresh.shards}
    held = {(s.ordinal << 32) | int(r) for s in fresh.shards
            for r in fresh.holdout_rows(local_digits.reader().index(s))}
    by_plan = {}
    for name, plan in (("fixed", fixed), ("fresh", fresh)):
        per_epoch = epoch_keys(list(stream(local_digits, plan, epochs=3)))
        by_plan[name] = per_epoch
        for keys in per_epoch.values():
            assert Counter(keys).most_common(1)[0][1] == 1          # no repeats in an epoch
            assert not held & set(keys)                              # never a held-out row
    new = {e: {k for k in keys if roles[k >> 32] == "new"}
           for e, keys in by_plan["fresh"].items()}
    old = {e: {k for k in keys if roles[k >> 32] == "replay"}
           for e, keys in by_plan["fresh"].items()}
    # epoch 0 is the fixed plan's sample; every epoch reads the same number of rows and
    # every new row; the replay rows differ from epoch to epoch
    assert sorted(by_plan["fresh"][0]) == sorted(by_plan["fixed"][0])
    assert all(len(by_plan["fresh"][e]) == len(by_plan["fixed"][e]) for e in range(3))
    assert new[0] == new[1] == new[2]
    assert len(old[0]) == len(old[1]) == len(old[2]) > 50
    assert old[0] != old[1] and old[1] != old[2]
    assert len(old[0] | old[1] | old[2]) > 2 * len(old[0])          # more of the history
    fixed_old = {k for keys in by_plan["fixed"].values() for k in keys if roles[k >> 32]
                 == "replay"}
    assert fixed_old == old[0]                                      # the fixed plan: one sample


def test_buffers_are_reused_only_after_release(local_digits: LocalDigits) -> None:
    plan = local_digits.plan(since=None)
    s = stream(local_digits, plan, epochs=1)
    kept = [next(s) for _ in range(3)]                    # not released: never overwritten
    snapshot = [b["image"].clone() for b in kept]
    for _ in range(3):
        s.release(next(s))
    assert all(torch.equal(a["image"], b) for a, b in zip(kept, snapshot, strict=True))
    assert s.pool.allocated == 4


@pytest.mark.parametrize("batch_size", [32, 37])          # 37: windows end mid-batch
def test_prebuilt_windows_give_the_same_batches_and_resume(local_digits: LocalDigits,
                                                           batch_size: int) -> None:
    """The helper thread that builds the next window ahead changes nothing: the batches of
    several multi-window epochs equal those of a stream that builds every window itself
    (resume: ``test_state_contract``)."""
    plan = local_digits.plan(since=None)
    kw: dict[str, object] = dict(epochs=3, batch_size=batch_size, window_rows=150)
    s_ahead, s_inline = stream(local_digits, plan, **kw), stream(local_digits, plan,
                                                                prebuild=False, **kw)
    ahead = list(make_train_loader(s_ahead, LoaderSpec()))
    inline = list(make_train_loader(s_inline, LoaderSpec()))
    assert len(ahead) == len(inline) > 3 * 1400 // batch_size
    # every window after the first came from the helper; the inline stream used none
    assert s_ahead.windows_built == s_inline.windows_built > 6
    assert s_ahead.windows_prebuilt == s_ahead.windows_built - 1
    assert s_inline.windows_prebuilt == 0
    for a, b in zip(ahead, inline, strict=True):
        assert a["key"].tolist() == b["key"].tolist() and a["epoch"] == b["epoch"]
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])


@pytest.mark.parametrize("batch_size", [32, 37])
@pytest.mark.parametrize("fits", [True, False])
def test_arena_gives_the_same_batches_and_resume(local_digits: LocalDigits, batch_size: int,
                                                 fits: bool) -> None:
    """Gathering from the shard arena (one take per batch) changes no byte or order (windows
    built on the helper and inline, batches across window edges), and a training set larger
    than the budget is read from the maps (resume: ``test_state_contract``)."""
    plan = local_digits.plan(since=None)
    kw: dict[str, object] = dict(epochs=4, batch_size=batch_size, window_rows=150)
    total = sum(s.entry.rows for s in plan.train_shards) * 64          # 8x8x1 digits
    budget = total if fits else total - 1
    maps = stream(local_digits, plan, arena_bytes=0, **kw)
    s_arena = stream(local_digits, plan, arena_bytes=budget, **kw)
    want = list(make_train_loader(maps, LoaderSpec()))
    got = list(make_train_loader(s_arena, LoaderSpec()))
    assert maps.arena is None and maps.windows_arena == 0
    if fits:
        assert s_arena.arena is not None
        assert s_arena.windows_arena == s_arena.windows_built > 8   # every window
        assert s_arena.arena.copied == len(plan.train_shards)      # each shard once
    else:
        assert s_arena.arena is None
    assert len(got) == len(want) > 4 * 1400 // batch_size
    for a, b in zip(got, want, strict=True):
        assert a["key"].tolist() == b["key"].tolist() and a["epoch"] == b["epoch"]
        assert a["epoch_end"] == b["epoch_end"]
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])


def test_arena_without_the_helper_and_for_one_epoch(local_digits: LocalDigits) -> None:
    plan = local_digits.plan(since=None)
    kw: dict[str, object] = dict(epochs=2, batch_size=37, window_rows=150, prebuild=False)
    inline, maps = stream(local_digits, plan, **kw), stream(local_digits, plan, arena_bytes=0,
                                                            **kw)
    got, want = list(inline), list(maps)
    assert inline.windows_arena == inline.windows_built > 4 and inline.windows_prebuilt == 0
    assert stream(local_digits, plan, epochs=1).arena is None      # one pass: no copy
    assert [b["key"].tolist() for b in got] == [b["key"].tolist() for b in want]
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(got, want, strict=True))


def test_a_window_build_that_fails_part_way_leaves_the_last_window_intact(
        local_digits: LocalDigits) -> None:
    """A shard that cannot be opened while the next window is built (a cold cache's fetch
    failing) must not leave the last window's cached picks paired with part of the new
    window's shards: the same stream started over still gives the maps' exact bytes."""
    plan = local_digits.plan(since=None)
    kw: dict[str, object] = dict(epochs=2, batch_size=37, window_rows=150, prebuild=False)
    s, maps = stream(local_digits, plan, **kw), stream(local_digits, plan, arena_bytes=0, **kw)
    assert s.arena is not None
    want = list(maps)
    s.reset()
    next(s)                                   # window 0 built (and cached)
    real_open, calls = s.reader.open, [0]

    def flaky(shard: object) -> object:
        calls[0] += 1
        if calls[0] == 2:
            raise OSError("injected: shard unreadable")
        return real_open(shard)  # type: ignore[arg-type]

    s.reader.open = flaky  # type: ignore[method-assign]
    with pytest.raises(OSError, match="injected"):
        while True:
            next(s)                           # ... until window 1's build fails part-way
    s.reader.open = real_open  # type: ignore[method-assign]
    s.reset()
    got = list(s)
    assert [b["key"].tolist() for b in got] == [b["key"].tolist() for b in want]
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(got, want, strict=True))


def test_the_arena_budget_is_a_loader_setting(local_digits: LocalDigits) -> None:
    """``LoaderSpec.arena_mb`` (``--arena-mb``): None leaves the stream's automatic choice,
    0 turns the arena off, a budget too small for the training set means no arena."""
    plan = local_digits.plan(since=None)
    total = sum(s.entry.rows for s in plan.train_shards) * 64          # 8x8x1 digits
    assert LoaderSpec().arena_bytes is None
    auto = stream(local_digits, plan, arena_bytes=LoaderSpec().arena_bytes)
    assert auto.arena is not None                                      # small, 2 epochs
    assert stream(local_digits, plan, arena_bytes=LoaderSpec(arena_mb=0).arena_bytes
                  ).arena is None
    tight = LoaderSpec(arena_mb=(total - 1) / 2**20).arena_bytes
    assert stream(local_digits, plan, arena_bytes=tight).arena is None
    roomy = LoaderSpec(arena_mb=total / 2**20 + 1).arena_bytes
    assert stream(local_digits, plan, arena_bytes=roomy).arena is not None
    with pytest.raises(ValueError, match="arena_mb"):
        _ = LoaderSpec(arena_mb=-1).arena_bytes
