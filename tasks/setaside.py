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
  catch, so this is a crash of the Spark task itself);
- validation failed: the sources whose own quarantined share is over the limit, or, when
  no single source is (the batch as a whole is too small or too bad), all of them;
- the batch holds only empty objects (rule ``empty_object`` for every row): set aside at
  once (a *final* strike), since no later run can make an empty object hold rows.

A set-aside object comes back as soon as it is uploaded again (a new ETag is a new source),
or when its strike documents are deleted.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

import pyarrow.compute as pc

from shardline.core.config import DatasetConfig
from shardline.core.store import ObjectStore
from shardline.tasks.batch import Batch, Source

log = logging.getLogger(__name__)

STRIKES = 2


def strikes_prefix(prefix: str) -> str:
    return f"{prefix}/setaside/strikes/"


def _record(store: ObjectStore, cfg: DatasetConfig, batch: Batch, run_id: str, stage: str,
            reason: str, suspects: Iterable[Source], final: bool = False) -> None:
    listed = [{"key": s.key, "etag": s.etag, "size": s.size} for s in suspects]
    doc = {"run": run_id, "batch": batch.id, "stage": stage, "reason": reason[:2000],
           "final": final,
           "suspects": listed}
    store.put_json(f"{strikes_prefix(cfg.prefix)}{run_id}.json", doc)
    log.warning("batch %s: %s failed in run %s (%s); strike recorded against %d source(s)",
                batch.id, stage, run_id, reason[:200], len(listed))


def record_conversion_failure(store: ObjectStore, cfg: DatasetConfig, batch: Batch,
                              run_id: str, exc: BaseException) -> None:
    """A strike against every source of ``batch`` (call for non-transient failures only)."""
    _record(store, cfg, batch, run_id, "convert", f"{type(exc).__name__}: {exc}",
            batch.sources)


def record_validation_failure(store: ObjectStore, cfg: DatasetConfig, batch: Batch,
                              run_id: str, rows: object, reason: str) -> None:
    """A strike against the sources that made validation fail. ``rows`` is the converted
    batch's row table (``source_key``, ``status``, ``rule``)."""
    import pyarrow as pa

    assert isinstance(rows, pa.Table)
    keys = rows.column("source_key").to_pylist()
    ok = pc.equal(rows.column("status"), "ok").to_pylist()
    rules = rows.column("rule").to_pylist()
    total, bad = Counter(keys), Counter(k for k, good in zip(keys, ok, strict=True) if not good)
    limit = cfg.validation.max_quarantine_fraction
    suspects = [s for s in batch.sources if total[s.key] == 0 or
                bad[s.key] / total[s.key] > limit]
    only_empty = bool(rules) and all(r == "empty_object" for r in rules)
    _record(store, cfg, batch, run_id, "validate", reason, suspects or batch.sources,
            final=only_empty)


def set_aside(store: ObjectStore, cfg: DatasetConfig) -> dict[tuple[str, str], str]:
    """(key, ETag) -> reason, for every source with :data:`STRIKES` strikes (or a final one)."""
    counts: Counter[tuple[str, str]] = Counter()
    reasons: dict[tuple[str, str], str] = {}
    for o in store.list(strikes_prefix(cfg.prefix)):
        if not o.key.endswith(".json"):
            continue
        doc = store.get_json(o.key)
        for s in doc.get("suspects", []):
            ks = (s["key"], s["etag"])
            counts[ks] += STRIKES if doc.get("final") else 1
            reasons[ks] = f"{doc['stage']} failed in run {doc['run']}: {doc['reason']}"
    return {ks: reasons[ks] for ks, n in counts.items() if n >= STRIKES}
