"""What an ingest run (``tasks.driver``) calls and returns. :class:`Stages`: its stages as
parameters, each bound to a dataset and store; :func:`plain`: the tasks' own functions
(tests, benchmarks), which the ingest flow wraps in Prefect tasks and joins with its
reporting. :class:`Ingested`: one published batch; :class:`IngestResult`: what the flow
returns and the CLI prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from shardline.core.config import DatasetConfig, SparkSettings
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.store import Store
from shardline.tasks import setaside
from shardline.tasks.batch import Batch
from shardline.tasks.convert.converted import Converted
from shardline.tasks.convert.stage import convert
from shardline.tasks.detect import Scope, detect, resolve_scope, settle_scope
from shardline.tasks.lease import heartbeat, release
from shardline.tasks.publish import Published, publish
from shardline.tasks.settle import Settled, wait_until_quiet
from shardline.tasks.sweep import SweepResult, sweep
from shardline.tasks.validate import ValidationReport, validate


@dataclass(frozen=True)
class Ingested:
    """One batch through publish (``pub.created`` False: it had been published before)."""

    batch: Batch
    conv: Converted
    report: ValidationReport
    pub: Published


def nothing(*_: object) -> None:
    """A hook that does nothing."""


@dataclass(frozen=True)
class Stages:
    """The chain (detect to publish), the strikes that record a batch's failure against its
    sources, settle and sweep, and the reporting hooks (by default: nothing)."""

    detect: Callable[[], Batch | None]
    convert: Callable[[Batch, str], Converted]                  # (batch, pass id)
    validate: Callable[[Converted], ValidationReport]
    publish: Callable[[Converted, ValidationReport], Published]
    strike_convert: Callable[[Batch, str, BaseException], None] = nothing
    strike_validate: Callable[[Converted, ValidationReport], None] = nothing
    settle: Callable[[float], Settled | None] = nothing         # (quiet seconds)
    sweep: Callable[[str], SweepResult | None] = nothing        # (run id to keep)
    progress: Callable[[float], object] = nothing               # percent done
    rejected: Callable[[Batch, Converted, ValidationReport], object] = nothing
    published: Callable[[Ingested], object] = nothing
    lease: Callable[[str], object] = nothing                    # (run id) take/refresh
    unlease: Callable[[str], object] = nothing                  # (run id) the run ended


def plain(store: Store, cfg: DatasetConfig, spark: SparkSettings | None = None, *,
          latest: Callable[[], Manifest | None] | None = None, scope: Scope = Scope(),
          **convert_options: Any) -> Stages:
    """The tasks' functions on ``store``. ``spark``: the environment's by default;
    ``latest``: the version convert starts from (default: read it then); ``scope``: what
    detect looks at (default: reconcile by listing; an event scope without pending keys
    reconciles, decided at the run's first detect or settle); ``convert_options``:
    ``tasks``, ``min_task_bytes``."""
    resolved: list[Scope] = []

    def scope_() -> Scope:
        if not resolved:
            resolved.append(resolve_scope(store, cfg, scope))
        return resolved[0]

    def settle(quiet_s: float) -> Settled | None:
        where = settle_scope(store, cfg, scope_())
        return None if where is None else wait_until_quiet(store, where[0], quiet_s,
                                                           start_after=where[1])

    def convert_(batch: Batch, run_id: str) -> Converted:
        base = latest() if latest else latest_manifest(store, cfg.prefix)
        return convert(store, cfg, spark or SparkSettings.from_env(), batch, run_id, base,
                       **convert_options)

    def strike_validate(conv: Converted, report: ValidationReport) -> None:
        rows = conv.iter_rows(store, columns=["source_key", "status", "rule"])
        setaside.record_validation_failure(store, cfg, conv.batch, conv.run_id, rows,
                                           report.failure_message())

    return Stages(
        detect=lambda: detect(store, cfg, scope_()), convert=convert_,
        validate=lambda conv: validate(store, cfg, conv),
        publish=lambda conv, report: publish(store, cfg, conv, report),
        strike_convert=lambda batch, run_id, exc: setaside.record_conversion_failure(
            store, cfg, batch, run_id, exc),
        strike_validate=strike_validate,
        settle=settle,
        sweep=lambda run_id: sweep(store, cfg, keep_run=run_id, full=False),
        lease=lambda run_id: heartbeat(store, cfg.prefix, run_id),
        unlease=lambda run_id: release(store, cfg.prefix, run_id))


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
    # the run's other batches (bisected suspects, uploads that landed meanwhile), as dicts
    more: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(dataset: str, done: list[Ingested], incoming: str) -> IngestResult:
    """The run's result: its first new version (else its first batch), the others in
    ``more``; nothing new under ``incoming`` (a URI) when ``done`` is empty."""
    if not done:
        return IngestResult(dataset, None,
                            message=f"nothing new under {incoming}; no version published")
    results = [IngestResult(
        dataset=dataset, version=d.pub.version, created=d.pub.created, batch=d.batch.id,
        rows_published=d.pub.rows_published, rows_quarantined=d.pub.rows_quarantined,
        quarantine_by_rule=d.conv.by_rule if d.pub.created else {},
        shards=len(d.pub.new_shards), bytes=d.pub.bytes, manifest=d.pub.manifest,
        message=(f"published version {d.pub.version}" if d.pub.created else
                 f"batch {d.batch.id} was already published as version {d.pub.version}"))
        for d in done]
    first = next((r for r in results if r.created), results[0])
    first.more = [r.to_dict() for r in results if r is not first]
    return first
