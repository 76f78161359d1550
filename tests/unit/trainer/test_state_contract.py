"""One save/load-state contract, run over every stateful node of the trainer's loader.

For a node factory: the batches of an uninterrupted run are the reference. A second run
saves ``Loader.state_dict()`` at several points (the start, inside the first window,
either side of an epoch's end, every few batches, the last batch, after the end) without
being disturbed by the saving; each saved state, round-tripped through JSON as a
checkpoint stores it, restores a fresh node whose remaining batches are exactly the
reference's remainder (same keys, epochs, epoch ends and every tensor); a state saved by a
restored run restores too.

The nodes: ``ShardStream`` (arena, maps, inline window builds, batches crossing windows,
a replay sample drawn afresh every epoch, a rank of several, typed fields with a
multi-label and a regression target) and ``ThreadPrefetcher`` (over the stream, and over a
plain counting node).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchdata.nodes import BaseNode, Loader

from shardline.trainer.prefetch import ThreadPrefetcher
from shardline.trainer.stream import ShardStream

from .conftest import LocalDigits, LocalFields
from .test_prefetch import Counter

Factory = Callable[[], BaseNode[Any]]


def loader(node: BaseNode[Any]) -> Loader[Any]:
    """As ``make_train_loader`` wraps the trainer's nodes: a state saved at the end resumes
    to nothing (torchdata's default would start a new pass)."""
    return Loader(node, restart_on_stop_iteration=False)


def same(a: Any, b: Any) -> bool:
    """Batches (dicts of tensors and ints) or plain items are equal."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return bool(a == b)


def _stops(full: list[Any]) -> list[int]:
    n = len(full)
    ends = [i for i, b in enumerate(full) if isinstance(b, dict) and b["epoch_end"]]
    edges = [e + d for e in ends for d in (0, 1)]          # the last batch of an epoch, next
    return sorted({0, 1, 2, n - 1, n, *range(3, n, max(1, n // 6)), *edges} & set(range(n + 1)))


def run_save_load_contract(make: Factory) -> None:
    full = list(loader(make()))
    assert len(full) > 4, "the contract needs a few items to stop between"
    stops = _stops(full)
    run = loader(make())
    it, states, seen = iter(run), {}, []
    for k in range(len(full) + 1):
        if k in stops:          # as a checkpoint stores it: JSON, then read back
            states[k] = json.loads(json.dumps(run.state_dict()))
        if k < len(full):
            seen.append(next(it))
    with pytest.raises(StopIteration):
        next(it)
    assert len(seen) == len(full) and all(map(same, seen, full))    # saving disturbs nothing
    for k, state in states.items():
        resumed = loader(make())
        resumed.load_state_dict(state)
        rest = list(resumed)
        assert len(rest) == len(full) - k, f"stopped after {k}"
        assert all(map(same, rest, full[k:])), f"stopped after {k}"
    # a restored run's own state restores too (resume twice)
    k = stops[len(stops) // 2]
    resumed = loader(make())
    resumed.load_state_dict(states[k])
    it = iter(resumed)
    for _ in range(min(2, len(full) - k)):
        next(it)
    again = loader(make())
    again.load_state_dict(json.loads(json.dumps(resumed.state_dict())))
    assert all(map(same, list(again), full[k + min(2, len(full) - k):]))


def _digits(d: LocalDigits, resample: bool = False, **kw: Any) -> Factory:
    args: dict[str, Any] = dict(batch_size=32, epochs=2, seed=0, window_rows=200,
                                window_min_shards=4)
    args.update(kw)
    plan = d.plan(since=1, resample=resample)  # plain v1 + LZ4 v2 shards, replay
    return lambda: ShardStream(plan, d.reader(), **args)


def _fields(d: LocalFields, **kw: Any) -> Factory:
    args: dict[str, Any] = dict(batch_size=24, epochs=2, seed=0, window_rows=90,
                                window_min_shards=2)
    args.update(kw)
    plan = d.plan(since=1)
    return lambda: ShardStream(plan, d.reader(), **args)


NODES: dict[str, Callable[[pytest.FixtureRequest], Factory]] = {
    "stream": lambda r: _digits(r.getfixturevalue("local_digits")),
    "stream_arena_37": lambda r: _digits(r.getfixturevalue("local_digits"), batch_size=37,
                                         window_rows=150, arena_bytes=1 << 30),
    "stream_maps_37": lambda r: _digits(r.getfixturevalue("local_digits"), batch_size=37,
                                        window_rows=150, arena_bytes=0),
    "stream_inline": lambda r: _digits(r.getfixturevalue("local_digits"), prebuild=False,
                                       arena_bytes=0, epochs=3),
    "stream_replay_resampled": lambda r: _digits(r.getfixturevalue("local_digits"),
                                                 resample=True, epochs=3, batch_size=37),
    "stream_rank_1_of_3": lambda r: _digits(r.getfixturevalue("local_digits"), rank=1,
                                            world=3, batch_size=16),
    "stream_typed_multilabel": lambda r: _fields(r.getfixturevalue("local_fields")),
    "stream_typed_arena": lambda r: _fields(r.getfixturevalue("local_fields"),
                                            arena_bytes=1 << 30, batch_size=17),
    "stream_regression": lambda r: _fields(r.getfixturevalue("local_regression"),
                                           batch_size=10),
    "prefetch_stream": lambda r: (lambda f: lambda: ThreadPrefetcher(f(), 4))(
        _digits(r.getfixturevalue("local_digits"), batch_size=37, window_rows=150)),
    "prefetch_stream_group_2": lambda r: (lambda f: lambda: ThreadPrefetcher(f(), 4, 2))(
        _fields(r.getfixturevalue("local_fields"))),
    "prefetch_counter_depth_1": lambda r: lambda: ThreadPrefetcher(Counter(23), 1),
    "prefetch_counter_group_1": lambda r: lambda: ThreadPrefetcher(Counter(23), 4, 1),
}


@pytest.mark.parametrize("node", sorted(NODES))
def test_save_load_state(node: str, request: pytest.FixtureRequest) -> None:
    run_save_load_contract(NODES[node](request))
