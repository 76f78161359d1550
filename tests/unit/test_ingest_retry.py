"""The ingest's retry policy: a lost publish race goes back to detect with backoff; other
errors go to the caller at once; transient store errors are retried by the stage."""

from __future__ import annotations

import pytest

from shardline.core.errors import (
    ConfigError,
    PermanentStoreError,
    PublishConflict,
    ServiceUnavailable,
    StoreError,
    TransientStoreError,
    ValidationFailed,
)
from shardline.flows.ingest_tasks import _environment_failure, until_published


def test_conflicts_are_retried_from_the_start_until_published():
    calls: list[int] = []

    def attempt(i: int) -> str:
        calls.append(i)
        if i < 2:
            raise PublishConflict("ids published concurrently")
        return "v3"

    assert until_published(attempt, backoff_s=0.0) == "v3"
    assert calls == [0, 1, 2]


def test_other_errors_are_not_retried():
    calls: list[int] = []

    def attempt(i: int) -> str:
        calls.append(i)
        raise ValidationFailed("batch x failed")

    with pytest.raises(ValidationFailed):
        until_published(attempt, backoff_s=0.0)
    assert calls == [0]


def test_gives_up_after_the_attempts_with_the_last_conflict():
    def attempt(i: int) -> str:
        raise PublishConflict(f"lost {i}")

    with pytest.raises(PublishConflict, match="lost 2"):
        until_published(attempt, attempts=3, backoff_s=0.0)


@pytest.mark.parametrize("exc,env", [
    (TransientStoreError("503 SlowDown"), True), (ConnectionError("reset"), True),
    (RuntimeError("Python worker failed: ... TransientStoreError: get s3://b/k"), True),
    (PermanentStoreError("no such key"), False), (StoreError("bad manifest"), False),
    (RuntimeError("worker crashed"), False), (ValueError("x"), False),
    (ConfigError("holdout_fraction 0.2 differs from the dataset's 0.15"), True),
    (PublishConflict("lost the race"), True),
    (ServiceUnavailable("Spark Connect", "sc://127.0.0.1:1", "refused", "start it"), True),
])
def test_only_environment_failures_spare_the_batch_a_strike(exc, env):
    assert _environment_failure(exc) is env
