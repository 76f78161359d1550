"""``tasks.expire.plan_expiry``: which versions go, over rule and hold scenarios (a pure
function: no store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shardline.tasks.expire import ExpireRefused, parse_age, plan_expiry

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)


def _versions(n: int) -> dict[int, datetime]:
    """Versions 1..n, one a day, the latest written an hour ago."""
    return {v: NOW - timedelta(days=n - v, hours=1) for v in range(1, n + 1)}


def test_keep_n_keeps_the_newest_and_never_the_held() -> None:
    plan = plan_expiry(_versions(10), NOW, keep=3, older_than=None,
                       held={2: "live model", 9: "training"})
    assert plan.latest == 10
    assert plan.expire == [1, 3, 4, 5, 6, 7]
    assert plan.kept == {2: "live model"}          # 9 is among the 3 newest anyway


def test_older_than_and_both_rules() -> None:
    vs = _versions(10)
    assert plan_expiry(vs, NOW, keep=None, older_than=timedelta(days=6), held={}).expire == \
        [1, 2, 3, 4]                                   # 6 days and an hour old or more
    both = plan_expiry(vs, NOW, keep=8, older_than=timedelta(days=6), held={})
    assert both.expire == [1, 2]                     # must break both rules


def test_the_latest_is_never_expired() -> None:
    vs = _versions(3)
    assert plan_expiry(vs, NOW, keep=1, older_than=None, held={}).expire == [1, 2]
    old = plan_expiry(vs, NOW + timedelta(days=99), keep=None, older_than=timedelta(days=1),
                      held={})
    assert 3 not in old.expire and old.expire == [1, 2]
    assert plan_expiry({}, NOW, keep=1, older_than=None, held={}).expire == []


def test_refusals_and_ages() -> None:
    with pytest.raises(ExpireRefused, match="--keep N"):
        plan_expiry(_versions(3), NOW, keep=None, older_than=None, held={})
    with pytest.raises(ExpireRefused, match="always kept"):
        plan_expiry(_versions(3), NOW, keep=0, older_than=None, held={})
    assert parse_age("30d") == timedelta(days=30) == parse_age("30")
    assert parse_age("36h") == timedelta(hours=36) and parse_age("90m") == timedelta(minutes=90)
    with pytest.raises(ExpireRefused, match="not an age"):
        parse_age("-3d")
