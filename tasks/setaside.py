"""Set-aside: a batch that cannot finish must not block the uploads that come after it.

Detect puts every unclaimed source into one batch, so an object that fails its batch for a
reason a retry cannot fix would fail every later run too, and take every later upload with
it. Each such failure is recorded as a *strike* naming the sources suspected of causing it
(``<prefix>/setaside/strikes/<run>.json``, one document per failed run, so two racing runs
never overwrite each other's record). A source (key, ETag) with :data:`STRIKES` strikes is
*set aside*: detect leaves it out of every later batch, and the next run moves on with the
rest. The strike documents are the record of what was set aside and why.

Who is suspected:

- the conversion failed (not a transient store error): every source of the batch (nothing
  tells which one; the converter contains every per-object and per-row failure it can
  catch, so this is a crash of the Spark task itself: an executor killed by the kernel, a
  segfault in a native library);
- validation failed: the sources whose own quarantined share is over the limit, or, when
  no single source is (the batch as a whole is too small or too bad), all of them;
- the batch holds only empty objects (rule ``empty_object`` for every row): set aside at
  once (a *final* strike), since no later run can make an empty object hold rows.

Suspects are narrowed down by bisection (:func:`next_sources`), so one poison object never
takes the innocent sources of its batch with it:

- sources without a strike go first, in a batch of their own: a clean upload is published
  by the very next run, whatever failed before it;
- when only suspects are left, the run takes one group of them: the sources whose latest
  strike is the same failed run. A group that failed together is halved (the first half by
  key); a group that did not (some of its batch-mates have been published since) is tried
  whole. A passing half is published; a failing half is halved again on the next run;
- a source is set aside once it has :data:`STRIKES` strikes and at least one of them named
  it alone (bisection came down to it), or it has a final strike.

k poison sources among n cost about k·log2(n) extra batches, and every innocent source is
published on the way; the ingest flow runs them in the run that saw the failure
(``tasks/driver.py``, ``drain``).

A set-aside object comes back as soon as it is uploaded again (a new ETag is a new source),
or when its strike documents are deleted.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow.compute as pc

from shardline.core.config import DatasetConfig
from shardline.core.store import Store
from shardline.tasks.batch import Batch, Source

log = logging.getLogger(__name__)

STRIKES = 2

SourceId = tuple[str, str]      # (key, ETag)


def strikes_prefix(prefix: str) -> str:
    return f"{prefix}/setaside/strikes/"


def _record(store: Store, cfg: DatasetConfig, batch: Batch, run_id: str, stage: str,
            reason: str, suspects: Iterable[Source], final: bool = False) -> None:
    listed = [{"key": s.key, "etag": s.etag, "size": s.size} for s in suspects]
    doc = {"run": run_id, "batch": batch.id, "stage": stage, "reason": reason[:2000],
           "final": final, "at": time.time(), "suspects": listed}
    store.put_json(f"{strikes_prefix(cfg.prefix)}{run_id}.json", doc)
    log.warning("batch %s: %s failed in run %s (%s); strike recorded against %d source(s)",
                batch.id, stage, run_id, reason[:200], len(listed))


def record_conversion_failure(store: Store, cfg: DatasetConfig, batch: Batch,
                              run_id: str, exc: BaseException) -> None:
    """A strike against every source of ``batch`` (call for non-transient failures only)."""
    _record(store, cfg, batch, run_id, "convert", f"{type(exc).__name__}: {exc}",
            batch.sources)


def record_validation_failure(store: Store, cfg: DatasetConfig, batch: Batch,
                              run_id: str, rows: object, reason: str) -> None:
    """A strike against the sources that made validation fail. ``rows`` is the converted
    batch's row table (``source_key``, ``status``, ``rule``), or an iterable of such tables
    (``Converted.iter_rows``: one bucket range at a time, so the driver never holds every
    row); only counts per source and the set of rules are kept."""
    import pyarrow as pa

    chunks = [rows] if isinstance(rows, pa.Table) else rows
    assert isinstance(chunks, Iterable)
    total: Counter[str] = Counter()
    bad: Counter[str] = Counter()
    rules: set[str | None] = set()             # None: a row that passed
    any_row = False
    for chunk in chunks:
        assert isinstance(chunk, pa.Table)
        if not chunk.num_rows:
            continue
        any_row = True
        keys = pc.cast(chunk.column("source_key"), pa.string())
        total.update(_value_counts(keys))
        failed = pc.filter(keys, pc.invert(pc.equal(pc.cast(chunk.column("status"),
                                                            pa.string()), "ok")))
        bad.update(_value_counts(failed))
        rules.update(pc.unique(pc.cast(chunk.column("rule"), pa.string())).to_pylist())
    limit = cfg.validation.max_quarantine_fraction
    suspects = [s for s in batch.sources if total[s.key] == 0 or
                bad[s.key] / total[s.key] > limit]
    only_empty = any_row and rules == {"empty_object"}
    _record(store, cfg, batch, run_id, "validate", reason, suspects or batch.sources,
            final=only_empty)


def _value_counts(keys: object) -> dict[str, int]:
    counts = pc.value_counts(keys)
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(),
                    strict=True))


@dataclass(frozen=True)
class Strike:
    """One failed run's record: who was suspected, in what order it happened."""

    run: str
    order: tuple[float, float, str]  # (store's LastModified, writer's time, key): total order
    suspects: frozenset[SourceId]
    final: bool
    reason: str


