"""Bisection of failed batches (``tasks.setaside.next_sources``) as the ingest driver runs
it (``tasks/driver.py``), on plain in-memory stages (``driver_world``).

Ingest runs follow each other until one finds nothing new; in each, a batch holding a
poison source fails in convert (a strike against all of it, as a Spark task crash does)
and the run drains what is left; any other batch is published. The invariants: every
innocent source is published, every poison source is set aside, nothing is both, and the
number of batches stays within the bisection bound.
"""

from __future__ import annotations

import math
import random

import pytest

from shardline.tasks.setaside import STRIKES, Strike, Strikes, next_sources
from tests.unit.driver_world import World, src

_src = src


def _simulate(n: int, poison: set[int], *, arrivals: dict[int, list[int]] | None = None,
              max_runs: int = 1000) -> tuple[set[int], set[int], int, dict[int, int]]:
    """Runs until nothing is left; returns (published, aside, batches, batch of each
    publish)."""
    world = World(n, crash=poison, arrivals=arrivals or {})
    for r in range(max_runs):
        done, failure = world.run(f"run{r}")
        assert failure is None or str(failure) == "executor lost"
        if not done and failure is None and not any(b > world.batches for b in world.arrivals):
            break
        if not done and failure is None:
            world.batches += 1                   # an idle run: nothing listed yet
    assert set(world.published) & world.aside() == set()
    return set(world.published), world.aside(), world.batches, world.published


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
