"""One ingest run in plain Python (the flow, the tests and the benchmarks run it): settle,
batches of detect -> convert -> validate -> publish until nothing is new, then the sweep.
The stages are parameters (``driver_stages.Stages``); the decisions are made here, each by
exception type: a lost publish race goes back to detect with backoff
(:func:`until_published`); a batch that fails for its data leaves a strike against its
suspect sources (``tasks.setaside``: the next detect takes clean sources first, then halves
of the suspects) and the run goes on (:func:`drain`), so it is bisected within the run; the
environment failing (:func:`environment_failure`) ends the run at once, striking nothing.
The first failure is raised after the sweep; what the run published stays published.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shardline.core.errors import (
    ConfigError,
    ObjectChanged,
    PublishConflict,
    PublishIncomplete,
    ServiceUnavailable,
    WorkerStoreError,
    is_transient,
    source_replaced,
)
from shardline.tasks.driver_stages import Ingested, Stages
from shardline.tasks.validate import require_success

T = TypeVar("T")
Log = logging.Logger | logging.LoggerAdapter[Any]
_log = logging.getLogger(__name__)

# Not the batch's fault: a wrong config (it would strike every upload it meets), a lost
# race, a service down, a source changed while read, a store error inside a Spark task.
ENVIRONMENT: tuple[type[BaseException], ...] = (
    ConfigError, PublishConflict, PublishIncomplete, ServiceUnavailable, ObjectChanged,
    WorkerStoreError)
# Worth running the batch again from detect: a lost race, or an object the version was to
# name removed before the commit (a sweep on a host with a bad clock).
RACES: tuple[type[BaseException], ...] = (PublishConflict, PublishIncomplete)


def environment_failure(exc: BaseException) -> bool:
    return isinstance(exc, ENVIRONMENT) or is_transient(exc)


@dataclass(frozen=True)
class Policy:
    """How persistent one run is. Backoff 1, 2, 4, 8, 16 s (x 0.5-1.5 jitter) spreads N
    racers out; 64 batches bisect a failed batch of thousands down to a few poison sources.
    ``max_batches=1``: no drain (a test that checks each bisection step)."""

    quiet_s: float = 0.0            # > 0: first wait for an upload burst to end (settle)
    max_batches: int = 64
    attempts: int = 8
    backoff_s: float = 1.0
    seed: int | None = None          # the backoff's jitter


def run_ingest(stages: Stages, run_id: str, policy: Policy = Policy(),
               log: Log = _log) -> list[Ingested]:
    """Run one ingest; returns what each batch published (empty: nothing new). Raises the
    run's first failure, after the sweep."""
    if policy.quiet_s > 0:
        try:
            stages.settle(policy.quiet_s)
        except Exception as exc:     # an optimisation only: never fail the run before detect
            log.warning("settle: could not list the incoming prefix (%s); detecting now", exc)
    passes = itertools.count()

    def one_batch() -> Ingested | None:
        done = until_published(lambda _: _attempt(stages, run_id, next(passes)),
                               policy.attempts, policy.backoff_s, policy.seed, log)
        if done is not None:
            stages.published(done)
        return done

    try:
        results, failure = drain(one_batch, policy.max_batches, log)
        stages.progress(100.0)
        stages.sweep(run_id)   # earlier runs' leftovers: after the versions, off their path
    finally:
        stages.unlease(run_id)
    if failure is not None:
        raise failure
    return results


def _attempt(stages: Stages, run_id: str, n: int) -> Ingested | None:
    """One batch; None: nothing new. Each pass has its own id (staging, keys, strikes)."""
    stages.lease(run_id)    # refreshed at each stage: other runs' sweeps keep this run's files
    batch = stages.detect()
    if batch is None:
        return None
    stages.lease(run_id)
    stages.progress(20.0)
    pass_id = run_id if n == 0 else f"{run_id}r{n}"
    try:
        conv = stages.convert(batch, pass_id)
    except Exception as exc:
        if not environment_failure(exc):
            stages.strike_convert(batch, pass_id, exc)
        raise
    stages.lease(run_id)
    stages.progress(60.0)
    report = stages.validate(conv)
    stages.lease(run_id)
    stages.progress(75.0)
    if not report.success:
        stages.strike_validate(conv, report)
        stages.rejected(batch, conv, report)
    require_success(report, batch.id)   # a failed suite fails the batch; nothing published
    return Ingested(batch, conv, report, stages.publish(conv, report))


def until_published(attempt: Callable[[int], T], attempts: int = 8, backoff_s: float = 1.0,
                    seed: int | None = None, log: Log = _log) -> T:
    """``attempt(i)`` until it does not lose a race: on :class:`PublishConflict` or
    :class:`PublishIncomplete` (an object to be named went missing before the commit), a
    source replaced or deleted while it was read (:func:`source_replaced`: detect then
    lists the replacement as a new upload, or no longer lists it), or a transient store
    fault (:func:`is_transient`, e.g. a Spark task's body cut short: never a strike),
    wait (exponential backoff with jitter) and run it again; other errors go up at once."""
    rng = random.Random(seed)
    for i in range(attempts):
        try:
            return attempt(i)
        except Exception as exc:
            lost = isinstance(exc, RACES)
            if not (lost or source_replaced(exc) or is_transient(exc)) or i == attempts - 1:
                raise
            delay = min(backoff_s * 2 ** i, 30.0) * rng.uniform(0.5, 1.5)
            why = ("lost a publish race" if lost else "found a source replaced during ingest"
                   if source_replaced(exc) else "met a transient store fault")
            log.warning("attempt %d %s (%s: %s); re-detecting in %.1fs", i + 1, why,
                        type(exc).__name__, str(exc)[:300], delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def drain(one_batch: Callable[[], T | None], max_batches: int = 64,
          log: Log = _log) -> tuple[list[T], BaseException | None]:
    """Batches until nothing is new or the environment fails; (results, first failure)."""
    results: list[T] = []
    failure: BaseException | None = None
    for _ in range(max_batches):
        try:
            r = one_batch()
        except Exception as exc:
            failure = failure or exc
            if environment_failure(exc):
                break
            log.warning("batch failed (%s); strikes recorded, trying what is left",
                        (str(exc) or type(exc).__name__).splitlines()[0][:300])
            continue
        if r is None:
            break
        results.append(r)
    return results, failure
