"""The ``ingest`` flow: settle -> detect -> convert (Spark) -> validate (GX) -> publish ->
published event -> artifacts -> sweep.

Wiring only; every stage lives in ``tasks/``, its Prefect task in ``flows/ingest_tasks.py``.
Runs against the Prefect server named by ``PREFECT_API_URL`` (the embedded stack's, when it
is up) or in Prefect's ephemeral mode. On a new version it emits
``shardline.dataset.published`` (resource ``shardline.dataset.<name>``, the version in the
payload, and the dataset config *by value*: the TOML document as a dict, so the training
deployment can run on another machine), which triggers training. A run that loses the
publish race to a concurrent ingest (``PublishConflict``) goes back to detect with backoff
and converts only what is still unpublished (``until_published``; docs/reliability.md).
After its first batch a run goes on while detect finds more (``_drain``): a batch that
failed is bisected in the same run, so its innocent sources are published at once and the
failing ones set aside; the run still ends Failed, after that work, when a batch failed.

``config`` is a local path (the CLI), an ``s3://`` URI of the TOML object, or the config by
value (dict or TOML text); see ``flows/config_source.py``. Runs are named
``ingest-<dataset>-v<N>-<trigger>-<id6>`` (``-nothing-new-`` when there was nothing to
ingest, ``v<N>-existing`` when the batch had been published before, ``-running-`` until
then and ``-failed-`` for a run that failed) and tagged with the dataset and the trigger from
its start (``flows/runs.py``).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.events import emit_event
from prefect.runtime import flow_run

from shardline.flows.artifacts import artifact_key, publish_ingest_artifacts
from shardline.flows.config_source import dataset_name, load_with_document
from shardline.flows.ingest_tasks import (
    _environment_failure,
    convert_stage,
    detect_stage,
    load_versions,
    publish_stage,
    sweep_stage,
    until_published,
    validate_stage,
)
from shardline.flows.quarantine_view import quarantine_source
from shardline.flows.runs import label_run, mark_failed, short_id, start_run
from shardline.flows.settings import spark_settings, store_settings
from shardline.tasks.batch import Batch
from shardline.tasks.convert.stage import Converted
from shardline.tasks.publish import Published
from shardline.tasks.settle import Settled, wait_until_quiet
from shardline.tasks.validate import ValidationReport, require_success

PUBLISHED_EVENT = "shardline.dataset.published"


@dataclass
class IngestResult:
    dataset: str
    version: int | None
    created: bool = False
    batch: str | None = None
    rows_published: int = 0
    rows_quarantined: int = 0
    quarantine_by_rule: dict[str, int] = field(default_factory=dict)
    shards: int = 0
    bytes: int = 0
    manifest: str | None = None
    message: str = ""
    # what the run did after its first batch: suspects of failed batches tried by bisection,
    # uploads that landed meanwhile (``_drain``), one IngestResult dict each
    more: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _run_name() -> str:
    """The name until the outcome is known (then ``label_run`` renames the run)."""
    return f"ingest-{dataset_name(flow_run.parameters.get('config'))}-running-{short_id()}"


def _run_id() -> str:
    rid = flow_run.id
    return (str(rid) if rid else uuid.uuid4().hex)[:12].replace("-", "")


@task(name="settle")
def settle_stage(store: Any, prefix: str, quiet_s: float) -> Settled | None:
    """Wait for an upload burst to end; an optimisation only, so a failure to list (a
    transient S3 error) is logged and the run goes on to detect (None)."""
    from shardline.core.store import ObjectStore

    try:
        got = wait_until_quiet(ObjectStore(store), prefix, quiet_s)
    except Exception as exc:            # never fail the run before detect for this
        get_run_logger().warning("settle: could not list %s (%s); detecting now", prefix, exc)
        return None
    get_run_logger().info("settle: waited %.2fs for %.1fs without uploads under %s (%s)",
                          got.waited_s, quiet_s, prefix, got)
    return got


# batches one run takes after its first: enough to bisect a failed batch of thousands of
# sources down to a few poison objects (each failing half is one more batch)
MAX_BATCHES_PER_RUN = 64


@flow(name="ingest", flow_run_name=_run_name, log_prints=True, on_failure=[mark_failed],
      on_crashed=[mark_failed])
def ingest(config: str | dict[str, Any], quiet_seconds: float = 0.0) -> dict[str, Any]:
    """Ingest what is new under the dataset's incoming prefix; returns an IngestResult dict.

    ``quiet_seconds`` > 0 (the upload-triggered deployment) first waits until nothing under
    the prefix was written for that long, so a burst of uploads becomes one version
    (``tasks/settle.py``)."""
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
    if quiet_seconds > 0:
        settle_stage(store, cfg.incoming, quiet_seconds)

    passes = itertools.count()

    def attempt(i: int) -> tuple[Batch, Converted, ValidationReport, Published] | None:
        """One pass; a lost publish race (PublishConflict) starts another from detect, which
        then sees what the racer published as claimed (``until_published``). Every pass of
        the run has its own id (staging folder, object keys, strike record)."""
        batch = detect_stage(cfg, store)
        if batch is None:
            return None
        update_progress_artifact(progress, 20.0)
        n = next(passes)
        conv = convert_stage(cfg, store, spark, batch, run_id if n == 0 else f"{run_id}r{n}")
        update_progress_artifact(progress, 60.0)
        report = validate_stage(cfg, store, conv)
        update_progress_artifact(progress, 75.0)
        if not report.success:
            publish_ingest_artifacts(cfg.name, [], report, batch.id, None,
                                     conv.quarantine_examples(),
                                     quarantine_source(cfg, store, conv.quarantine_shards))
        require_success(report, batch.id)   # a failed suite fails the run; nothing published
        return batch, conv, report, publish_stage(cfg, store, conv, report)

    def one_batch() -> IngestResult | None:
        """detect -> ... -> publish for one batch, its event and artifacts; None: nothing new."""
        done = until_published(attempt)
        if done is None:
            return None
        batch, conv, report, pub = done
        if pub.created:   # first: training need not wait for this run's artifacts
            emit_event(
                event=PUBLISHED_EVENT,
                resource={"prefect.resource.id": f"shardline.dataset.{cfg.name}",
                          "prefect.resource.name": cfg.name},
                payload={"dataset": cfg.name, "version": pub.version, "manifest": pub.manifest,
                         "rows": pub.rows_published, "config": document},
            )
        update_progress_artifact(progress, 90.0)
        publish_ingest_artifacts(cfg.name, load_versions(cfg, store), report, batch.id,
                                 pub.version, conv.quarantine_examples(),
                                 quarantine_source(cfg, store, pub.quarantine_shards))
        return IngestResult(
            dataset=cfg.name, version=pub.version, created=pub.created, batch=batch.id,
            rows_published=pub.rows_published, rows_quarantined=pub.rows_quarantined,
            quarantine_by_rule=conv.by_rule if pub.created else {},
            shards=len(pub.new_shards), bytes=pub.bytes, manifest=pub.manifest,
            message=(f"published version {pub.version}" if pub.created else
                     f"batch {batch.id} was already published as version {pub.version}"))

    results, failure = _drain(one_batch, log)
    update_progress_artifact(progress, 100.0)
    # garbage collection of earlier runs' leftovers: after the version, off its path
    sweep_stage(cfg, store, run_id)
    if failure is not None:      # the UI shows the run failed; what it published stays
        raise failure
    if not results:
        msg = f"nothing new under s3://{store.bucket}/{cfg.incoming}; no version published"
        log.info(msg)
        label_run("ingest", cfg.name, "nothing-new", trigger)
        return IngestResult(cfg.name, None, message=msg).to_dict()
    first = next((r for r in results if r.created), results[0])
    label_run("ingest", cfg.name, first.version if first.created else
              f"v{first.version}-existing", trigger)
    first.more = [r.to_dict() for r in results if r is not first]
    return first.to_dict()


def _drain(one_batch: Callable[[], IngestResult | None], log: Any
           ) -> tuple[list[IngestResult], BaseException | None]:
    """Batches until nothing is new: the first, then what a failure left behind.

    A batch that fails for a reason that is not the environment's has left strikes
    (``tasks.setaside``), so the next detect returns something else: the clean sources
    first, then half of the suspects. A failed batch of n sources is thus bisected within
    this run, and its innocent sources published, instead of one step per nightly run.
    An environment failure (S3 or Spark down, a wrong config, a lost race) ends the run at
    once: the same batch would fail again. Returns (results, first failure)."""
    results: list[IngestResult] = []
    failure: BaseException | None = None
    for _ in range(MAX_BATCHES_PER_RUN):
        try:
            r = one_batch()
        except Exception as exc:
            failure = failure or exc
            if _environment_failure(exc):
                break
            log.warning("batch failed (%s); strikes recorded, trying what is left",
                        str(exc).splitlines()[0][:300])
            continue
        if r is None:
            break
        results.append(r)
    return results, failure
