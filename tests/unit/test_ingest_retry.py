"""The ingest driver's decisions (``tasks/driver.py``), as plain functions: a lost publish
race goes back to detect with backoff; other errors go to the caller at once; which
failures are the environment's is decided by the exception's type."""

from __future__ import annotations

import pytest

from shardline.core.errors import (
    ConfigError,
    ObjectChanged,
    PermanentStoreError,
    PublishConflict,
    ServiceUnavailable,
    StoreError,
    TransientStoreError,
    ValidationFailed,
    WorkerStoreError,
    is_transient,
    worker_store_error,
)
from shardline.tasks.driver import environment_failure, until_published


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
    (WorkerStoreError("a Spark task failed on the store: TransientStoreError: get"), True),
    (ObjectChanged("s3://b/k is no longer the version with ETag e1"), True),
    (PermanentStoreError("no such key"), False), (StoreError("bad manifest"), False),
    (RuntimeError("worker crashed"), False), (ValueError("x"), False),
    # the text names a store error, the type does not: a data failure (types decide)
    (RuntimeError("Python worker failed: ... TransientStoreError: get s3://b/k"), False),
    (ConfigError("holdout_fraction 0.2 differs from the dataset's 0.15"), True),
    (PublishConflict("lost the race"), True),
    (ServiceUnavailable("Spark Connect", "sc://127.0.0.1:1", "refused", "start it"), True),
])
def test_only_environment_failures_spare_the_batch_a_strike(exc, env):
    assert environment_failure(exc) is env


@pytest.mark.parametrize("text,typed,transient", [
    ("Traceback ...\n  File \"readers.py\", line 283\n"
     "shardline.core.errors.TransientStoreError: get s3://b/k: endpoint timed out", True,
     True),
    ("Python worker failed\nshardline.core.errors.ObjectChanged: s3://b/k changed", True,
     False),
    ("Python worker exited unexpectedly (crashed)", False, False),
])
def test_a_spark_task_store_error_is_typed_once_at_the_boundary(text, typed, transient):
    """A transient fault in a task comes back transient (the driver runs the batch again,
    Prefect retries the stage); a source changed while read does not (re-detect)."""
    got = worker_store_error(RuntimeError(text))
    assert (got is not None) is typed
    if got is not None:
        assert environment_failure(got) and is_transient(got) is transient
        assert text.splitlines()[-1] in str(got)                    # the task's own line


def test_a_transient_fault_is_retried_by_the_driver_and_the_last_one_named():
    """A Spark task's transient fault (typed at the boundary) is run again, as a lost race
    is; after the attempts the fault is raised with its own type and text."""
    calls: list[int] = []

    def attempt(i: int) -> str:
        calls.append(i)
        if i < 2:
            raise worker_store_error(RuntimeError(
                "shardline.core.errors.TransientStoreError: convert task 0 (attempt 1): get "
                "s3://b/in/a.jsonl: the response body failed on each of 6 attempts"))
        return "published"

    assert until_published(attempt, backoff_s=0.0) == "published" and calls == [0, 1, 2]

    def always(i: int) -> str:
        raise TransientStoreError(f"get s3://b/k: reset {i}")

    with pytest.raises(TransientStoreError, match="reset 2"):
        until_published(always, attempts=3, backoff_s=0.0)