@dataclass
class Strikes:
    """Every strike of a dataset, read once per detect."""

    docs: list[Strike] = field(default_factory=list)

    @classmethod
    def read(cls, store: Store, cfg: DatasetConfig) -> Strikes:
        docs = []
        for o in store.list(strikes_prefix(cfg.prefix)):
            if not o.key.endswith(".json"):
                continue
            d = store.get_json(o.key)
            at = d.get("at")        # the writer's clock: only breaks ties within a second
            order = (o.last_modified.timestamp(),
                     float(at) if isinstance(at, int | float) else 0.0, o.key)
            docs.append(Strike(
                run=str(d["run"]), order=order,
                suspects=frozenset((s["key"], s["etag"]) for s in d.get("suspects", [])),
                final=bool(d.get("final")),
                reason=f"{d['stage']} failed in run {d['run']}: {d['reason']}"))
        docs.sort(key=lambda s: s.order)
        return cls(docs)

    def aside(self) -> dict[SourceId, str]:
        """(key, ETag) -> reason, for every source set aside (see the module docstring)."""
        counts: Counter[SourceId] = Counter()
        alone: set[SourceId] = set()
        reasons: dict[SourceId, str] = {}
        for doc in self.docs:
            for ks in doc.suspects:
                counts[ks] += STRIKES if doc.final else 1
                reasons[ks] = doc.reason
            if len(doc.suspects) == 1 or doc.final:
                alone |= doc.suspects
        return {ks: reasons[ks] for ks, n in counts.items() if n >= STRIKES and ks in alone}

    def latest(self) -> dict[SourceId, Strike]:
        """Each struck source's most recent strike."""
        out: dict[SourceId, Strike] = {}
        for doc in self.docs:                 # in order: later strikes overwrite earlier
            for ks in doc.suspects:
                out[ks] = doc
        return out


def next_sources(fresh: Sequence[Source], strikes: Strikes) -> tuple[Source, ...]:
    """Which of the ``fresh`` sources (unclaimed, not set aside) the next batch takes.

    Sources with no strike, if there are any; otherwise one group of suspects, halved when
    it failed together (module docstring)."""
    latest = strikes.latest()
    clean = tuple(s for s in fresh if (s.key, s.etag) not in latest)
    if clean or not fresh:
        return clean
    groups: dict[str, list[Source]] = {}
    by_run: dict[str, Strike] = {}
    for s in fresh:
        doc = latest[(s.key, s.etag)]
        groups.setdefault(doc.run, []).append(s)
        by_run[doc.run] = doc

    def rank(run: str) -> tuple[int, tuple[float, float, str]]:
        return len(groups[run]), by_run[run].order     # smallest group, oldest strike first

    run = min(groups, key=rank)
    group = sorted(groups[run], key=lambda s: s.key)
    failed_together = {(s.key, s.etag) for s in group} == by_run[run].suspects
    if failed_together and len(group) > 1:
        group = group[: (len(group) + 1) // 2]
    log.warning("only suspects are left: trying %d source(s) of the %d that failed in run %s "
                "(bisection; a failing source is set aside once it fails alone)",
                len(group), len(groups[run]), run)
    return tuple(group)


def set_aside(store: Store, cfg: DatasetConfig) -> dict[SourceId, str]:
    """(key, ETag) -> reason, for every source set aside."""
    return Strikes.read(store, cfg).aside()
