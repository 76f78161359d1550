"""Thin Prefect task wrappers around the stage functions: build clients from settings, call
the stage, log its result. Transient object-store failures are retried (botocore already
retries single calls; this retries the whole stage, which is idempotent). A conversion
that fails for any other reason, and a failed validation, leave a strike against the
batch's suspect sources (``tasks.setaside``): detect then puts clean sources first and
bisects the suspects down to the failing one, which it sets aside, so one poisoned upload
never blocks the uploads after it. ``PublishConflict`` is not retried
here with the same converted batch (it would conflict again): the flow goes back to detect
and converts what is still unpublished (see ``flows/ingest.py``)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from shardline.core.config import DatasetConfig, SparkSettings, StoreSettings
from shardline.core.errors import (
    ConfigError,
    ObjectChanged,
    ObjectExists,
    PublishConflict,
    ServiceUnavailable,
    StoreError,
    ValidationFailed,
    is_transient,
)
from shardline.core.manifest import Manifest, latest_manifest, list_versions, read_manifest
from shardline.core.store import ObjectStore
from shardline.tasks import detect as detect_mod
from shardline.tasks import publish as publish_mod
from shardline.tasks import setaside
from shardline.tasks import sweep as sweep_mod
from shardline.tasks import validate as validate_mod
from shardline.tasks.batch import Batch
from shardline.tasks.convert import stage as convert_mod

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# Racing ingests of different uploads: each lost race re-detects (what the winner published
# is claimed now) and converts only the rest. Backoff 1, 2, 4, 8, 16 s (x 0.5-1.5 jitter),
# so N racers spread out; more attempts than racers a person would start at once.
CONFLICT_ATTEMPTS = 8
CONFLICT_BACKOFF_S = 1.0
_log = logging.getLogger(__name__)


def until_published(attempt: Callable[[int], T], attempts: int = CONFLICT_ATTEMPTS,
                    backoff_s: float = CONFLICT_BACKOFF_S, seed: int | None = None) -> T:
    """Run ``attempt(i)`` (detect -> convert -> validate -> publish) until it does not lose a
    race: on :class:`PublishConflict` wait (exponential backoff with jitter) and run it
    again from detect. Any other error goes to the caller at once."""
    rng = random.Random(seed)
    for i in range(attempts):
        try:
            return attempt(i)
        except PublishConflict as exc:
            if i == attempts - 1:
                raise
            delay = min(backoff_s * 2 ** i, 30.0) * rng.uniform(0.5, 1.5)
            _log.warning("attempt %d lost a publish race (%s); re-detecting in %.1fs",
                         i + 1, str(exc)[:200], delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry on store/network errors, never on errors a retry cannot fix."""
    try:
        state.result()
    except (ObjectExists, ObjectChanged, ValidationFailed, PublishConflict, ConfigError):
        return False
    except (StoreError, ConnectionError, TimeoutError) as exc:
        return is_transient(exc)
    except Exception:
        return False
    return False


def _environment_failure(exc: BaseException) -> bool:
    """A failure of the run's environment, not of the batch: transient store errors, also
    when they come back from a Spark task as text inside Spark's own exception; a wrong
    configuration (it would strike, and then set aside, every upload it meets); a lost
    publish race; Spark or another service being down."""
    if isinstance(exc, ConfigError | PublishConflict | ServiceUnavailable):
        return True
    text = str(exc)
    return is_transient(exc) or "TransientStoreError" in text or "ObjectChanged" in text


def stage_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """``@task`` for a stage: the whole stage is retried on transient errors (it is
    idempotent), never cached."""
    return task(name=name, retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2),
                retry_condition_fn=_transient, cache_policy=NO_CACHE, **options)


@stage_task("sweep")
def sweep_stage(cfg: DatasetConfig, store: StoreSettings, run_id: str) -> sweep_mod.SweepResult:
    result = sweep_mod.sweep(ObjectStore(store), cfg, keep_run=run_id, full=False)
    get_run_logger().info("sweep: %s", result)
    return result


@stage_task("detect")
def detect_stage(cfg: DatasetConfig, store: StoreSettings) -> Batch | None:
    batch = detect_mod.detect(ObjectStore(store), cfg)
    log = get_run_logger()
    if batch is None:
        log.info("nothing new under s3://%s/%s", store.bucket, cfg.incoming)
    else:
        log.info("batch %s: %d new sources (%d bytes)", batch.id, len(batch.sources),
                 batch.bytes)
    return batch


@stage_task("convert", task_run_name="convert-{batch.id}")
def convert_stage(cfg: DatasetConfig, store: StoreSettings, spark: SparkSettings,
                  batch: Batch, run_id: str) -> convert_mod.Converted:
    s = ObjectStore(store)
    try:
        conv = convert_mod.convert(s, cfg, spark, batch, run_id, latest_manifest(s, cfg.prefix))
    except Exception as exc:
        if not _environment_failure(exc):
            setaside.record_conversion_failure(s, cfg, batch, run_id, exc)
        raise
    get_run_logger().info(
        "converted: %d rows in, %d ok, %d quarantined %s; %d data shards; timings %s",
        conv.rows_in, conv.rows_ok, conv.rows_quarantined, conv.by_rule,
        len(conv.data_shards), {k: round(v, 2) for k, v in conv.timings.items()})
    return conv


@stage_task("validate")
def validate_stage(cfg: DatasetConfig, store: StoreSettings, conv: convert_mod.Converted
                   ) -> validate_mod.ValidationReport:
    s = ObjectStore(store)
    report = validate_mod.validate(s, cfg, conv)
    if not report.success:
        setaside.record_validation_failure(
            s, cfg, conv.batch, conv.run_id,
            conv.iter_rows(s, columns=["source_key", "status", "rule"]),
            report.failure_message())
    get_run_logger().info("validation %s: %s", "passed" if report.success else "FAILED",
                          report.summary())
    return report


@stage_task("publish")
def publish_stage(cfg: DatasetConfig, store: StoreSettings, conv: convert_mod.Converted,
                  report: validate_mod.ValidationReport) -> publish_mod.Published:
    pub = publish_mod.publish(ObjectStore(store), cfg, conv, report)
    get_run_logger().info("%s version %d (%s): %d rows in %d new shards, %d quarantined",
                          "published" if pub.created else "already published as",
                          pub.version, pub.manifest, pub.rows_published, len(pub.new_shards),
                          pub.rows_quarantined)
    return pub


@stage_task("load-versions")
def load_versions(cfg: DatasetConfig, store: StoreSettings, last: int = 20) -> list[Manifest]:
    s = ObjectStore(store)
    return [read_manifest(s, cfg.prefix, v) for v in list_versions(s, cfg.prefix)[-last:]]
