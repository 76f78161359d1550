"""The ``ingest`` flow: the ingest driver (``tasks/driver.py``: settle, detect, convert,
validate, publish, race retries, bisection, drain, sweep) run with this flow's Prefect
tasks (``flows/ingest_tasks.py``) and its reporting: a progress artifact, and for a new
version the ``shardline.dataset.published`` event (resource ``shardline.dataset.<name>``,
the version and the dataset config *by value* in the payload, so the training deployment
can run on another machine), then the artifacts. A run where a batch failed ends Failed
after the rest of its work (docs/reliability.md).

``config`` is a local path (the CLI), an ``s3://`` URI of the TOML object, or the config by
value (dict or TOML text); see ``flows/config_source.py``. Runs are named
``ingest-<dataset>-v<N>-<trigger>-<id6>`` (``-nothing-new-`` when there was nothing to
ingest, ``v<N>-existing`` when the batch had been published before, ``-running-`` until
then and ``-failed-`` for a run that failed) and tagged with the dataset and the trigger from
its start (``flows/runs.py``).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.events import emit_event
from prefect.runtime import flow_run

from shardline.core.config import DatasetConfig, SparkSettings, StoreSettings
from shardline.core.store import ObjectStore
from shardline.flows.artifacts import artifact_key, publish_ingest_artifacts
from shardline.flows.config_source import dataset_name, load_with_document
from shardline.flows.ingest_tasks import (
    convert_stage,
    detect_stage,
    load_versions,
    publish_stage,
    sweep_stage,
    validate_stage,
)
from shardline.flows.quarantine_view import quarantine_source
from shardline.flows.runs import label_run, mark_failed, short_id, start_run
from shardline.flows.settings import spark_settings, store_settings
from shardline.tasks.detect import Scope, resolve_scope, settle_scope
from shardline.tasks.driver import Policy, run_ingest
from shardline.tasks.driver_stages import Ingested, Stages, plain, summarise
from shardline.tasks.settle import Settled, wait_until_quiet

PUBLISHED_EVENT = "shardline.dataset.published"


def _run_name() -> str:
    """The name until the outcome is known (then ``label_run`` renames the run)."""
    return f"ingest-{dataset_name(flow_run.parameters.get('config'))}-running-{short_id()}"


def _run_id() -> str:
    rid = flow_run.id
    return (str(rid) if rid else uuid.uuid4().hex)[:12].replace("-", "")


@task(name="settle")
def settle_stage(store: Any, prefix: str, quiet_s: float, start_after: str | None = None
                 ) -> Settled:
    """Wait for an upload burst to end (the driver goes on to detect if this fails)."""
    got = wait_until_quiet(ObjectStore(store), prefix, quiet_s, start_after=start_after)
    get_run_logger().info("settle: waited %.2fs for %.1fs without uploads under %s (%s)",
                          got.waited_s, quiet_s, prefix, got)
    return got


def _stages(cfg: DatasetConfig, store: StoreSettings, spark: SparkSettings,
            document: dict[str, Any], progress: uuid.UUID, scope: Scope) -> Stages:
    """The driver's stages as this flow's Prefect tasks, and its reporting: the progress
    artifact, the event and the artifacts of each published batch, the artifacts of a
    rejected one."""

    def rejected(batch: Any, conv: Any, report: Any) -> None:
        publish_ingest_artifacts(cfg.name, [], report, batch.id, None,
                                 conv.quarantine_examples(),
                                 quarantine_source(cfg, store, conv.quarantine_shards))

    def published(done: Ingested) -> None:
        pub = done.pub
        if pub.created:   # first: training need not wait for this run's artifacts
            emit_event(
                event=PUBLISHED_EVENT,
                resource={"prefect.resource.id": f"shardline.dataset.{cfg.name}",
                          "prefect.resource.name": cfg.name},
                payload={"dataset": cfg.name, "version": pub.version, "manifest": pub.manifest,
                         "rows": pub.rows_published, "config": document},
            )
        update_progress_artifact(progress, 90.0)
        publish_ingest_artifacts(cfg.name, load_versions(cfg, store), done.report,
                                 done.batch.id, pub.version, done.conv.quarantine_examples(),
                                 quarantine_source(cfg, store, pub.quarantine_shards))

    def settle(quiet_s: float) -> Settled | None:
        where = settle_scope(ObjectStore(store), cfg, scope)
        return None if where is None else settle_stage(store, where[0], quiet_s, where[1])

    return dataclasses.replace(
        plain(ObjectStore(store), cfg, spark),          # the strikes: plain store writes
        settle=settle,
        detect=lambda: detect_stage(cfg, store, scope),
        convert=lambda batch, pass_id: convert_stage(cfg, store, spark, batch, pass_id),
        validate=lambda conv: validate_stage(cfg, store, conv),
        publish=lambda conv, report: publish_stage(cfg, store, conv, report),
        sweep=lambda keep: sweep_stage(cfg, store, keep),
        progress=lambda pct: update_progress_artifact(progress, pct),
        rejected=rejected, published=published)


@flow(name="ingest", flow_run_name=_run_name, log_prints=True, on_failure=[mark_failed],
      on_crashed=[mark_failed])
def ingest(config: str | dict[str, Any], quiet_seconds: float = 0.0, events: bool = False,
           keys: list[str] | None = None, full: bool = False) -> dict[str, Any]:
    """Ingest what is new under the dataset's incoming prefix; returns an IngestResult dict.

    ``quiet_seconds`` > 0 (the upload-triggered deployment) first waits until no upload
    landed for that long, so a burst of uploads becomes one version (``tasks/settle.py``).
    What detect looks at (``tasks.detect.Scope``): ``events`` (the upload-triggered
    deployment) the pending upload keys its events recorded, no listing of incoming/;
    ``keys`` exactly these; otherwise a reconciling listing, in full with ``full``."""
    log = get_run_logger()
    config_, document = load_with_document(config)   # the event carries the document
    cfg = config_.dataset
    trigger = start_run("ingest", cfg.name)   # tags now: a failed run is the dataset's too
    store, spark = store_settings(), spark_settings()
    run_id = _run_id()
    progress = create_progress_artifact(0.0, key=artifact_key(cfg.name, "ingest-progress"),
                                        description=f"ingest of {cfg.name}")
    if not isinstance(progress, uuid.UUID):   # a coroutine only for an async caller
        raise TypeError(f"create_progress_artifact returned {type(progress).__name__}")
    scope = resolve_scope(ObjectStore(store), cfg,
                          Scope(events=events, keys=tuple(keys or ()), full=full))
    stages = _stages(cfg, store, spark, document, progress, scope)
    done = run_ingest(stages, run_id, Policy(quiet_s=quiet_seconds), log)
    result = summarise(cfg.name, done, f"s3://{store.bucket}/{cfg.incoming}")
    if result.version is None:
        log.info(result.message)
    label_run("ingest", cfg.name, "nothing-new" if result.version is None else
              result.version if result.created else f"v{result.version}-existing", trigger)
    return result.to_dict()
