"""Thin Prefect task wrappers around the stage functions: build clients from settings, call
the stage, log its result. Transient object-store failures are retried (botocore already
retries single calls; this retries the whole stage, which is idempotent). The stages are
the driver's plain ones (``tasks/driver_stages.py``); what a failure means for the run is
the driver's decision (``tasks/driver.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from shardline.core.config import DatasetConfig, SparkSettings, StoreSettings
from shardline.core.errors import StoreError, is_transient
from shardline.core.manifest import Manifest, recent_manifests
from shardline.core.store import ObjectStore
from shardline.tasks.batch import Batch
from shardline.tasks.convert.converted import Converted
from shardline.tasks.detect import Scope, detect
from shardline.tasks.driver_stages import plain
from shardline.tasks.publish import Published
from shardline.tasks.sweep import SweepResult
from shardline.tasks.validate import ValidationReport

P = ParamSpec("P")
R = TypeVar("R")


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry on store/network errors, never on errors a retry cannot fix."""
    try:
        state.result()
    except (StoreError, ConnectionError, TimeoutError) as exc:
        return is_transient(exc)
    except Exception:
        return False
    return False


def stage_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """``@task`` for a stage: the whole stage is retried on transient errors (it is
    idempotent), never cached."""
    return task(name=name, retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2),
                retry_condition_fn=_transient, cache_policy=NO_CACHE, **options)


@stage_task("sweep")
def sweep_stage(cfg: DatasetConfig, store: StoreSettings, run_id: str) -> SweepResult | None:
    result = plain(ObjectStore(store), cfg).sweep(run_id)
    get_run_logger().info("sweep: %s", result)
    return result


@stage_task("detect")
def detect_stage(cfg: DatasetConfig, store: StoreSettings, scope: Scope = Scope()
                 ) -> Batch | None:
    batch = detect(ObjectStore(store), cfg, scope)
    log = get_run_logger()
    if batch is None:
        log.info("nothing new under s3://%s/%s", store.bucket, cfg.incoming)
    else:
        n = len(batch.sources)
        log.info("%d new object%s (%s bytes), batch %s", n, "" if n == 1 else "s",
                 f"{batch.bytes:,}", batch.id)
    return batch


@stage_task("convert", task_run_name="convert-{batch.id}")
def convert_stage(cfg: DatasetConfig, store: StoreSettings, spark: SparkSettings,
                  batch: Batch, run_id: str) -> Converted:
    conv = plain(ObjectStore(store), cfg, spark).convert(batch, run_id)
    why = f" ({', '.join(f'{k}: {v:,}' for k, v in conv.by_rule.items())})" \
        if conv.by_rule else ""
    get_run_logger().info(
        "%s rows in %d shards, %s quarantined%s, from %s rows; timings %s",
        f"{conv.rows_ok:,}", len(conv.data_shards), f"{conv.rows_quarantined:,}", why,
        f"{conv.rows_in:,}", {k: round(v, 2) for k, v in conv.timings.items()})
    return conv


@stage_task("validate")
def validate_stage(cfg: DatasetConfig, store: StoreSettings, conv: Converted
                   ) -> ValidationReport:
    report = plain(ObjectStore(store), cfg).validate(conv)
    failed = [r["expectation"] for r in report.results if not r["success"]]
    get_run_logger().info("%s: %d expectations on %s rows%s; report %s",
                          "passed" if report.success else "FAILED", len(report.results),
                          f"{report.counts.get('ok', 0):,}",
                          f", failed {', '.join(failed)}" if failed else "", report.report)
    return report


@stage_task("publish")
def publish_stage(cfg: DatasetConfig, store: StoreSettings, conv: Converted,
                  report: ValidationReport) -> Published:
    pub = plain(ObjectStore(store), cfg).publish(conv, report)
    get_run_logger().info("%s version %d: %s rows in %d new shards, %s quarantined (%s)",
                          "published" if pub.created else "already published as",
                          pub.version, f"{pub.rows_published:,}", len(pub.new_shards),
                          f"{pub.rows_quarantined:,}", pub.manifest)
    return pub


@stage_task("load-versions")
def load_versions(cfg: DatasetConfig, store: StoreSettings, last: int = 20) -> list[Manifest]:
    return recent_manifests(ObjectStore(store), cfg.prefix, last)
