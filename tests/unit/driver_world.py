"""An in-memory world for the ingest driver (``tasks/driver.py``): a listing, the strike
record and what is published, with plain stage functions over them. No store, no Spark:
the driver's decisions (race retry, strikes and bisection, drain) run as they do in the
flow, on the real ``tasks.setaside`` / ``tasks.detect.new_sources`` bisection."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from shardline.core.errors import PublishConflict
from shardline.tasks.batch import Batch, Source
from shardline.tasks.detect import new_sources
from shardline.tasks.driver import Policy, run_ingest
from shardline.tasks.driver_stages import Ingested, Stages
from shardline.tasks.publish import Published
from shardline.tasks.setaside import Strike, Strikes
from shardline.tasks.validate import ValidationReport


def src(i: int) -> Source:
    return Source(f"in/obj{i:05d}.jsonl", f"etag{i}", 10, "jsonl")


def index(s: Source) -> int:
    return int(s.key[-11:-6])


@dataclass
class World:
    """``crash``: sources whose batch fails in convert (an executor lost: every source of
    the batch is a suspect); ``reject``: sources whose batch fails validation; ``failures``:
    exceptions convert raises, one per call, before anything else (the environment's)."""

    n: int
    crash: set[int] = field(default_factory=set)
    reject: set[int] = field(default_factory=set)
    arrivals: dict[int, list[int]] = field(default_factory=dict)   # batch count -> new
    failures: list[BaseException] = field(default_factory=list)
    conflicts: int = 0                                   # publishes lost to a racer first
    listed: list[Source] = field(default_factory=list)
    strikes: Strikes = field(default_factory=Strikes)
    published: dict[int, int] = field(default_factory=dict)        # index -> batch count
    batches: int = 0
    log: list[str] = field(default_factory=list)                   # what the run did

    def __post_init__(self) -> None:
        self.listed = [src(i) for i in range(self.n)]

    def aside(self) -> set[int]:
        return {int(k[-11:-6]) for k, _ in self.strikes.aside()}

    def detect(self) -> Batch | None:
        self.listed += [src(i) for i in self.arrivals.get(self.batches, [])]
        claimed = {(src(i).key, src(i).etag) for i in self.published}
        batch = new_sources(self.listed, claimed | set(self.strikes.aside()), self.strikes)
        self.batches += batch is not None
        self.log.append(f"detect {len(batch.sources) if batch else None}")
        return batch

    def convert(self, batch: Batch, pass_id: str) -> Any:
        self.log.append(f"convert {pass_id}")
        if self.failures:
            raise self.failures.pop(0)
        if {index(s) for s in batch.sources} & self.crash:
            raise RuntimeError("executor lost")
        return SimpleNamespace(batch=batch, sources=batch.sources, by_rule={})  # stands in

    def validate(self, conv: Any) -> ValidationReport:
        ok = not {index(s) for s in conv.sources} & self.reject
        counts = {"rows": len(conv.sources), "quarantined": 0 if ok else 1, "by_rule": {},
                  "quarantine_fraction": 0.0 if ok else 1.0, "max_quarantine_fraction": 0.5}
        return ValidationReport(ok, ["rows"], [], counts, "mem://report")

    def publish(self, conv: Any, report: ValidationReport) -> Published:
        if self.conflicts:
            self.conflicts -= 1
            self.log.append("conflict")
            raise PublishConflict("a racer published first")
        for s in conv.sources:
            self.published[index(s)] = self.batches
        self.log.append("publish")
        return Published(len(set(self.published.values())), "mem://v", True, [], [],
                         len(conv.sources), 0, 0)

    def strike(self, batch: Batch, pass_id: str, why: str) -> None:
        self.log.append(f"strike {pass_id}")
        self.strikes.docs.append(Strike(
            run=pass_id, order=(float(len(self.strikes.docs)), 0.0, pass_id), final=False,
            suspects=frozenset((s.key, s.etag) for s in batch.sources), reason=why))

    def stages(self, **hooks: Any) -> Stages:
        return Stages(
            detect=self.detect, convert=self.convert, validate=self.validate,
            publish=self.publish,
            strike_convert=lambda b, pass_id, exc: self.strike(b, pass_id, str(exc)),
            strike_validate=lambda conv, report: self.strike(
                conv.batch, f"v{self.batches}", "validation failed"),
            sweep=lambda run_id: self.log.append(f"sweep {run_id}"),
            **hooks)

    def run(self, run_id: str, policy: Policy | None = None, **hooks: Any
            ) -> tuple[list[Ingested], BaseException | None]:
        """One ingest run: what it published (also when it then raised, through the
        ``published`` hook) and the failure it raised (None: none)."""
        done: list[Ingested] = []
        report = hooks.pop("published", lambda d: None)

        def published(d: Ingested) -> None:
            done.append(d)
            report(d)

        try:
            run_ingest(self.stages(published=published, **hooks), run_id,
                       policy or Policy(backoff_s=0.0))
        except Exception as exc:
            return done, exc
        return done, None
