"""Bisection of failed batches (``tasks.setaside.next_sources``), as a pure function.

A simulated ingest loop: each run takes ``next_sources`` of what is unclaimed and not set
aside; a batch holding a poison source fails (a strike against all of it, as a Spark task
crash does), any other batch is published. The invariants: every innocent source is
published, every poison source is set aside, nothing is both, and the number of runs stays
within the bisection bound.
"""

from __future__ import annotations

import math
import random

import pytest

from shardline.tasks.batch import Source
from shardline.tasks.detect import new_sources
from shardline.tasks.setaside import STRIKES, Strike, Strikes, next_sources


def _src(i: int) -> Source:
    return Source(f"in/obj{i:05d}.jsonl", f"etag{i}", 10, "jsonl")


def _simulate(n: int, poison: set[int], *, arrivals: dict[int, list[int]] | None = None,
              max_runs: int = 10_000) -> tuple[set[int], set[int], int, dict[int, int]]:
    """Runs until nothing is left; returns (published, aside, runs, run of each publish)."""
    arrivals = arrivals or {}
    listed = [_src(i) for i in range(n)]
    strikes = Strikes()
    published: set[int] = set()
    published_at: dict[int, int] = {}
    runs = 0
    while runs < max_runs:
        for i in arrivals.get(runs, []):
            listed.append(_src(i))
        aside = strikes.aside()
        claimed = {(_src(i).key, _src(i).etag) for i in published} | set(aside)
        batch = new_sources(listed, claimed, strikes)
        if batch is None:
            if any(r > runs for r in arrivals):
                runs += 1
                continue
            break
        runs += 1
        ids = {int(s.key[-11:-6]) for s in batch.sources}
        if ids & poison:
            strikes.docs.append(Strike(
                run=f"r{runs}", order=(float(runs), 0.0, f"r{runs}"), final=False,
                suspects=frozenset((s.key, s.etag) for s in batch.sources),
                reason=f"convert failed in run r{runs}: executor lost"))
        else:
            published |= ids
            for i in ids:
                published_at[i] = runs
    aside_ids = {int(k[-11:-6]) for k, _ in strikes.aside()}
    return published, aside_ids, runs, published_at


@pytest.mark.parametrize("n,poison", [(1, {0}), (2, {1}), (16, {5}), (1000, {999}),
                                      (1000, {3, 500, 777}), (64, set(range(0, 64, 9)))])
def test_bisection_sets_aside_exactly_the_poison_and_publishes_the_rest(n, poison):
    published, aside, runs, _ = _simulate(n, poison)
    assert aside == poison
    assert published == set(range(n)) - poison
    assert not published & aside
    # one failing run per halving per poison source, plus the runs that clear innocents
    bound = 1 + len(poison) * (2 * math.ceil(math.log2(max(n, 2))) + STRIKES + 1)
    assert runs <= bound, (runs, bound)


def test_random_poison_sets_converge():
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randint(1, 300)
        poison = set(rng.sample(range(n), rng.randint(0, min(n, 4))))
        published, aside, _, _ = _simulate(n, poison)
        assert aside == poison and published == set(range(n)) - poison


def test_a_clean_upload_is_published_by_the_next_run_whatever_failed_before():
    # 100 objects, one poison; 5 clean objects arrive after the first failure (run 1)
    published, aside, _, at = _simulate(100, {42}, arrivals={1: [100, 101, 102, 103, 104]})
    assert aside == {42}
    # the late clean objects (listed after run 1's failure) go in run 2, before any bisection
    assert [at[i] for i in range(100, 105)] == [2] * 5
    assert all(at[i] > 2 for i in range(100) if i != 42)


def test_a_group_that_did_not_fail_together_is_tried_whole():
    a, b, c, d = (_src(i) for i in range(4))
    four = frozenset((s.key, s.etag) for s in (a, b, c, d))
    struck = Strikes([Strike("r1", (1.0, 0.0, "r1"), four, False, "convert failed")])
    assert next_sources((a, b, c, d), struck) == (a, b)          # failed together: halve
    assert next_sources((c, d), struck) == (c, d)                # a, b published since
    assert next_sources((a, b, c, d, _src(9)), struck) == (_src(9),)   # clean first


def test_a_source_is_set_aside_only_once_it_failed_alone():
    a, b = _src(0), _src(1)
    both = frozenset((s.key, s.etag) for s in (a, b))
    s = Strikes([Strike("r1", (1.0, 0.0, "r1"), both, False, "x"),
                 Strike("r2", (2.0, 0.0, "r2"), both, False, "x")])
    assert s.aside() == {}                                       # never alone: bisect on
    s.docs.append(Strike("r3", (3.0, 0.0, "r3"), frozenset({(a.key, a.etag)}), False, "alone"))
    assert set(s.aside()) == {(a.key, a.etag)}
    s.docs.append(Strike("r4", (4.0, 0.0, "r4"), frozenset({(b.key, b.etag)}), True, "empty"))
    assert set(s.aside()) == {(a.key, a.etag), (b.key, b.etag)}   # a final strike: at once
