"""The batch gather: per-batch sorting keeps every pick exactly once, and any slice gathers
exactly the rows, labels and keys its picks name (runs of one segment, slice edges)."""

from __future__ import annotations

import numpy as np
import pytest

from shardline.trainer.picks import Picks, _chunk_order, gather_into, plan_batches


@pytest.mark.parametrize("phase", [0, 1, 7, 8, 13])
@pytest.mark.parametrize("n", [1, 8, 29, 64])
def test_chunk_order_sorts_each_batch_span_and_moves_nothing_across(n: int, phase: int) -> None:
    keys = np.random.default_rng(n + phase).permutation(1000)[:n].astype(np.int64)
    order = _chunk_order(keys, 8, phase)
    assert sorted(order.tolist()) == list(range(n))          # a permutation
    edges = [0, *range(phase % 8, n, 8)[1 if phase % 8 == 0 else 0:], n]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        span = order[a:b]
        assert set(span.tolist()) == set(range(a, b))        # stays within its batch
        assert (np.diff(keys[span]) > 0).all()               # sorted inside it


def _picks(rng: np.random.Generator) -> tuple[Picks, list[np.ndarray]]:
    segments = [rng.integers(0, 256, (rows, 12), dtype=np.uint8) for rows in (5, 9, 3, 7)]
    seg = np.concatenate([np.full(len(s), i, np.int32) for i, s in enumerate(segments)])
    row = np.concatenate([np.arange(len(s)) for s in segments]).astype(np.int64)
    key = np.arange(len(seg), dtype=np.int64) + (7 << 32)
    # two columns per segment: the bytes, and a 4-byte column derived from them
    base = Picks([(s, s[:, :4] ^ 0xFF) for s in segments], seg, row,
                 seg.astype(np.int64) * 10, key)
    return base.select(rng.permutation(len(seg)), chunk=4, phase=3), segments


def test_any_slice_gathers_exactly_its_picks() -> None:
    rng = np.random.default_rng(0)
    picks, segments = _picks(rng)
    original = picks.key - (7 << 32)                    # position before select
    assert sorted(original.tolist()) == list(range(len(picks)))
    assert (picks.label == picks.seg * 10).all()        # labels travel with their picks
    for lo in range(len(picks)):
        for hi in range(lo, len(picks) + 1):
            out, out4 = np.zeros((30, 12), np.uint8), np.zeros((30, 4), np.uint8)
            labels, keys = np.zeros(30, np.int64), np.zeros(30, np.int64)
            gather_into([out, out4], picks, lo, hi, 2, labels, keys)
            want = np.array([segments[s][r] for s, r in zip(picks.seg[lo:hi],
                                                             picks.row[lo:hi], strict=True)],
                            np.uint8)
            assert np.array_equal(out[2:2 + hi - lo], want.reshape(-1, 12))
            assert np.array_equal(out4[2:2 + hi - lo], want.reshape(-1, 12)[:, :4] ^ 0xFF)
            assert not out4[:2].any() and not out4[2 + hi - lo:].any()
            assert (labels[2:2 + hi - lo] == picks.label[lo:hi]).all()
            assert (keys[2:2 + hi - lo] == picks.key[lo:hi]).all()
            assert not out[:2].any() and not out[2 + hi - lo:].any()


@pytest.mark.parametrize("phase", [0, 1, 3, 4])
def test_batch_plans_copy_exactly_what_the_gather_copies(phase: int) -> None:
    """Every full batch span [phase + k*4, +4) has a plan, and running it fills the same
    bytes as ``gather_into`` over that span; partial spans have none (the stream gathers
    those itself)."""
    picks, _ = _picks(np.random.default_rng(phase))
    plan_batches(picks, 4, phase)
    starts = list(range(phase % 4, len(picks) - 4 + 1, 4))
    assert sorted(picks.plans) == starts and starts
    for s in starts:
        want = [np.zeros((4, 12), np.uint8), np.zeros((4, 4), np.uint8)]
        gather_into(want, picks, s, s + 4, 0)
        got = [np.zeros((4, 12), np.uint8), np.zeros((4, 4), np.uint8)]
        assert len(picks.plans[s]) == 2                        # one copy list per column
        for out, copies in zip(got, picks.plans[s], strict=True):
            for take, rows, a, b in copies:
                take(rows, 0, out[a:b], "clip")
            assert sum(b - a for _, _, a, b in copies) == 4
        assert all((g == w).all() for g, w in zip(got, want, strict=True))
